"""The order in which a burst of messages starts running on ``ca serve``: its intake.

Each request is a task on the server's event loop, and the loop gives its ready tasks a step each,
in turn. When many messages arrive at once (a thousand, say, for an agent whose model takes two
seconds), each of them takes one step per turn of the loop, so the first reaches its model call
only when the last has done nearly all the work before its own: every model call starts late, at
about the same time, and every answer comes at the very end (the wall time is the model's delay
plus all the CPU of all the runs, nothing overlapping).

The intake lets a few messages at a time (:data:`PLACES`) go ahead of those that came after them.
Each holds its place until it is answered or for :data:`HOLD_S`, whichever comes first: by then a
run has usually reached its model call, and while it waits for the model the loop serves the next
ones. The others wait for a place in the order they came. Nothing holds a place longer than
:data:`HOLD_S`: a message that a run sends to its own server (an agent calling an agent) waits
for the messages that came before it, each keeping its place that long at most, never for the
run that waits for it; and a loop busier than that (a slower machine) is served as it would be
without the intake. With fewer messages in flight than places, nobody waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

PLACES = 16
"""How many new messages go ahead of the rest at once."""
HOLD_S = 0.005
"""How long a message keeps its place at most (seconds)."""
MESSAGE_METHODS = frozenset({"SendMessage", "SendStreamingMessage", "message/send", "message/stream"})
"""The JSON-RPC methods (A2A 1.0 and 0.3) that take a place."""
MESSAGE_PATHS = ("/message:send", "/message:stream")
"""The ends of the HTTP+JSON (REST) paths that take a place."""


class Intake:
    """The places of one server (see the module's docstring)."""

    def __init__(self, places: int = PLACES, hold: float = HOLD_S) -> None:
        self.places = places
        self.hold = hold
        self._free: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def _semaphore(self) -> asyncio.Semaphore:
        """The places of the running loop (an app served again on another loop gets new ones)."""
        loop = asyncio.get_running_loop()
        if self._free is None or self._free[0] is not loop:
            self._free = (loop, asyncio.Semaphore(self.places))
        return self._free[1]

    @asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        """Wait for a place, in order of arrival; it is given back on leaving, or after :attr:`hold`."""
        free = self._semaphore()
        await free.acquire()
        held = True

        def give_back() -> None:
            nonlocal held
            if held:
                held = False
                free.release()

        timer = asyncio.get_running_loop().call_later(self.hold, give_back)
        try:
            yield
        finally:
            timer.cancel()
            give_back()
