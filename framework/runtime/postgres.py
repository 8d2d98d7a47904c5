"""Conversations in PostgreSQL: LangGraph's own AsyncPostgresSaver on a psycopg pool.

Imported only for a PostgreSQL ``store.url`` (:func:`framework.runtime.stores.open_checkpointer`),
so psycopg and langgraph-checkpoint-postgres stay off every SQLite start-up.

* Connections are opened as the saver needs them: autocommit (its ``setup()`` runs CREATE
  INDEX CONCURRENTLY, which refuses a transaction), ``prepare_threshold=0`` (no server-side
  prepared statements, which a pooler such as PgBouncer would mix up) and dict rows.
* ``setup()`` has no lock of its own: replicas starting together on a fresh database race on
  CREATE TABLE. The first to take a PostgreSQL advisory lock migrates; the others poll
  ``pg_try_advisory_lock`` on a side connection (a blocking ``pg_advisory_lock`` would hold a
  transaction open that CREATE INDEX CONCURRENTLY waits for: a deadlock) and then find the
  migrations done.
* The saver's asyncio lock serialises every statement, which a single connection needs and a
  pool does not: each operation takes its own connection, so the lock is dropped and runs of
  different conversations read and write at the same time.
* Secrets: blobs (messages, tool calls) go through the masking serializer; the saver keeps
  primitive channel values (strings) inline in the checkpoint's JSON, past the serializer, so
  those are masked here before it sees them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection, OperationalError
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from framework.errors import StoreBusy
from framework.runtime import fence
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.held_reads import HeldReads
from framework.runtime.store_url import libpq_url, unreachable

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol

POOL_SIZE = 10
"""Connections a process keeps at most for conversations: one per checkpoint read or write in
flight (a run writes one per step), well under PostgreSQL's default of 100 for a few replicas."""
CONNECT_TIMEOUT_S = 10
"""Seconds to wait for the server to answer a new connection before the store is unreachable."""
SETUP_LOCK = 7412290142
"""The advisory lock the replicas take around the saver's migrations (the audit's is ...141)."""
_POLL_S = 0.1


class MaskedPostgresSaver(AsyncPostgresSaver):
    """AsyncPostgresSaver with the strings it stores inline masked (see the module docstring), and a
    run's two reads of its conversation's latest checkpoint made once (:class:`~framework.runtime.held_reads.HeldReads`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = HeldReads()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        read = super().aget_tuple
        return await self.held.read(config, lambda: read(config))

    async def adelete_thread(self, thread_id: str) -> None:
        with self.held.writing(thread_id):
            await super().adelete_thread(thread_id)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        with self.held.writing(config):
            if await fence.lost(config):  # another replica runs the task now: its checkpoints are the conversation's
                return config
            if KNOWN:
                values = {
                    k: KNOWN.text(v) if isinstance(v, str) else v for k, v in checkpoint["channel_values"].items()
                }
                checkpoint = cast("Checkpoint", {**checkpoint, "channel_values": values})
                metadata = cast("CheckpointMetadata", KNOWN.value(metadata))
            return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        with self.held.writing(config):
            if not await fence.lost(config):
                await super().aput_writes(config, writes, task_id, task_path)


async def _set_up(side: AsyncConnection[Any], saver: AsyncPostgresSaver, *, wait: float) -> None:
    """Run the saver's migrations under the advisory lock, polled on ``side`` for up to ``wait`` s."""
    deadline = time.monotonic() + wait
    while True:
        row = await (await side.execute("SELECT pg_try_advisory_lock(%s)", (SETUP_LOCK,))).fetchone()
        if row is not None and row[0]:
            break
        if time.monotonic() > deadline:
            raise StoreBusy(
                f"another process held the conversation tables' set-up lock for more than {wait:g} s"
                " (store.lock_timeout): start again once it has finished",
                data={"retryable": True},
            )
        await asyncio.sleep(_POLL_S)
    try:
        await saver.setup()
    finally:
        await side.execute("SELECT pg_advisory_unlock(%s)", (SETUP_LOCK,))


@asynccontextmanager
async def open_postgres_saver(
    url: str, *, serde: SerializerProtocol, lock_timeout: float
) -> AsyncIterator[AsyncPostgresSaver]:
    """The conversation store at PostgreSQL ``url`` (tables created or migrated), its pool closed on exit.

    A server that does not answer, refuses the login or has no such database is a
    :class:`StoreUnreachable` saying so, before anything else is opened.
    """
    conninfo = libpq_url(url)
    try:
        side = await AsyncConnection.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except OperationalError as exc:
        raise unreachable(url, exc) from exc
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        conninfo, min_size=1, max_size=POOL_SIZE, kwargs=kwargs, open=False, timeout=lock_timeout
    )
    try:
        async with side:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
            saver = MaskedPostgresSaver(pool, serde=serde)
            saver.lock = cast(asyncio.Lock, nullcontext())  # a pooled operation has its own connection
            await _set_up(side, saver, wait=lock_timeout)
    except (OperationalError, PoolTimeout) as exc:
        await pool.close()
        raise unreachable(url, exc) from exc
    except BaseException:
        await pool.close()
        raise
    try:
        yield saver
    finally:
        await pool.close()
