"""ShutdownQueue behaves as the culsans queue a2a-sdk was written against, and a2a-sdk uses it.

Every behaviour test runs on both queues: ours, and culsans' async side (what a2a-sdk 1.3 takes
on Python < 3.13), so a difference between them fails here, not in a served task.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import culsans
import pytest

from framework.protocols.a2a.queues import QueueShutDown, ShutdownQueue, use_asyncio_queues

QUEUES: dict[str, Callable[..., Any]] = {
    "ours": ShutdownQueue,
    "culsans": lambda maxsize=0: culsans.Queue(maxsize).async_q,
}


def run(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run on an event loop of its own (the suite has no async test plugin)."""

    @functools.wraps(test)
    def sync(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return sync


@pytest.fixture(params=sorted(QUEUES))
def make(request: pytest.FixtureRequest) -> Callable[..., Any]:
    return QUEUES[request.param]


async def _waiting(task: asyncio.Task[Any]) -> None:
    for _ in range(5):  # let it reach its wait
        await asyncio.sleep(0)
    assert not task.done()


@run
async def test_shutdown_wakes_a_waiting_get_with_queue_shut_down(make: Callable[..., Any]) -> None:
    queue = make()
    getter = asyncio.create_task(queue.get())
    await _waiting(getter)
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(getter, 1)


@run
async def test_after_shutdown_puts_are_refused_and_what_was_queued_is_still_got(make: Callable[..., Any]) -> None:
    queue = make()
    await queue.put("a")
    await queue.put("b")
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        await queue.put("c")
    with pytest.raises(QueueShutDown):
        queue.put_nowait("c")
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    with pytest.raises(QueueShutDown):
        await queue.get()
    with pytest.raises(QueueShutDown):
        queue.get_nowait()


@run
async def test_immediate_shutdown_drops_the_queued_items_and_join_returns(make: Callable[..., Any]) -> None:
    queue = make()
    for item in range(3):
        await queue.put(item)
    joined = asyncio.create_task(queue.join())
    await _waiting(joined)
    queue.shutdown(immediate=True)
    await asyncio.wait_for(joined, 1)
    assert queue.empty()
    with pytest.raises(QueueShutDown):
        await queue.get()


@run
async def test_shutdown_wakes_a_put_waiting_on_a_full_queue(make: Callable[..., Any]) -> None:
    queue = make(1)
    await queue.put("first")
    putter = asyncio.create_task(queue.put("second"))
    await _waiting(putter)
    queue.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(putter, 1)
    assert await queue.get() == "first"


@run
async def test_an_item_is_never_lost_to_a_get_cancelled_as_it_was_woken(make: Callable[..., Any]) -> None:
    queue = make()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await _waiting(first)
    await _waiting(second)
    queue.put_nowait("item")  # wakes the first getter...
    first.cancel()  # ...which is cancelled before it runs: the second gets the item
    assert await asyncio.wait_for(second, 1) == "item"
    assert first.cancelled() or first.result() == "item"


@run
async def test_task_done_and_join_count_as_asyncio_does(make: Callable[..., Any]) -> None:
    queue = make()
    await queue.put("x")
    joined = asyncio.create_task(queue.join())
    await _waiting(joined)
    assert await queue.get() == "x"
    queue.task_done()
    await asyncio.wait_for(joined, 1)
    with pytest.raises(ValueError):
        queue.task_done()


@run
async def test_a2a_sdks_event_queues_are_ours_once_installed() -> None:
    from a2a.server.events.event_queue_v2 import EventQueueSource

    use_asyncio_queues()
    source = EventQueueSource()
    assert isinstance(source.queue, ShutdownQueue)
    sink = await source.tap()
    await source.enqueue_event("event")  # type: ignore[arg-type]  # any object goes through
    assert await asyncio.wait_for(sink.dequeue_event(), 1) == "event"
    await source.close(immediate=True)
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(sink.dequeue_event(), 1)
