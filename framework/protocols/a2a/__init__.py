"""A2A: the HTTP app and stdio binding, the executor, task store, platform methods, auth, and the one A2A client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from framework.protocols.a2a.client import Peers
    from framework.runtime.tasks import TaskStore
    from framework.spec.project import Project


def open_remote(project: Project, tasks: TaskStore, environ: Mapping[str, str]) -> Peers:
    """The A2A client side of a runtime: the ``remote`` factory every entry point gives
    :meth:`~framework.runtime.runtime.Runtime.open` (a2a's client is imported on the first call)."""
    from framework.protocols.a2a.client import Peers

    return Peers(project, tasks, environ, timeout=project.config.remote.timeout)
