"""a2a-sdk's event queues on asyncio's own queue, as it has them on Python 3.13.

a2a-sdk needs queues that can be shut down (``shutdown(immediate=...)``, :class:`QueueShutDown`),
which asyncio's queue has only from Python 3.13. Before that it takes culsans' queue, built for
threads and tasks at once: every ``put`` and ``get`` goes through its locks and conditions. A
served request makes several such queues (the task's events, each subscriber's, the request
queue) and sends each event through two or three of them: on Python 3.11 that was about 6% of
the instructions of a ``SendMessage``, for thread safety nothing here uses (a2a-sdk touches its
queues only from the event loop).

:class:`ShutdownQueue` is ``asyncio.Queue`` with Python 3.13's shutdown semantics, raising the
exception a2a-sdk catches (culsans', which its modules import by name).
:func:`use_asyncio_queues` makes a2a-sdk's modules create it; on Python 3.13 and later they use
asyncio's queue already, and nothing changes.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

if sys.version_info < (3, 13):
    from culsans import AsyncQueueShutDown as QueueShutDown
else:  # pragma: no cover - a2a-sdk uses asyncio's own queue there
    from asyncio import QueueShutDown


class ShutdownQueue(asyncio.Queue[Any]):
    """An asyncio queue that can be shut down, as Python 3.13's is.

    After :meth:`shutdown`, ``put`` raises :class:`QueueShutDown`; ``get`` returns what is still
    queued, then raises it; every waiting ``put`` and ``get`` wakes up to find that out. With
    ``immediate=True`` what is queued is dropped (and counted done, so ``join`` returns).
    """

    def __init__(self, maxsize: int = 0) -> None:
        super().__init__(maxsize)
        self.is_shut_down = False

    async def put(self, item: Any) -> None:
        while self.full():
            if self.is_shut_down:
                raise QueueShutDown
            await self._wait(self._putters)  # type: ignore[attr-defined]
        self.put_nowait(item)

    def put_nowait(self, item: Any) -> None:
        if self.is_shut_down:
            raise QueueShutDown
        super().put_nowait(item)

    async def get(self) -> Any:
        while self.empty():
            if self.is_shut_down:
                raise QueueShutDown
            await self._wait(self._getters)  # type: ignore[attr-defined]
        return self.get_nowait()

    def get_nowait(self) -> Any:
        if self.empty() and self.is_shut_down:
            raise QueueShutDown
        return super().get_nowait()

    async def _wait(self, waiters: Any) -> None:
        """Wait to be woken among ``waiters`` (a put or get that could not go on yet)."""
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            waiter.cancel()
            if waiter in waiters:
                waiters.remove(waiter)
            elif not self.is_shut_down:  # it was woken, and cancelled before it took its turn: pass it on
                self._wakeup_next(waiters)  # type: ignore[attr-defined]
            raise

    def shutdown(self, immediate: bool = False) -> None:
        """Refuse every later ``put``; ``immediate``: drop what is queued too. Wakes every waiter."""
        self.is_shut_down = True
        if immediate:
            while not self.empty():
                self._get()
                if self._unfinished_tasks > 0:  # type: ignore[attr-defined]
                    self._unfinished_tasks -= 1  # type: ignore[attr-defined]
            if self._unfinished_tasks == 0:  # type: ignore[attr-defined]
                self._finished.set()  # type: ignore[attr-defined]
        for waiters in (self._getters, self._putters):  # type: ignore[attr-defined]
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)


QUEUE_USERS = (
    "a2a.utils._async_queue_compat",
    "a2a.server.events.event_queue",
    "a2a.server.events.event_queue_v2",
    "a2a.server.agent_execution.active_task",
)
"""The a2a-sdk 1.3 modules that make queues, each with its own name for ``create_async_queue``."""


def use_asyncio_queues() -> None:
    """Make a2a-sdk create :class:`ShutdownQueue` from now on (Python < 3.13; else it does already)."""
    if sys.version_info >= (3, 13):  # pragma: no cover
        return
    import importlib

    for name in QUEUE_USERS:
        module = importlib.import_module(name)
        if not hasattr(module, "create_async_queue"):
            raise RuntimeError(f"{name} no longer has create_async_queue: see framework/protocols/a2a/queues.py")
        setattr(module, "create_async_queue", ShutdownQueue)  # noqa: B010  # a module's global, by name
