"""The Runtime driven in-process, as the CLI and the servers drive it: send tasks, decide pauses.

For tests of what the runtime does (budgets, contracts, governance, agent calls) without a
process around it: :func:`drive` runs a script of sends and decisions through one Runtime
and returns each step's events; :func:`finished` and :func:`results` pick out what a user sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from framework.runtime.events import RunEvent, RunFinished, ToolCallFinished
from framework.runtime.runtime import Runtime
from framework.spec import load_project

Step = tuple[str, str] | Mapping[str, Any]
"""(conversation, message) sends a new task; a mapping decides the last task that paused."""


def drive(root: Path, agent: str, *steps: Step, tokens: bool = True) -> list[list[RunEvent]]:
    """Run ``steps`` through one Runtime on ``root``; the events of each (sends without ``tokens``:
    each model turn's text whole, as for a caller that waits for the answer)."""

    async def go() -> list[list[RunEvent]]:
        runs: list[list[RunEvent]] = []
        async with AsyncExitStack() as stack:
            rt = await Runtime.open(load_project(root), stack=stack)
            for step in steps:
                if isinstance(step, tuple):
                    conversation, text = step
                    runs.append([e async for e in rt.send(agent, text, conversation=conversation, tokens=tokens)])
                else:
                    paused = finished(runs[-1])
                    assert paused.state == "input-required", paused
                    runs.append([e async for e in rt.decide(paused.task_id, step)])
        return runs

    return asyncio.run(go())


def finished(events: Sequence[RunEvent]) -> RunFinished:
    """The run's last event, which must be its end."""
    last = events[-1]
    assert isinstance(last, RunFinished), last
    return last


def results(events: Sequence[RunEvent], *, nested: bool = False) -> list[ToolCallFinished]:
    """Tool results of the asked agent (or, with ``nested``, of the agents it called)."""
    return [e for e in events if isinstance(e, ToolCallFinished) and bool(e.source) == nested]
