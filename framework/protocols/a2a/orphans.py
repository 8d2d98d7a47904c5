"""The orphans a server resumes: tasks a dead server (this one before a restart, or another replica)
was running, that ``Runtime.settle_orphans`` judged safe to run again and took over.

Such a run has no A2A request: nothing of a2a-sdk follows it. The :class:`Resumer` drives it to its
end and then writes the task's A2A row from the record (``write_settled``), so the row, ``GetTask`` on
every replica and every subscriber (told by the row's ``NOTIFY``) see the answer. A ``CancelTask``
stops it through the task record, as for a run of another process, and a server that stops cancels
it as it cancels its other runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from framework.runtime.events import RunEvent
from framework.runtime.runtime import Runtime
from framework.runtime.task_record import Task

logger = logging.getLogger(__name__)


class Resumer:
    """Runs the orphans this server took over (``Runtime.resumer``) and writes each one's row when it ends."""

    def __init__(self, runtime: Runtime, write: Callable[[Task], Awaitable[None]]) -> None:
        self.runtime = runtime
        self.write = write
        """Writes the A2A row of a task from its record."""
        self.runs: dict[str, asyncio.Task[None]] = {}
        """Task id -> the run resuming it."""
        self._stopping: str | None = None

    def __call__(self, task: Task, events: AsyncIterator[RunEvent]) -> None:
        logger.info("resuming task %s of %s: the process running it stopped", task.id, task.agent)
        self.runs[task.id] = asyncio.create_task(self._run(task, events), name=f"resume {task.id}")

    async def _run(self, task: Task, events: AsyncIterator[RunEvent]) -> None:
        try:
            async for _ in events:  # the run records itself; its events have no client here
                pass
        except asyncio.CancelledError:
            if self._stopping is not None:  # the server stops: ended as its other runs are
                await self.runtime.amark_canceled(task.id, self._stopping)
            raise
        except Exception:  # the run could not end itself: end it failed, never left working
            logger.exception("the resumed run of task %s failed", task.id)
            await self.runtime.afail(task.id, "its resumed run failed; send the message again")
        finally:
            self.runs.pop(task.id, None)
            record = await self.runtime.tasks.afind(task.id)
            if record is not None:
                await self.write(record)

    async def stop(self, timeout: float, reason: str) -> None:
        """Let the resumed runs finish for up to ``timeout`` seconds, then cancel what is left with ``reason``."""
        runs = list(self.runs.values())
        if not runs:
            return
        _, left = await asyncio.wait(runs, timeout=timeout)
        self._stopping = reason
        for run in left:
            run.cancel()
        if left:
            await asyncio.wait(left)
