"""The intake of ``ca serve``: a burst of messages starts in the order it came, a few at a time,
and nothing keeps its place longer than the hold (framework.protocols.a2a.intake)."""

from __future__ import annotations

import asyncio

from framework.protocols.a2a.intake import Intake


def test_a_burst_goes_in_a_few_at_a_time_in_the_order_it_came() -> None:
    async def go() -> tuple[list[int], list[int]]:
        intake = Intake(places=2, hold=60)
        entered: list[int] = []
        leave = {i: asyncio.Event() for i in range(5)}

        async def message(i: int) -> None:
            async with intake.place():
                entered.append(i)
                await leave[i].wait()

        runs = []
        for i in range(5):
            runs.append(asyncio.create_task(message(i)))
            await asyncio.sleep(0)  # each arrives after the one before
        await asyncio.sleep(0.05)
        first = list(entered)
        for i in range(5):
            leave[i].set()
            await asyncio.sleep(0.01)
        await asyncio.gather(*runs)
        return first, entered

    first, entered = asyncio.run(go())
    assert first == [0, 1]  # two places: the others wait
    assert entered == [0, 1, 2, 3, 4]  # and go in as they came


def test_a_message_that_keeps_running_gives_its_place_back_after_the_hold() -> None:
    async def go() -> float:
        intake = Intake(places=1, hold=0.05)
        holder_in = asyncio.Event()

        async def holder() -> None:
            async with intake.place():
                holder_in.set()
                await asyncio.sleep(2)  # e.g. waiting for its model, or for another request

        running = asyncio.create_task(holder())
        await holder_in.wait()
        start = asyncio.get_running_loop().time()
        async with intake.place():
            waited = asyncio.get_running_loop().time() - start
        running.cancel()
        return waited

    waited = asyncio.run(go())
    assert 0.03 <= waited < 1.0  # the hold, not the holder's two seconds


def test_a_message_given_up_while_waiting_takes_no_place() -> None:
    async def go() -> bool:
        intake = Intake(places=1, hold=60)
        async with intake.place():
            waiting = asyncio.create_task(intake.place().__aenter__())
            await asyncio.sleep(0.01)
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        try:  # the place the holder gave back is free: nothing leaked to the canceled one
            async with asyncio.timeout(0.5), intake.place():
                return True
        except TimeoutError:
            return False

    assert asyncio.run(go())


def test_fewer_messages_than_places_never_wait_and_each_loop_has_its_own_places() -> None:
    intake = Intake(places=3, hold=60)

    async def go() -> None:
        async with intake.place(), intake.place(), intake.place():
            pass

    asyncio.run(go())
    asyncio.run(asyncio.wait_for(go(), 1))  # a new loop (an app served again) is not stuck on the old one's
