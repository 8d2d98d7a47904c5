"""The declarative spec: YAML files -> validated, typed, cross-checked models.

Pure data: this package imports neither langgraph nor starlette. ``load_project`` and
``Project`` are imported on first use, so a light submodule (``providers``) can be
used without paying for pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.spec.loader import Project, load_project

__all__ = ["Project", "load_project"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from framework.spec import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'framework.spec' has no attribute {name!r}")
