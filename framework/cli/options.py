"""The options and arguments many ``ca`` commands share, and the project folder they name.

Only typer is imported here: every command module (and ``ca --help``) imports this one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ProjectArg = Annotated[
    Path | None,
    typer.Argument(help="Project folder (holds agents/ and optionally ca.yaml); the same as -p.", show_default=False),
]
ProjectOpt = Annotated[
    Path | None,
    typer.Option(
        "--project",
        "-p",
        help="Project folder (default: the nearest folder, from the current one up, with ca.yaml or agents/).",
        show_default=False,
    ),
]


def project_dir(project: Path | None, positional: Path | None = None) -> Path:
    """The project folder a command works on: ``-p`` or the positional PROJECT as given, else the
    nearest project at or above the current folder (:func:`framework.spec.root.project_root`)."""
    from framework.spec.root import project_root

    if positional is not None and project is not None and positional != project:
        raise typer.BadParameter(f"two projects given ({positional} and -p {project}): give one", param_hint="-p")
    return project_root(project if project is not None else positional)


AgentArg = Annotated[str, typer.Argument(help="The agent's name (see `ca agents list`).")]
