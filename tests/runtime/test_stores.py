"""The conversation store: one conformance suite that SQLite and PostgreSQL both pass; LoopSqliteSaver
keeps AsyncSqliteSaver's file format and never blocks itself; replicas set PostgreSQL up together; a
run reads its conversation's checkpoint once, and never a copy older than the store's.

The PostgreSQL cases run against the real server in a database of this module's own
(:mod:`tests.postgres_db`), and skip saying why where none answers.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import create_checkpoint
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from framework.runtime.governance.secrets import KNOWN
from framework.runtime.stores import CONVERSATIONS_DB, STATE_DIR, open_checkpointer
from tests.postgres_db import fresh_database

SECRET = "pw-conformance-4f2a9c"


def echo_graph(checkpointer: Any) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def turn(graph: Any, thread: str, text: str) -> None:
    await graph.ainvoke({"messages": [HumanMessage(text)]}, config(thread))


async def texts(graph: Any, thread: str) -> list[str]:
    state = await graph.aget_state(config(thread))
    return [m.text for m in state.values["messages"]]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with fresh_database("stores") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """``store.url`` of each backend (None: the default, SQLite under ``.ca/``)."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


# -- conformance: every backend -----------------------------------------------------------------


def test_a_conversation_continues_after_the_store_is_reopened(tmp_path: Path, store_url: str | None) -> None:
    async def main() -> list[str]:
        async with open_checkpointer(tmp_path, url=store_url) as saver:
            await turn(echo_graph(saver), "reopened", "one")
        async with open_checkpointer(tmp_path / "elsewhere", url=store_url) as saver:  # another replica's folder
            graph = echo_graph(saver)
            await turn(graph, "reopened", "two")
            return await texts(graph, "reopened")

    (tmp_path / "elsewhere").mkdir()
    expected = ["one", "echo: one", "two", "echo: two"]
    if store_url is None:  # SQLite is the folder's own: another folder starts afresh
        expected = ["two", "echo: two"]
    assert asyncio.run(main()) == expected


def test_conversations_are_kept_apart_and_listed_newest_first(tmp_path: Path, store_url: str | None) -> None:
    async def main() -> tuple[list[str], list[str], list[int]]:
        async with open_checkpointer(tmp_path, url=store_url) as saver:
            graph = echo_graph(saver)
            await asyncio.gather(turn(graph, "apart-a", "a1"), turn(graph, "apart-b", "b1"))
            await turn(graph, "apart-a", "a2")
            steps = [item.metadata["step"] async for item in saver.alist(config("apart-a"))]
            return await texts(graph, "apart-a"), await texts(graph, "apart-b"), steps

    a, b, steps = asyncio.run(main())
    assert a == ["a1", "echo: a1", "a2", "echo: a2"]
    assert b == ["b1", "echo: b1"]
    assert steps == sorted(steps, reverse=True) and len(steps) >= 4  # the last turn's checkpoint first


def test_a_known_secret_never_reaches_the_store(tmp_path: Path, store_url: str | None) -> None:
    async def main() -> list[str]:
        async with open_checkpointer(tmp_path, url=store_url) as saver:
            graph = echo_graph(saver)
            await turn(graph, "secret", f"the password is {SECRET}")
            return await texts(graph, "secret")

    KNOWN.add([SECRET])
    seen = asyncio.run(main())
    assert seen[0].startswith("the password is ") and SECRET not in "".join(seen)
    assert SECRET not in _everything_stored(tmp_path, store_url)


