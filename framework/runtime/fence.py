"""The fence of a run: whether the process running a task still owns it, asked before each tool runs.

With replicas on PostgreSQL a process whose event loop was held longer than its lease (a VM pause,
a loaded host) may find that another replica took its task over (``Runtime.settle_orphans``) and is
running it again. Its own run must then stop before it does anything the other run will do too.
The governance middleware audits each tool call (``tool.call``) and only then asks the fence: one
compare-and-set that renews this process's lease if it still holds the task. A taker reads the audit
after it took the task, so of the two either the taker sees the call (and ends the task ``failed``
instead of running it again) or the owner sees it lost the task (and its tool does not run). A run
that lost its task raises :class:`~framework.errors.TaskTakenOver`. The fence is asked again before
the run's checkpoints are written (:func:`lost`) and before its end is recorded, so a run that lost its
task with no tool call (held while its model answered) writes nothing either: its client gets
``TaskTakenOver``, the task record and the conversation stay the new owner's.
On SQLite (one machine) a task is only taken over once its process is gone: there is no fence.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

KEY = "ca_fence"
"""Where a run's config (``configurable``) carries its :class:`Fence`, for the checkpointer."""


class Fence:
    """Asks whether this process still owns a task; remembers when it did not."""

    def __init__(self, holds: Callable[[], Awaitable[bool]]) -> None:
        self._holds = holds
        self.lost = False
        """Whether the task was found taken over: nothing more of this run is written."""

    async def __call__(self) -> bool:
        """Whether this process still holds the task (its lease renewed); False from the first time it did not."""
        if not self.lost and not await self._holds():
            self.lost = True
        return not self.lost


async def lost(config: Any) -> bool:
    """Whether the run of this config (a checkpointer's) lost its task (asked now): its checkpoints are not written."""
    fence = ((config or {}).get("configurable") or {}).get(KEY)
    return isinstance(fence, Fence) and not await fence()
