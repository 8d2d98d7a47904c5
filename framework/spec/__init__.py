"""The declarative spec: YAML files -> validated, typed, cross-checked models.

Pure data: this package imports neither langgraph nor starlette. ``load_project`` and
``Project`` are imported on first use, so a light submodule (``providers``) can be
used without paying for pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.spec.loader import load_project
    from framework.spec.project import Project

__all__ = ["Project", "load_project"]


def __getattr__(name: str) -> Any:
    if name == "load_project":
        from framework.spec.loader import load_project

        return load_project
    if name == "Project":
        from framework.spec.project import Project

        return Project
    raise AttributeError(f"module 'framework.spec' has no attribute {name!r}")