def test_a_known_secret_a_failed_step_quotes_never_reaches_the_store(tmp_path: Path, store_url: str | None) -> None:
    """A provider's error quoting the key it was sent is kept as the step's error write, masked."""

    class AuthenticationError(Exception):
        def __init__(self, message: str, *, response: object) -> None:  # as a provider SDK's: more than args
            super().__init__(message)
            self.response = response

    def fail(state: MessagesState) -> dict[str, Any]:
        raise AuthenticationError(f"Error code: 401 - Incorrect API key provided: {SECRET}", response=object())

    async def main() -> None:
        async with open_checkpointer(tmp_path, url=store_url) as saver:
            builder = StateGraph(MessagesState)
            builder.add_node("fail", fail)
            builder.add_edge(START, "fail")
            graph = builder.compile(checkpointer=saver)
            with pytest.raises(AuthenticationError):
                await graph.ainvoke({"messages": [HumanMessage("hi")]}, config("failed"), durability="exit")
            state = await graph.aget_state(config("failed"))
            assert [task.error for task in state.tasks] == [
                "AuthenticationError('Error code: 401 - Incorrect API key provided: ***')"
            ]

    KNOWN.add([SECRET])
    asyncio.run(main())
    stored = _everything_stored(tmp_path, store_url)
    assert SECRET not in stored


def _everything_stored(root: Path, url: str | None) -> str:
    """Every byte of every conversation table, as text."""
    if url is None:
        return b"".join(path.read_bytes() for path in (root / STATE_DIR).glob(f"{CONVERSATIONS_DB}*")).decode(
            "utf-8", "replace"
        )
    import psycopg

    with psycopg.connect(url) as conn:
        rows = [
            conn.execute(f"SELECT string_agg(t::text, ' ') FROM {table} t").fetchone()
            for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
        ]
        blobs = conn.execute("SELECT string_agg(encode(blob, 'escape'), ' ') FROM checkpoint_blobs").fetchone()
    return " ".join(str(row[0]) for row in [*rows, blobs] if row is not None)


# -- PostgreSQL ---------------------------------------------------------------------------------


def test_replicas_starting_together_set_up_a_fresh_database_once(tmp_path: Path) -> None:
    """LangGraph's setup() has no lock; without ours, two at once on a fresh database fail most runs."""

    async def main(url: str, root: Path) -> list[str]:
        async def replica(n: int) -> list[str]:
            async with open_checkpointer(root, url=url) as saver:
                graph = echo_graph(saver)
                await turn(graph, f"together-{n}", "hi")
                return await texts(graph, f"together-{n}")

        answers = await asyncio.gather(*(replica(n) for n in range(4)))
        return [text for answer in answers for text in answer]

    for attempt in range(3):
        with fresh_database("setup") as url:
            assert asyncio.run(main(url, tmp_path)) == ["hi", "echo: hi"] * 4, f"attempt {attempt}"


def test_an_unreachable_server_is_one_line_saying_what_to_check(tmp_path: Path) -> None:
    from framework.errors import StoreUnreachable

    async def main() -> None:
        async with open_checkpointer(tmp_path, url="postgresql://ca:hunter2@127.0.0.1:1/nowhere"):
            raise AssertionError("opened a store on port 1")

    with pytest.raises(StoreUnreachable) as raised:
        asyncio.run(main())
    message = str(raised.value)
    assert "\n" not in message and "hunter2" not in message
    assert message.startswith("cannot use the store postgresql://ca:***@127.0.0.1:1/nowhere (")
    assert message.endswith("check store.url in ca.yaml, that the server runs and that the database exists")


def test_a_held_read_is_given_once_as_a_copy_and_dropped_by_a_write(tmp_path: Path, store_url: str | None) -> None:
    """A run's two readers share one read of the latest checkpoint (the second gets a copy the first
    cannot change); a write to the conversation in between, or the end of the hold, means reading again."""

    async def main() -> None:
        async with open_checkpointer(tmp_path, url=store_url) as saver:
            await turn(echo_graph(saver), "held", "one")
            with saver.held.holding("held"):
                first = await saver.aget_tuple(config("held"))
                first.checkpoint["channel_versions"]["changed by the first reader"] = "9"
                second = await saver.aget_tuple(config("held"))
            assert first is not None and second is not None
            assert second.checkpoint["id"] == first.checkpoint["id"]
            assert "changed by the first reader" not in second.checkpoint["channel_versions"]

            with saver.held.holding("held"):
                first = await saver.aget_tuple(config("held"))
                assert first is not None
                newer = create_checkpoint(second.checkpoint, None, 5)
                written = await saver.aput(first.config, newer, {"source": "update", "step": 5}, {})
                after = await saver.aget_tuple(config("held"))
            assert after is not None and after.checkpoint["id"] == newer["id"]
            assert written["configurable"]["checkpoint_id"] == newer["id"]

    asyncio.run(main())


