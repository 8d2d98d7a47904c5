"""The one turn loop: drive a run until it ends or pauses, ask for a decision, resume.

Every entry point runs its turns through :func:`drive_turn` and supplies only a
:class:`TurnView` — how it shows an event, and how (whether) it asks about a pause:

    ca run / ca approve   prints events; asks the person at the terminal (none without one)
    ACP                   session/update per event; session/request_permission per pause
    A2A                   task events; never asks — the turn ends input-required, and the
                          decision arrives later as a message of its own

A view that cannot or will not decide returns ``None``: the turn then ends where the run
paused, the task waiting (``input-required``) for a decision from anywhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from framework.errors import RunError
from framework.runtime.events import Paused, RunEvent, RunFinished

if TYPE_CHECKING:
    from framework.runtime.runtime import Runtime


class TurnView(Protocol):
    """What an entry point does with one turn's events and pauses."""

    async def show(self, event: RunEvent) -> None:
        """Show one event (``RunFinished`` included, last)."""
        ...

    async def decide(self, finished: RunFinished, pauses: list[Paused]) -> Mapping[str, Any] | None:
        """A decision for the task's pauses (as :meth:`Runtime.decide` takes it), or None to end the turn."""
        ...


async def drive_turn(
    runtime: Runtime, events: AsyncIterator[RunEvent], view: TurnView
) -> tuple[RunFinished, list[Paused]]:
    """Show ``events`` to ``view``; while the run pauses and ``view`` decides, resume it with that.

    Returns how the last run ended and what it paused for (empty unless ``input-required``).
    """
    while True:
        finished: RunFinished | None = None
        pauses: list[Paused] = []
        async for event in events:
            if isinstance(event, Paused):
                pauses.append(event)
            elif isinstance(event, RunFinished):
                finished = event
            await view.show(event)
        if finished is None:
            raise RunError("the run ended without a result")
        if finished.state != "input-required" or not pauses:
            return finished, pauses
        decision = await view.decide(finished, pauses)
        if decision is None:
            return finished, pauses
        events = runtime.decide(finished.task_id, decision)
