"""A conversation's latest checkpoint, read once for the two readers of a run (both checkpoint savers)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from langgraph.checkpoint.base import copy_checkpoint

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import CheckpointTuple


class _Slot:
    """A conversation's latest checkpoint as read by the first reader of a run (once ``kept``)."""

    __slots__ = ("kept", "saved")

    def __init__(self) -> None:
        self.kept = False
        self.saved: CheckpointTuple | None = None


def _latest_of(config: RunnableConfig) -> str | None:
    """The thread whose latest root checkpoint ``config`` reads; None for a checkpoint named by id or
    a subgraph's (a namespace)."""
    conf = config.get("configurable") or {}
    if conf.get("checkpoint_ns") or conf.get("checkpoint_id") or conf.get("thread_id") is None:
        return None
    return str(conf["thread_id"])


class HeldReads:
    """A conversation's latest checkpoint, read once for the two readers of a run.

    A run reads its conversation's latest checkpoint twice: the Runner's ``aget_state`` (whose owner,
    pause and values it checks before it starts) and LangGraph's loop as it starts; on a conversation
    with a history each read is mostly the decode of every message. Inside :meth:`holding` (the
    Runner, for a run that holds the conversation's turn) the first read of the thread's latest
    checkpoint keeps a copy (of its dicts: ``aget_state`` applies pending writes to the checkpoint it
    read), and the next read takes that copy instead of reading again; then reads go to the store as
    before. An async write to the thread through this saver in between (``aput``, ``aput_writes``,
    ``adelete_thread``, each inside :meth:`writing`) drops the copy; the sync writes are not used
    during a run, and the run holds its conversation's turn, which keeps other writers out.
    """

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}

    @contextmanager
    def holding(self, thread_id: str) -> Iterator[None]:
        slot = _Slot()
        self._slots[thread_id] = slot
        try:
            yield
        finally:
            if self._slots.get(thread_id) is slot:
                del self._slots[thread_id]

    async def read(
        self, config: RunnableConfig, read: Callable[[], Awaitable[CheckpointTuple | None]]
    ) -> CheckpointTuple | None:
        thread = _latest_of(config)
        if thread is None or (slot := self._slots.get(thread)) is None:
            return await read()
        if slot.kept:
            del self._slots[thread]  # given once
            return slot.saved
        saved = await read()
        if saved is not None and self._slots.get(thread) is slot:  # not dropped by a write meanwhile
            slot.saved = saved._replace(
                checkpoint=copy_checkpoint(saved.checkpoint),
                metadata=saved.metadata.copy(),
                pending_writes=None if saved.pending_writes is None else list(saved.pending_writes),
            )
        slot.kept = True
        return saved

    @contextmanager
    def writing(self, config: RunnableConfig | str) -> Iterator[None]:
        """Around a write to the thread of ``config`` (or that id): a copy held of it is out of date, and
        so is one kept by a read that came while the write waited (for another process's lock, for
        the fence), so it is dropped before and after."""
        thread = config if isinstance(config, str) else (config.get("configurable") or {}).get("thread_id")
        if thread is None:
            yield
            return
        self._slots.pop(str(thread), None)
        try:
            yield
        finally:
            self._slots.pop(str(thread), None)
