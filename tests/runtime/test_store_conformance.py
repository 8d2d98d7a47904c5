"""One contract, every engine: the task database behaves the same on SQLite (``.ca/tasks.db``) and PostgreSQL.

Each test runs on both. The PostgreSQL runs use a database of this module's own (created and
dropped; skipped with the reason where no server answers), emptied before each test. Races are
real processes (``multiprocessing``, spawned: each opens its own connections), repeated.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from framework.errors import ConversationBusy, RunError, StoreUnreachable
from framework.protocols.acp.sessions import SessionStore
from framework.runtime.database import open_database
from framework.runtime.remote_calls import RemoteCalls
from framework.runtime.schema import LATEST, MIGRATIONS, connect, migrate, version
from framework.runtime.task_record import Held, Pending
from framework.runtime.tasks import AlreadyDecided, TaskStore
from framework.runtime.turns import Turns
from tests.postgres_db import fresh_database

RACERS = 4
ROUNDS = 3


@dataclass(frozen=True)
class Engine:
    name: str
    root: Path
    url: str

    def tasks(self) -> TaskStore:
        return TaskStore.open(self.root, url=self.url)


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with fresh_database("conformance") as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    if request.param == "sqlite":
        return Engine("sqlite", tmp_path, "")
    url: str = request.getfixturevalue("postgres_url")
    db = connect(tmp_path, url)
    try:
        db.execute("TRUNCATE tasks, remote_calls, turns, sessions")
    finally:
        db.close()
    return Engine("postgresql", tmp_path, url)


def _claimer(root: str, url: str, task_ids: list[str], start: object, out: object) -> None:
    """In its own process: for each task, wait until every racer is ready, then try to take its decision."""
    store = TaskStore.open(Path(root), url=url)
    try:
        for task_id in task_ids:
            start.wait()  # type: ignore[attr-defined]
            try:
                store.claim(task_id, f"racer-{os.getpid()}")
                out.put((task_id, "won"))  # type: ignore[attr-defined]
            except AlreadyDecided:
                out.put((task_id, "lost"))  # type: ignore[attr-defined]
    finally:
        store.close()


def _migrator(root: str, url: str, start: object, out: object) -> None:
    db = open_database(Path(root), url)
    try:
        start.wait()  # type: ignore[attr-defined]  # both migrate at the same moment
        out.put([m.version for m in migrate(db)])  # type: ignore[attr-defined]
    finally:
        db.close()


def test_tasks_are_created_read_listed_and_updated(engine: Engine) -> None:
    store = engine.tasks()
    try:
        first = store.create(agent="a", conversation="c1", source="cli", input="héllo 100% ?", caller="team-a")
        second = store.create(agent="b", conversation="c1", source="a2a-http", input="two", task_id="abcdef-2")
        assert store.get(first.id) == first
        assert store.get("abcdef").id == "abcdef-2"  # a unique prefix
        assert store.find("abcdef") is None  # find takes exact ids only
        with pytest.raises(RunError, match="not found"):
            store.get("nope")
        assert [t.id for t in store.list()] == [second.id, first.id]  # newest first
        assert [t.id for t in store.list(caller="team-a")] == [first.id]
        assert store.conversation("c1").bytes == len("héllo 100% ?".encode()) + len(b"two")
        pause = Pending(interrupt_id="i1", payload={"kind": "approval"}, paused_at="2026-01-01T00:00:00+00:00")
        paused = store.update(first.id, state="input-required", pending=(pause,), usage={"tokens": 3})
        assert (paused.state, paused.pending, paused.usage) == ("input-required", (pause,), {"tokens": 3})
        assert store.waiting_in("c1") and store.list(pending_only=True) == [paused]
        done = asyncio.run(store.aupdate(second.id, state="completed", output="fine"))
        assert (done.state, done.output) == ("completed", "fine")
        assert store.counts() == {"input-required": 1, "completed": 1}
        assert store.conversation("c1").callers == {"team-a", ""}
        held = store.conversation("c1").bytes
        store.create(agent="a", conversation="c1", source="agent-call", input="a call", parent=first.id, caller="x")
        assert store.conversation("c1") == Held(frozenset({"team-a", "", "x"}), held)  # a call's size is its caller's
        calls = RemoteCalls(store.db)
        asyncio.run(calls.asave("k", "http://one", "t1", "ctx1"))
        asyncio.run(calls.asave("k", "http://two", "t2", "ctx2"))  # the same key: replaced
        assert asyncio.run(calls.afind("k")) == {"url": "http://two", "task_id": "t2", "context_id": "ctx2"}
        assert store.adopt("team-b", "a2a-http") == 1
        assert store.get(second.id).caller == "team-b"
    finally:
        store.close()


def test_a_pause_is_abandoned_when_a_task_ended_early_and_none_waits(engine: Engine) -> None:
    store = engine.tasks()
    try:
        waiting = store.create(agent="a", conversation="c1", source="cli", input="go")
        assert not asyncio.run(store.apause_abandoned_in("c1"))  # nothing ended early
        store.update(waiting.id, state="input-required")
        ended = store.create(agent="a", conversation="c1", source="cli", input="again")
        store.update(ended.id, state="failed")
        assert not asyncio.run(store.apause_abandoned_in("c1"))  # one still waits for its decision
        store.update(waiting.id, state="canceled")
        assert asyncio.run(store.apause_abandoned_in("c1"))
        assert not asyncio.run(store.apause_abandoned_in("c2"))  # another conversation
    finally:
        store.close()


@pytest.mark.timeout(300)  # spawned processes import ca: slow on a loaded machine
def test_a_decision_is_taken_exactly_once_by_racing_processes(engine: Engine) -> None:
    store = engine.tasks()
    spawn = multiprocessing.get_context("spawn")
    try:
        ids = []
        for _ in range(ROUNDS):
            task = store.create(agent="a", conversation="c", source="cli", input="go")
            store.update(task.id, state="input-required")
            ids.append(task.id)
        start, out = spawn.Barrier(RACERS), spawn.Queue()
        racers = [
            spawn.Process(target=_claimer, args=(str(engine.root), engine.url, ids, start, out)) for _ in range(RACERS)
        ]
        for racer in racers:
            racer.start()
        results: dict[str, list[str]] = {task_id: [] for task_id in ids}
        for _ in range(ROUNDS * RACERS):
            task_id, result = out.get(timeout=90)
            results[task_id].append(result)
        for racer in racers:
            racer.join(timeout=30)
            assert racer.exitcode == 0
        for task_id in ids:  # each round: exactly one racer won, the others were told it was decided
            assert sorted(results[task_id]) == ["lost"] * (RACERS - 1) + ["won"]
            decided = store.get(task_id)
            assert decided.state == "working" and decided.decided_by.startswith("racer-")
            with pytest.raises(AlreadyDecided, match=f"already decided by {decided.decided_by}"):
                store.claim(task_id, "late")
    finally:
        store.close()


def test_an_ending_and_a_decision_at_once_one_wins(engine: Engine) -> None:
    one, other = engine.tasks(), engine.tasks()
    try:

        async def race() -> tuple[bool, bool]:
            task = await one.acreate(agent="a", conversation="c", source="cli", input="go")
            await one.aupdate(task.id, state="input-required")
            canceled = await one.acancel_paused(task.id, "bob", "canceled by bob")
            try:
                await other.aclaim(task.id, "alice")
            except AlreadyDecided:
                return canceled, False
            return canceled, True

        assert asyncio.run(race()) == (True, False)
        [task] = one.list()
        assert (task.state, task.decided_by) == ("canceled", "bob")
        assert asyncio.run(other.aend(task.id, state="failed")) is False  # final already: nothing changes
    finally:
        one.close()
        other.close()


def test_a_cancel_request_is_seen_through_another_connection(engine: Engine) -> None:
    asker, runner = engine.tasks(), engine.tasks()
    try:
        task = runner.create(agent="a", conversation="c", source="cli", input="go")
        idle = runner.create(agent="a", conversation="c", source="cli", input="idle")
        assert runner.cancel_requests([task.id, idle.id]) == {}
        assert asyncio.run(asker.arequest_cancel(task.id, "cli:bob")) is True
        assert runner.cancel_requests([task.id, idle.id]) == {task.id: "cli:bob"}
        assert asyncio.run(runner.acancel_requests([task.id])) == {task.id: "cli:bob"}
        runner.update(idle.id, state="completed")
        assert asyncio.run(asker.arequest_cancel(idle.id, "cli:bob")) is False  # not running: nothing to ask
    finally:
        asker.close()
        runner.close()


def test_a_dead_process_task_is_settled_once(engine: Engine) -> None:
    one, other = engine.tasks(), engine.tasks()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        task = one.create(agent="a", conversation="c", source="cli", input="go")
        one.db.execute("UPDATE tasks SET state = 'working', owner_pid = ? WHERE id = ?", (gone.pid, task.id))
        alive = one.create(agent="a", conversation="c", source="cli", input="mine")  # this live process's
        settled = one.settle_orphans()
        assert [t.id for t in settled] == [task.id]
        assert settled[0].state == "failed" and f"pid {gone.pid}" in settled[0].error
        assert asyncio.run(other.asettle_orphans()) == []  # already settled: no second settling
        assert one.get(alive.id).state == "submitted"
    finally:
        one.close()
        other.close()


def test_another_hosts_task_is_settled_once_its_lease_expired(engine: Engine) -> None:
    one, other = engine.tasks(), engine.tasks()
    try:
        expired = one.create(agent="a", conversation="c", source="cli", input="go")
        renewed = one.create(agent="a", conversation="c", source="cli", input="go on")
        for task in (expired, renewed):  # run by a process of another host, whose pid cannot be seen from here
            one.db.execute(
                "UPDATE tasks SET state = 'working', owner_pid = 4242, owner_host = 'replica-b', lease_until = ?"
                " WHERE id = ?",
                ("2026-01-01T00:00:00.000000+00:00", task.id),
            )
        one.db.execute("UPDATE tasks SET lease_until = '9999-01-01T00:00:00.000000+00:00' WHERE id = ?", (renewed.id,))
        settled = asyncio.run(one.asettle_orphans())
        if engine.name == "sqlite":  # one machine: leases are not renewed there, and none expires
            assert settled == []
            return
        assert [t.id for t in settled] == [expired.id]
        assert settled[0].state == "failed" and "stopped renewing its lease (15 s)" in settled[0].error
        assert other.settle_orphans() == []  # settled once
        assert one.get(renewed.id).state == "working"
        mine = one.create(agent="a", conversation="c", source="cli", input="mine")
        before = one.get(mine.id).lease_until
        assert asyncio.run(one.arenew([mine.id, renewed.id])) == 1  # only this process's own run
        assert one.get(mine.id).lease_until > before
    finally:
        one.close()
        other.close()


def test_a_turn_is_held_across_connections(engine: Engine) -> None:
    tasks = engine.tasks()
    first, second = Turns(connect(engine.root, engine.url)), Turns(connect(engine.root, engine.url))
    second.wait = 0.3
    try:
        task = tasks.create(agent="a", conversation="c", source="cli", input="go")

        async def go() -> None:
            async with first.take("c", task.id):
                with pytest.raises(ConversationBusy):  # the other connection sees the row and waits, then gives up
                    async with second.take("c", "other"):
                        pass
            async with second.take("c", "other"):  # given back: taken at once
                pass

        asyncio.run(go())
        # Another host's row: held while its task runs, also once another process took the task over
        # (the row moves to the taker, and no later message may run before the orphan's run); free
        # once the task paused (its process was killed before it gave the turn back: the decision must
        # not wait for it) or ended, and to the process that claimed the task's decision.
        tasks.db.execute("UPDATE tasks SET owner_pid = 1, owner_host = 'another-host' WHERE id = ?", (task.id,))

        def left_behind() -> None:
            tasks.db.execute(
                "INSERT INTO turns (conversation, task_id, pid, host, started_at) VALUES (?, ?, ?, ?, ?)",
                ("c", task.id, 1, "another-host", "2026-01-01"),
            )

        async def take(task_id: str = "mine") -> None:
            async with second.take("c", task_id):
                pass

        left_behind()
        for owner in ((1, "another-host"), (2, "a-third-host")):
            tasks.db.execute("UPDATE tasks SET owner_pid = ?, owner_host = ? WHERE id = ?", (*owner, task.id))
            with pytest.raises(ConversationBusy):
                asyncio.run(take())
        for state in ("input-required", "failed"):
            tasks.update(task.id, state=state)
            asyncio.run(take())
            assert tasks.db.execute("SELECT * FROM turns").rows == []
            left_behind()
        tasks.update(task.id, state="working")
        asyncio.run(take(task.id))  # the decision this process claimed: the dead pauser's row is no obstacle
        assert tasks.db.execute("SELECT * FROM turns").rows == []

        async def outlived() -> None:  # a run gives back its own row only, not another process's of the task
            async with first.take("d", task.id):
                tasks.db.execute("UPDATE turns SET pid = 2, host = 'a-third-host' WHERE conversation = 'd'")

        asyncio.run(outlived())
        assert tasks.db.execute("SELECT task_id, pid, host FROM turns").rows == [(task.id, 2, "a-third-host")]
    finally:
        first.db.close()
        second.db.close()
        tasks.close()


def test_sessions_are_kept_for_other_connections(engine: Engine) -> None:
    one, other = SessionStore(connect(engine.root, engine.url)), SessionStore(connect(engine.root, engine.url))
    try:
        asyncio.run(one.asave("s1", "echo", "ask", "/work"))
        assert other.get("s1") == {"agent": "echo", "mode": "ask", "cwd": "/work"}
        asyncio.run(other.asave("s1", "echo", "auto", "/elsewhere"))  # the same session: mode and folder change
        assert asyncio.run(one.aget("s1")) == {"agent": "echo", "mode": "auto", "cwd": "/elsewhere"}
        assert one.get("unknown") is None
    finally:
        one.db.close()
        other.db.close()


def test_migrations_are_idempotent(engine: Engine) -> None:
    db = open_database(engine.root, engine.url)
    try:
        migrate(db)
        assert version(db) == LATEST
        assert migrate(db) == []
        rows = db.execute("SELECT version FROM schema_version ORDER BY version").rows
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    finally:
        db.close()


@pytest.mark.timeout(300)
def test_two_processes_migrating_a_fresh_database_at_once(engine: Engine, tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    for attempt in range(2):
        root = tmp_path / f"fresh-{attempt}"
        root.mkdir()
        with fresh_database("migrate") if engine.url else _nothing() as url:
            start, out = spawn.Barrier(2), spawn.Queue()
            racers = [spawn.Process(target=_migrator, args=(str(root), url, start, out)) for _ in range(2)]
            for racer in racers:
                racer.start()
            applied = sorted((out.get(timeout=60) for _ in racers), key=len)
            for racer in racers:
                racer.join(timeout=30)
                assert racer.exitcode == 0
            assert applied == [[], [m.version for m in MIGRATIONS]]  # one migrated, the other found it done
            db = connect(root, url)
            try:
                versions = db.execute("SELECT version FROM schema_version ORDER BY version").rows
                assert [r[0] for r in versions] == [m.version for m in MIGRATIONS]
            finally:
                db.close()


def test_an_unreachable_server_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnreachable) as unavailable:
        TaskStore.open(tmp_path, url="postgresql+psycopg://ca:s3cret@127.0.0.1:1/nowhere")
    message = str(unavailable.value)
    assert message.startswith("cannot use the task store postgresql://ca:***@127.0.0.1:1/nowhere (OperationalError")
    assert "s3cret" not in message and unavailable.value.exit_code == 2
    assert message.endswith("start PostgreSQL there, create the database, or fix store.url in ca.yaml")


class _nothing:
    """The SQLite case of a fresh database: a fresh folder is one; no URL."""

    def __enter__(self) -> str:
        return ""

    def __exit__(self, *exc: object) -> None:
        return None