# -- SQLite -------------------------------------------------------------------------------------


def test_a_read_made_while_a_write_waits_for_the_lock_is_not_given_after_it(tmp_path: Path) -> None:
    """A write to the conversation that waits for another process's lock, and a hold that starts
    meanwhile: the read it keeps is older than the write once that lands, so the next read goes to
    the store and sees the write."""

    async def main() -> tuple[str, str]:
        async with open_checkpointer(tmp_path, lock_timeout=5) as saver:
            await turn(echo_graph(saver), "c1", "one")
            saved = await saver.aget_tuple(config("c1"))
            assert saved is not None
            other = sqlite3.connect(tmp_path / STATE_DIR / CONVERSATIONS_DB, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # another process holds the file's write lock
            newer = create_checkpoint(saved.checkpoint, None, 5)
            write = asyncio.create_task(saver.aput(saved.config, newer, {"source": "update", "step": 5}, {}))
            await asyncio.sleep(0.05)
            assert not write.done()
            with saver.held.holding("c1"):
                await saver.aget_tuple(config("c1"))
                other.execute("COMMIT")
                other.close()
                await write
                after = await saver.aget_tuple(config("c1"))
            assert after is not None
            return after.checkpoint["id"], newer["id"]

    seen, written = asyncio.run(main())
    assert seen == written


def test_a_turn_reads_its_conversation_once(tmp_path: Path) -> None:
    """The checks before a run and the graph's start share the read of a conversation with a history;
    without the hold both read it, and a turn still answers on the whole history."""

    def reads(statements: list[str]) -> int:
        return sum(s.startswith("SELECT") and "FROM checkpoints" in s for s in statements)

    async def main() -> tuple[int, int, list[str]]:
        async with open_checkpointer(tmp_path) as saver:
            graph = echo_graph(saver)
            await turn(graph, "c1", "one")
            statements: list[str] = []
            saver.conn.set_trace_callback(statements.append)
            await graph.aget_state(config("c1"))
            await turn(graph, "c1", "two")
            unheld = reads(statements)
            statements.clear()
            with saver.held.holding("c1"):
                await graph.aget_state(config("c1"))
                await turn(graph, "c1", "three")
            return unheld, reads(statements), await texts(graph, "c1")

    unheld, held, seen = asyncio.run(main())
    assert (unheld, held) == (2, 1)
    assert seen == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]


def test_a_conversation_continues_across_the_two_savers(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], list[str]]:
        async with open_checkpointer(tmp_path) as saver:
            await turn(echo_graph(saver), "c1", "one")
        async with aiosqlite.connect(tmp_path / STATE_DIR / CONVERSATIONS_DB) as conn:
            graph = echo_graph(AsyncSqliteSaver(conn))
            seen_by_async = await texts(graph, "c1")
            await turn(graph, "c1", "two")
        async with open_checkpointer(tmp_path) as saver:
            return seen_by_async, await texts(echo_graph(saver), "c1")

    seen_by_async, seen_after = asyncio.run(main())
    assert seen_by_async == ["one", "echo: one"]
    assert seen_after == ["one", "echo: one", "two", "echo: two"]


def test_listing_checkpoints_does_not_hold_the_store_between_items(tmp_path: Path) -> None:
    async def main() -> int:
        async with open_checkpointer(tmp_path) as saver:
            graph = echo_graph(saver)
            await turn(graph, "c1", "one")
            listed = 0
            async for _ in saver.alist(config("c1")):
                listed += 1
                await turn(graph, "c2", f"meanwhile {listed}")  # a write between two items
            return listed

    assert asyncio.run(main()) >= 2
