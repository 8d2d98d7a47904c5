"""How the runtime reaches agents outside its process: an interface the protocol layer supplies.

The runtime speaks no wire protocol. Remote agent calls (``agent: URL`` tools) and the agents
of the registries in ``ca.yaml`` reach it through :class:`RemoteAgents`, built by the factory
an entry point passes to :meth:`~framework.runtime.runtime.Runtime.open` (the A2A client, in
``framework.protocols.a2a.client``). A runtime opened without one refuses remote calls with a
clear message and reports each registry as unreachable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from framework.compiler.bundle import RemoteAgent

if TYPE_CHECKING:
    from framework.runtime.tasks import TaskStore
    from framework.spec.project import Project


@dataclass
class Discovery:
    """The agents found in the project's registries, and a line per registry that could not be read."""

    agents: list[RemoteAgent] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class RemoteAgents(Protocol):
    """The client side of one runtime: calls remote agents, reads registries. One serves every
    bundle of the runtime; a call or a discovery runs within :meth:`bundle` of the bundle it is for."""

    def bundle(self, project: Project, environ: Mapping[str, str]) -> AbstractContextManager[None]:
        """Within, calls use ``project``'s registries and remote settings, and read variables in ``environ``."""
        ...

    async def call_tool(self, url: str, text: str) -> tuple[str, dict[str, Any]]:
        """Ask the agent at ``url``; (its answer, the tool artifact: usage, remote task ids)."""
        ...

    async def discover(self) -> Discovery:
        """Every agent of every registry of the project in effect."""
        ...

    async def close(self) -> None: ...


RemoteFactory = Callable[["Project", "TaskStore", Mapping[str, str]], RemoteAgents]
"""(project, task store, environment) -> the client side; called on the first remote call."""
