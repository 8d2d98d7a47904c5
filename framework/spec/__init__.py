"""The declarative spec: YAML files -> validated, typed, cross-checked models.

Pure data: this package imports neither langgraph nor starlette.
"""

from __future__ import annotations

from framework.spec.loader import Project, load_project

__all__ = ["Project", "load_project"]
