"""Which folder is the project: the nearest folder, from where a command runs upwards, that holds
``ca.yaml`` (or ``ca.yml``) or ``agents/``.

Standard library only: ``ca run --stdio`` finds its project before anything heavy is imported.
Every command uses it (``-p/--project`` names the folder instead), and so does ACP's
``session/new`` for the editor's ``cwd``.
"""

from __future__ import annotations

from pathlib import Path

MARKERS = ("ca.yaml", "ca.yml")
"""Files that make a folder a project (besides an ``agents/`` folder)."""


def is_project(folder: Path) -> bool:
    """Whether ``folder`` holds ``ca.yaml``, ``ca.yml`` or an ``agents/`` folder."""
    try:
        return any((folder / name).is_file() for name in MARKERS) or (folder / "agents").is_dir()
    except OSError:  # unreadable: not a project we can use
        return False


def find_root(start: Path) -> Path | None:
    """The nearest project folder at or above ``start`` (resolved), or None when there is none."""
    here = start.resolve()
    for folder in (here, *here.parents):
        if is_project(folder):
            return folder
    return None


def project_root(explicit: Path | None, cwd: Path | None = None) -> Path:
    """The folder ``-p/--project`` named, as given; else the project at or above ``cwd`` (default:
    the current folder); else ``cwd`` itself, whose loading then says that it has no agents."""
    if explicit is not None:
        return explicit
    here = cwd if cwd is not None else Path.cwd()
    return find_root(here) or here
