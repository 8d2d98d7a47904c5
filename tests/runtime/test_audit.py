"""The audit log: round trips, the hash chain, tamper detection on the raw file, concurrency, masking."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from framework.errors import StoreBusy, StoreError, UsageError
from framework.runtime import store_locks
from framework.runtime.audit import HOLD_S, AuditLog, AuditRecord, format_record
from framework.runtime.audit_chain import ChainKey, VerifyResult, chain_key, record_hash
from framework.runtime.audit_store import AuditStore
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.restart import needs_restart
from framework.spec.project import AuditConfig, ProjectConfig

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-live-0123456789abcdef"
KEY = ChainKey(b"audit-key-0123456789abcdef", "CA_AUDIT_KEY")


def db_file(root: Path) -> Path:
    return root / ".ca" / "audit.db"


@pytest.fixture
def log(tmp_path: Path) -> Iterator[AuditLog]:
    audit = AuditLog.open(tmp_path)
    yield audit
    audit.close()


def fill(root: Path, n: int = 10, key: ChainKey | None = None) -> None:
    """Write ``n`` records to the project's log (keyed with ``key``) and close it, leaving the file for raw SQL."""
    with AuditLog.open(root, key=key) as audit:
        for i in range(n):
            audit.append("tool.call", source="cli", task_id=f"t{i % 3}", agent="helper", data={"i": i})


def raw_sql(root: Path, *statements: str) -> None:
    with sqlite3.connect(db_file(root)) as conn:
        for statement in statements:
            conn.execute(statement)


def verify(root: Path, key: ChainKey | None = None) -> list[str]:
    with AuditLog.open(root, key=key) as audit:
        result = audit.verify()
    assert result.ok is (not result.problems)
    return result.problems


# -- records and queries ----------------------------------------------------------------------------


def test_append_returns_the_record_as_stored_and_query_reads_it_back(log: AuditLog) -> None:
    record = log.append(
        "tool.call", source="a2a-http", task_id="t1", conversation_id="c1", agent="helper", data={"tool": "fs.read"}
    )
    assert (record.seq, record.kind, record.source, record.task_id) == (1, "tool.call", "a2a-http", "t1")
    assert (record.conversation_id, record.agent, record.data) == ("c1", "helper", {"tool": "fs.read"})
    assert record.ts.endswith("+00:00") and len(record.ts.split(".")[1]) == len("123456+00:00")
    assert log.query() == [record]


def test_an_unkeyed_hash_is_sha256_of_the_canonical_json_of_every_field_but_the_chain_kind(log: AuditLog) -> None:
    first = log.append("decision", source="cli", task_id="t", data={"b": "é", "a": [1, 2]})
    second = log.append("decision", source="cli", task_id="t")
    assert (first.chain, first.key_id) == ("sha256", "")
    fields = {k: v for k, v in first.__dict__.items() if k not in ("hash", "chain", "key_id")}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert first.hash == hashlib.sha256(canonical.encode()).hexdigest()
    assert first.prev_hash == "0" * 64
    assert second.prev_hash == first.hash


def test_query_filters_by_task_conversation_kind_and_seq(log: AuditLog) -> None:
    for i in range(6):
        log.append("tool.call" if i % 2 else "decision", source="acp", task_id=f"t{i % 3}", conversation_id=f"c{i % 2}")
    assert [r.seq for r in log.query(task_id="t0")] == [1, 4]
    assert [r.seq for r in log.query(conversation_id="c1")] == [2, 4, 6]
    assert [r.seq for r in log.query(kind="decision", conversation_id="c0")] == [1, 3, 5]
    assert [r.seq for r in log.query(since_seq=4)] == [5, 6]
    assert [r.seq for r in log.query(limit=2)] == [1, 2]


def test_data_that_json_cannot_represent_is_stored_as_text(log: AuditLog) -> None:
    record = log.append("tool.call", source="cli", task_id="t", data={"path": Path("/x"), "args": (1, 2)})
    assert record.data == {"path": "/x", "args": [1, 2]}
    assert log.verify().ok


def test_an_unknown_source_is_refused(log: AuditLog) -> None:
    with pytest.raises(ValueError, match="unknown audit source 'http'"):
        log.append("tool.call", source="http", task_id="t")  # type: ignore[arg-type]


def test_a_field_that_is_not_text_is_refused_and_nothing_is_written(log: AuditLog) -> None:
    """The columns are text: a number stored there reads back as a string, and its hash (over the
    number) no longer matched, so verify reported an untouched record as edited."""
    with pytest.raises(TypeError, match=r"must be text: task_id 5 \(int\), agent 1.5 \(float\)"):
        log.append("tool.call", source="cli", task_id=5, agent=1.5)  # type: ignore[arg-type]
    assert log.query() == []
    assert log.append("tool.call", source="cli", task_id="5", agent="1.5").task_id == "5"
    assert log.verify().ok


def test_a_record_survives_reopening_the_store(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path) as first:
        written = first.append("task.state", source="a2a-stdio", task_id="t", data={"state": "working"})
    with AuditLog.open(tmp_path) as second:
        assert second.query() == [written]
        assert second.append("task.state", source="a2a-stdio", task_id="t").prev_hash == written.hash
        assert second.verify().ok


def test_a_sqlalchemy_url_opens_the_same_log_as_the_project_root(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    with AuditLog.open(f"sqlite:///{db_file(tmp_path)}") as by_url:
        assert len(by_url.query()) == 2
    with AuditLog.open(f"sqlite+aiosqlite:///{db_file(tmp_path)}") as by_async_url:
        assert by_async_url.verify().checked == 2


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("a b://c", "'a b'… is not a database URL"),
        ("nonsense://", "unknown database 'nonsense'"),
        (
            "postgresql://user:hunter22@db/ca",
            "'postgresql+psycopg://user:***@db/ca': its database driver is not installed",
        ),
    ],
)
def test_a_url_that_cannot_be_opened_is_a_usage_error_without_its_password(url: str, message: str) -> None:
    if "postgresql" in url and importlib.util.find_spec("psycopg") is not None:
        pytest.skip("psycopg is installed")
    with pytest.raises(UsageError, match=re.escape(message)):
        AuditLog.open(url)


def test_format_record_is_one_line_with_long_values_shortened() -> None:
    record = AuditRecord(
        seq=7,
        ts="2025-01-02T03:04:05.000006+00:00",
        kind="tool.call",
        source="cli",
        task_id="t1",
        conversation_id="",
        agent="helper",
        data={"tool": "shell", "cmd": "echo " + "x" * 100, "args": {"n": 1}},
        prev_hash="0" * 64,
        hash="f" * 64,
    )
    line = format_record(record, width=20)
    assert line == (
        '7 2025-01-02T03:04:05.000006+00:00 cli tool.call task=t1 agent=helper args={"n":1} '
        'cmd="echo xxxxxxxxxxxxxx…" tool=shell'
    )


# -- the chain ----------------------------------------------------------------------------------------


def test_the_chain_verifies_after_100_appends(log: AuditLog) -> None:
    for i in range(100):
        log.append("budget", source="agent-call", task_id="t", data={"tokens": i})
    result = log.verify()
    assert (result.ok, result.checked, result.problems) == (True, 100, [])
    assert result.head_hash == log.query(since_seq=99)[0].hash


def test_an_empty_log_verifies(log: AuditLog) -> None:
    assert log.verify() == VerifyResult(ok=True, checked=0, problems=[], head_hash="0" * 64)


def test_an_edited_record_is_detected(tmp_path: Path) -> None:
    fill(tmp_path)
    raw_sql(tmp_path, """UPDATE audit SET data = '{"i":999}' WHERE seq = 5""")
    assert verify(tmp_path) == ["record 5 was edited: its hash does not match its content"]


def test_an_edited_record_with_a_recomputed_hash_breaks_the_next_link(tmp_path: Path) -> None:
    fill(tmp_path)
    with AuditLog.open(tmp_path) as audit:
        original = audit.query(since_seq=4, limit=1)[0]
    forged = AuditRecord(**{**original.__dict__, "data": {"i": 999}})
    forged_hash = record_hash(asdict(forged))
    raw_sql(tmp_path, f"""UPDATE audit SET data = '{{"i":999}}', hash = '{forged_hash}' WHERE seq = 5""")
    assert verify(tmp_path) == [
        "record 6 does not follow record 5: prev_hash mismatch — a record was deleted or reordered"
    ]


def test_a_deleted_record_is_detected(tmp_path: Path) -> None:
    fill(tmp_path)
    raw_sql(tmp_path, "DELETE FROM audit WHERE seq IN (5, 6)")
    assert verify(tmp_path) == [
        "records 5–6 are missing",
        "record 7 does not follow record 4: prev_hash mismatch — a record was deleted or reordered",
    ]


def test_two_swapped_records_are_detected(tmp_path: Path) -> None:
    fill(tmp_path)
    raw_sql(
        tmp_path,
        "UPDATE audit SET seq = -1 WHERE seq = 5",
        "UPDATE audit SET seq = 5 WHERE seq = 6",
        "UPDATE audit SET seq = 6 WHERE seq = -1",
    )
    problems = verify(tmp_path)
    assert "record 5 was edited: its hash does not match its content" in problems
    assert "record 6 was edited: its hash does not match its content" in problems
    assert "record 7 does not follow record 6: prev_hash mismatch — a record was deleted or reordered" in problems


def test_a_truncated_tail_is_detected_by_the_head(tmp_path: Path) -> None:
    fill(tmp_path)
    raw_sql(tmp_path, "DELETE FROM audit WHERE seq > 7")
    assert verify(tmp_path) == ["records 8–10 are missing at the end: the head says 10 — the log was truncated"]


def test_appending_after_a_truncation_keeps_the_gap_visible(tmp_path: Path) -> None:
    fill(tmp_path)
    raw_sql(tmp_path, "DELETE FROM audit WHERE seq > 7")
    with AuditLog.open(tmp_path) as audit:
        assert audit.append("decision", source="cli", task_id="t").seq == 11
    assert verify(tmp_path) == [
        "records 8–10 are missing",
        "record 11 does not follow record 7: prev_hash mismatch — a record was deleted or reordered",
    ]


def test_a_replaced_last_record_is_detected_by_the_head(tmp_path: Path) -> None:
    fill(tmp_path)
    with AuditLog.open(tmp_path) as audit:
        last = audit.query(since_seq=9)[0]
    forged_hash = record_hash(asdict(AuditRecord(**{**last.__dict__, "data": {"i": 0}})))
    raw_sql(tmp_path, f"""UPDATE audit SET data = '{{"i":0}}', hash = '{forged_hash}' WHERE seq = 10""")
    assert verify(tmp_path) == ["record 10 does not match the head hash: the last record was replaced"]


def test_truncation_with_a_rewritten_head_needs_an_outside_anchor(tmp_path: Path) -> None:
    """The documented limit: whoever rewrites audit_head too can hide a truncation from the chain."""
    fill(tmp_path)
    with AuditLog.open(tmp_path) as audit:
        anchored = audit.verify().head_hash
        seventh = audit.query(since_seq=6, limit=1)[0]
    raw_sql(
        tmp_path,
        "DELETE FROM audit WHERE seq > 7",
        f"UPDATE audit_head SET seq = 7, hash = '{seventh.hash}'",
    )
    with AuditLog.open(tmp_path) as audit:
        result = audit.verify()
    assert result.ok
    assert result.head_hash != anchored  # only the copy kept elsewhere shows it


# -- the keyed chain -------------------------------------------------------------------------------


def test_a_keyed_hash_is_hmac_sha256_of_the_canonical_json_of_every_other_field(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path, key=KEY) as audit:
        record = audit.append("decision", source="cli", task_id="t", data={"b": "é"})
    key_id = hmac.new(KEY.secret, b"ca-audit-key-id", hashlib.sha256).hexdigest()[:8]
    assert (record.chain, record.key_id) == ("hmac-sha256", key_id)
    fields = {k: v for k, v in record.__dict__.items() if k != "hash"}
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert record.hash == hmac.new(KEY.secret, canonical.encode(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("key", [None, KEY], ids=["unkeyed", "keyed"])
def test_the_hash_covers_the_same_text_whatever_the_fields_hold(tmp_path: Path, key: ChainKey | None) -> None:
    """The record's text is made with its data's canonical JSON spliced in: fields that spell out
    JSON, the data member included, hash as the whole record encoded at once."""
    tricky = ['"data":null', '\\"data":null', 'x","data":null,"y":"', "\\", '"', "é\u2028\x00", "data"]
    with AuditLog.open(tmp_path, key=key) as audit:
        for text in tricky:
            data = {"data": None, text: text, "n": [text, {"data": text}], '"data":null': 1.5}
            record = audit.append(text, source="cli", task_id=text, conversation_id=text, agent=text, data=data)
            fields = {
                k: v for k, v in record.__dict__.items() if k not in (("hash",) if key else ("hash", "chain", "key_id"))
            }
            canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            expected = (
                hmac.new(key.secret, canonical, hashlib.sha256).hexdigest()
                if key
                else hashlib.sha256(canonical).hexdigest()
            )
            assert record.hash == expected, text
        assert audit.verify().ok


def test_the_audit_key_is_masked_in_what_a_record_stores(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path, key=KEY) as audit:
        record = audit.append("tool.call", source="cli", task_id="t", data={"cmd": f"echo {KEY.secret.decode()}"})
    assert record.data == {"cmd": "echo ***"}
    assert KEY.secret not in b"".join(p.read_bytes() for p in (tmp_path / ".ca").glob("audit.db*"))


def test_a_keyed_chain_checked_without_a_key_says_which_setting_is_missing(tmp_path: Path) -> None:
    fill(tmp_path, 6, KEY)
    assert verify(tmp_path) == [
        f"6 records (1–6) are keyed (hmac-sha256, key id {KEY.id}), but ca.yaml names no audit.key_env"
        " to check them with: set it to the variable holding that key"
    ]


def test_a_record_naming_an_unknown_kind_of_chain_is_reported_as_edited(tmp_path: Path) -> None:
    fill(tmp_path, 3)
    raw_sql(tmp_path, "UPDATE audit SET chain = 'md5' WHERE seq = 2")
    assert verify(tmp_path) == ["record 2 names an unknown chain 'md5': it was edited"]


def test_appending_to_a_keyed_chain_without_its_key_is_refused(tmp_path: Path) -> None:
    fill(tmp_path, 2, KEY)
    with AuditLog.open(tmp_path) as audit, pytest.raises(UsageError, match=re.escape(f"key id {KEY.id}), but ca")):
        audit.append("decision", source="cli", task_id="t")
    assert verify(tmp_path, KEY) == []


def test_a_keyed_part_rewritten_unkeyed_then_extended_only_moves_where_the_keyed_part_starts(
    tmp_path: Path,
) -> None:
    """The documented limit of turning the key on later: the start of the keyed part must be noted."""
    fill(tmp_path, 2)
    fill(tmp_path, 3, KEY)
    with AuditLog.open(tmp_path, key=KEY) as audit:
        noted = audit.verify().keyed_from
        keyed = [r for r in audit.query() if r.chain == "hmac-sha256"]
    with sqlite3.connect(db_file(tmp_path)) as conn:
        prev_hash = conn.execute("SELECT hash FROM audit WHERE seq = 2").fetchone()[0]
        for record in keyed:  # recompute them as an unkeyed chain: anyone can
            forged = {**asdict(record), "chain": "sha256", "key_id": "", "prev_hash": prev_hash}
            prev_hash = record_hash(forged)
            conn.execute(
                "UPDATE audit SET chain = 'sha256', key_id = '', prev_hash = ?, hash = ? WHERE seq = ?",
                (forged["prev_hash"], prev_hash, record.seq),
            )
        conn.execute("UPDATE audit_head SET hash = ?", (prev_hash,))
    fill(tmp_path, 1, KEY)
    with AuditLog.open(tmp_path, key=KEY) as audit:
        result = audit.verify()
    assert (result.ok, noted, result.keyed_from) == (True, 3, 6)


def test_an_audit_key_shorter_than_16_characters_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="CA_AUDIT_KEY holds 5 characters; an audit key needs at least 16"):
        chain_key(AuditConfig(key_env="CA_AUDIT_KEY"), tmp_path, {"CA_AUDIT_KEY": "short"})


def test_changing_the_audit_key_variable_asks_for_a_restart() -> None:
    before, after = ProjectConfig(), ProjectConfig(audit=AuditConfig(key_env="CA_AUDIT_KEY"))
    assert needs_restart(before, after) == ["audit.key_env (None -> CA_AUDIT_KEY)"]


OLD_SCHEMA = (
    "CREATE TABLE audit (seq INTEGER NOT NULL, ts VARCHAR(32) NOT NULL, kind VARCHAR(64) NOT NULL,"
    " source VARCHAR(16) NOT NULL, task_id VARCHAR(255) NOT NULL, conversation_id VARCHAR(255) NOT NULL,"
    " agent VARCHAR(255) NOT NULL, data TEXT NOT NULL, prev_hash VARCHAR(64) NOT NULL,"
    " hash VARCHAR(64) NOT NULL, PRIMARY KEY (seq))",
    "CREATE TABLE audit_head (id INTEGER NOT NULL, seq INTEGER NOT NULL, hash VARCHAR(64) NOT NULL, PRIMARY KEY (id))",
)


def write_old_log(root: Path, n: int) -> None:
    """A log as the first release wrote it: no chain kind, sha256 over the ten original fields."""
    db_file(root).parent.mkdir(parents=True, exist_ok=True)
    prev = "0" * 64
    with sqlite3.connect(db_file(root)) as conn:
        for statement in OLD_SCHEMA:
            conn.execute(statement)
        for seq in range(1, n + 1):
            row = {"seq": seq, "ts": f"2025-01-01T00:00:0{seq}.000000+00:00", "kind": "decision", "source": "cli"}
            row |= {"task_id": "t", "conversation_id": "", "agent": "a", "data": {"i": seq}, "prev_hash": prev}
            canonical = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            prev = hashlib.sha256(canonical.encode()).hexdigest()
            conn.execute(
                "INSERT INTO audit VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *[row[k] for k in ("seq", "ts", "kind", "source", "task_id", "conversation_id", "agent")],
                    json.dumps(row["data"]),
                    row["prev_hash"],
                    prev,
                ),
            )
        conn.execute("INSERT INTO audit_head VALUES (1, ?, ?)", (n, prev))


def test_a_log_written_before_records_had_a_kind_still_verifies(tmp_path: Path) -> None:
    write_old_log(tmp_path, 3)
    with AuditLog.open(tmp_path) as audit:
        result = audit.verify()
        assert (result.ok, result.checked, result.chain) == (True, 3, "sha256")
        assert {(r.chain, r.key_id) for r in audit.query()} == {("sha256", "")}


def test_a_log_written_before_records_had_a_kind_can_turn_keyed(tmp_path: Path) -> None:
    write_old_log(tmp_path, 3)
    fill(tmp_path, 2, KEY)
    with AuditLog.open(tmp_path, key=KEY) as audit:
        result = audit.verify()
    assert (result.ok, result.checked, result.chain, result.keyed_from) == (True, 5, "hmac-sha256", 4)


# -- a damaged database -----------------------------------------------------------------------------


def test_a_table_dropped_while_the_log_is_open_is_reported_as_corrupt(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path) as audit:
        audit.append("decision", source="cli", task_id="t")
        raw_sql(tmp_path, "DROP TABLE audit")
        with pytest.raises(
            StoreError, match=re.escape(f"{db_file(tmp_path)} is corrupt (its table 'audit' is missing)")
        ):
            audit.append("decision", source="cli", task_id="t")


# -- concurrency -----------------------------------------------------------------------------------


def test_concurrent_appends_from_four_asyncio_tasks_form_one_chain(log: AuditLog) -> None:
    async def writer(name: str) -> None:
        for i in range(50):
            await log.aappend("tool.call", source="a2a-http", task_id=name, data={"i": i})

    async def main() -> list[int]:
        await asyncio.gather(*(writer(f"task{n}") for n in range(4)))
        return [len(await log.aquery(task_id=f"task{n}")) for n in range(4)]

    assert asyncio.run(main()) == [50, 50, 50, 50]
    result = log.verify()
    assert (result.ok, result.checked) == (True, 200)
    assert [r.seq for r in log.query()] == list(range(1, 201))


def test_the_appends_of_one_loop_turn_commit_in_one_transaction(log: AuditLog) -> None:
    log.append("task.state", source="cli", task_id="first")  # the log's tail is read before its first append
    statements: list[str] = []
    log._store._sqlite.set_trace_callback(statements.append)  # type: ignore[union-attr]

    async def main() -> list[AuditRecord]:
        return await asyncio.gather(*(log.aappend("tool.call", source="a2a-http", task_id=f"t{n}") for n in range(8)))

    records = asyncio.run(main())
    assert [(r.seq, r.task_id) for r in records] == [(n + 2, f"t{n}") for n in range(8)]
    assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 1
    assert log.verify().ok


def test_a_caller_canceled_while_its_record_waits_for_the_group_still_has_it_written(log: AuditLog) -> None:
    async def main() -> None:
        append = asyncio.create_task(log.aappend("tool.call", source="a2a-http", task_id="gone"))
        await asyncio.sleep(0)  # it joined this turn's group and waits for its commit
        append.cancel()
        with pytest.raises(asyncio.CancelledError):
            await append
        await log.aappend("tool.call", source="a2a-http", task_id="next")

    asyncio.run(main())
    assert [r.task_id for r in log.query()] == ["gone", "next"]
    assert log.verify().ok


def test_appends_pending_when_the_event_loop_shuts_down_are_written(log: AuditLog) -> None:
    async def background() -> None:
        await asyncio.sleep(0)
        try:
            await log.aappend("task.state", source="cli", task_id="done")
        except asyncio.CancelledError:  # the loop shuts down: the task records that it was stopped
            await log.aappend("task.state", source="cli", task_id="canceled")
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(background())  # left running: the loop shuts down under it
        await asyncio.sleep(0)

    asyncio.run(main())
    assert [r.task_id for r in log.query()] == ["done", "canceled"]
    assert log.verify().ok


def test_a_caller_that_gives_up_while_another_process_holds_the_lock_has_nothing_written(
    log: AuditLog, tmp_path: Path
) -> None:
    log.append("task.state", source="cli", task_id="first")
    holder = sqlite3.connect(db_file(tmp_path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    async def main() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(log.aappend("tool.call", source="a2a-http", task_id="timed-out"), 0.2)
        holder.execute("COMMIT")
        await asyncio.sleep(0.2)  # time enough for a write of the abandoned record to land
        await log.aappend("tool.call", source="a2a-http", task_id="after")

    try:
        asyncio.run(main())
    finally:
        holder.close()
    assert [r.task_id for r in log.query()] == ["first", "after"]  # no late write, so no duplicate on a retry


def test_records_handed_over_together_are_all_written_when_their_caller_is_canceled(log: AuditLog) -> None:
    async def main() -> None:
        entries = [(kind, {"source": "a2a-http", "task_id": "t"}) for kind in ("tool.call", "budget", "contract")]
        append = asyncio.create_task(log.aappend_all(entries))
        await asyncio.sleep(0)
        append.cancel()  # while they are written (a tool call's checks audited, then the task canceled)
        with pytest.raises(asyncio.CancelledError):
            await append
        await log.aappend("task.state", source="a2a-http", task_id="t")

    asyncio.run(main())
    assert [r.kind for r in log.query()] == ["tool.call", "budget", "contract", "task.state"]
    assert log.verify().ok


@contextmanager
def another_writer(root: Path) -> Iterator[sqlite3.Connection]:
    """A connection holding the audit database's write lock, as another process would; the test
    lets go with ``COMMIT``."""
    holder = sqlite3.connect(db_file(root), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield holder
    finally:
        holder.close()


def test_a_group_that_begins_while_an_earlier_one_waits_for_the_lock_commits_after_it(
    log: AuditLog, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is freed just as a second group begins: it must not overtake the first, whose
    retry is still asleep (a held record would otherwise reach the disk after the call it precedes)."""
    monkeypatch.setattr(store_locks, "FIRST_PAUSE_S", 0.3)  # the first group's retry sleeps long
    log.append("task.state", source="cli", task_id="first")

    async def main() -> None:
        ahead = asyncio.create_task(log.aappend("tool.call", source="a2a-http", task_id="ahead"))
        await asyncio.sleep(0.05)  # its group met the lock, tried once more and sleeps
        holder.execute("COMMIT")
        behind = asyncio.create_task(log.aappend("tool.call", source="a2a-http", task_id="behind"))
        await asyncio.gather(ahead, behind)

    with another_writer(tmp_path) as holder:
        asyncio.run(main())
    assert [r.task_id for r in log.query()] == ["first", "ahead", "behind"]
    assert log.verify().ok


def held(kind: str, task_id: str = "t") -> list[tuple[str, dict[str, Any]]]:
    return [(kind, {"source": "a2a-http", "task_id": task_id})]


def test_held_records_go_in_the_transaction_of_the_next_record_appended_whoever_appends_it(
    log: AuditLog,
) -> None:
    log.append("task.state", source="cli", task_id="first")
    statements: list[str] = []
    log._store._sqlite.set_trace_callback(statements.append)  # type: ignore[union-attr]

    async def main() -> None:
        assert log.hold(held("model.call", "one"))
        assert log.hold(held("budget", "one"))
        await log.aappend("tool.call", source="a2a-http", task_id="two")  # another task's record takes them

    asyncio.run(main())
    assert [(r.kind, r.task_id) for r in log.query()][1:] == [
        ("model.call", "one"),
        ("budget", "one"),
        ("tool.call", "two"),
    ]
    assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 1
    assert log.verify().ok


def test_a_held_record_is_written_on_its_own_when_nothing_follows_it(log: AuditLog) -> None:
    seen: list[str] = []
    log.observers.append(lambda record: seen.append(record.kind))

    async def main() -> list[str]:
        assert log.hold(held("model.call"))
        await asyncio.sleep(HOLD_S * 4)
        return [r.kind for r in await log.aquery()]

    assert asyncio.run(main()) == ["model.call"]
    assert seen == ["model.call"]  # observed once it is on disk, as every record is


def test_a_caller_canceled_while_its_records_wait_for_the_lock_withdraws_all_of_them_but_not_what_it_took(
    log: AuditLog, tmp_path: Path
) -> None:
    """Records handed over together are written together or not at all: a cancel while they wait
    for another process's lock withdraws every one of them (not all but the one it interrupted).
    The held record they took along is no one's to withdraw: it is written with the next append."""
    log.append("task.state", source="cli", task_id="first")

    async def main() -> None:
        assert log.hold(held("model.call", "A"))
        entries = [(kind, {"source": "a2a-http", "task_id": "B"}) for kind in ("task.state", "budget")]
        taker = asyncio.create_task(log.aappend_all(entries))
        await asyncio.sleep(0.05)  # their group met the lock and waits to try again
        taker.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taker
        holder.execute("COMMIT")
        await log.aappend("tool.call", source="a2a-http", task_id="A")

    with another_writer(tmp_path) as holder:
        asyncio.run(main())
    assert [(r.kind, r.task_id) for r in log.query()][1:] == [("model.call", "A"), ("tool.call", "A")]


def test_records_that_join_a_group_waiting_for_the_lock_wait_no_longer_than_the_lock_timeout(
    tmp_path: Path,
) -> None:
    """While a group waits for the lock, later records join it: one wait, so each caller's StoreBusy
    comes within the lock timeout of its own append, not after the groups ahead of it timed out."""
    audit = AuditLog.open(tmp_path, lock_timeout=0.3)
    audit.append("task.state", source="cli", task_id="first")
    waited: list[float] = []

    async def one(name: str) -> None:
        start = time.monotonic()
        with pytest.raises(StoreBusy):
            await audit.aappend("tool.call", source="a2a-http", task_id=name)
        waited.append(time.monotonic() - start)

    async def main() -> None:
        appends = []
        for n in range(4):
            appends.append(asyncio.create_task(one(f"t{n}")))
            await asyncio.sleep(0.02)  # each begins in a later loop turn
        await asyncio.gather(*appends)

    with another_writer(tmp_path), closing(audit):
        asyncio.run(main())
    assert len(waited) == 4 and max(waited) < 0.3 + 0.15


@pytest.mark.parametrize("taken_by", ["another task's append", "its timer"])
def test_a_held_record_whose_transaction_found_the_lock_taken_too_long_is_ahead_of_its_tasks_next_record(
    tmp_path: Path, taken_by: str
) -> None:
    """The held record's transaction failed (StoreBusy): it is not lost, and the next record of its
    own task finds it ahead of itself, even appended in the very turn the failure was settled in
    (before the callback that holds it again ran)."""
    audit = AuditLog.open(tmp_path, lock_timeout=0.2)
    audit.append("task.state", source="cli", task_id="first")

    async def main() -> None:
        assert audit.hold(held("model.call", "A"))
        if taken_by == "its timer":
            while not (audit._in_flight and audit._in_flight[0].waits[-1].done()):
                await asyncio.sleep(0)
        else:
            with pytest.raises(StoreBusy):
                await audit.aappend("task.state", source="a2a-http", task_id="B")
        holder.execute("COMMIT")
        await audit.aappend("tool.call", source="a2a-http", task_id="A")

    with another_writer(tmp_path) as holder, closing(audit):
        asyncio.run(main())
    with AuditLog.open(tmp_path) as reopened:
        assert [(r.kind, r.task_id) for r in reopened.query()][1:] == [("model.call", "A"), ("tool.call", "A")]
        assert reopened.verify().ok


def test_closing_the_log_while_held_records_wait_for_the_lock_keeps_their_order(log: AuditLog, tmp_path: Path) -> None:
    log.append("task.state", source="cli", task_id="first")

    async def main() -> None:
        assert log.hold(held("model.call", "M1"))
        await asyncio.sleep(HOLD_S + 0.05)  # on its own now: its group waits for the lock
        assert log.hold(held("model.call", "M2"))
        holder.execute("COMMIT")
        log.close()  # on the loop, as the runtime's exit stack closes it

    with another_writer(tmp_path) as holder:
        asyncio.run(main())
    with AuditLog.open(tmp_path) as reopened:
        assert [r.task_id for r in reopened.query()] == ["first", "M1", "M2"]
        assert reopened.verify().ok


def test_a_held_record_held_again_is_written_on_its_own_once_the_lock_is_free(tmp_path: Path) -> None:
    audit = AuditLog.open(tmp_path, lock_timeout=0.2)
    audit.append("task.state", source="cli", task_id="first")

    async def main() -> list[str]:
        assert audit.hold(held("model.call", "A"))
        await asyncio.sleep(HOLD_S + 0.4)  # written on its own, failed past the lock timeout: held again
        holder.execute("COMMIT")
        await asyncio.sleep(HOLD_S * 4)  # nothing else is appended: its own timer again
        with AuditLog.open(tmp_path) as other:
            return [r.kind for r in other.query()]

    with another_writer(tmp_path) as holder, closing(audit):
        assert asyncio.run(main()) == ["task.state", "model.call"]


def test_two_event_loops_sharing_a_log_each_take_only_their_own_held_records(log: AuditLog) -> None:
    """Loop 2's append must not carry loop 1's held turn into loop 2's group, where loop 1's own
    tool.call could commit before it."""
    log.append("task.state", source="cli", task_id="first")
    other_loop_appended = threading.Event()

    def loop2() -> None:
        async def main() -> None:
            await log.aappend("task.state", source="a2a-http", task_id="B")

        asyncio.run(main())
        other_loop_appended.set()

    async def main1() -> None:
        assert log.hold(held("model.call", "A"))
        thread = threading.Thread(target=loop2)
        thread.start()
        await asyncio.to_thread(thread.join)
        await log.aappend("tool.call", source="a2a-http", task_id="A")

    asyncio.run(main1())
    assert other_loop_appended.is_set()
    kinds = [(r.kind, r.task_id) for r in log.query()]
    assert kinds.index(("model.call", "A")) == kinds.index(("tool.call", "A")) - 1


def test_closing_the_log_from_another_thread_while_a_held_record_waits_for_the_lock_writes_it(
    log: AuditLog, tmp_path: Path
) -> None:
    log.append("task.state", source="cli", task_id="first")
    waiting, stop = threading.Event(), threading.Event()

    def loop() -> None:
        async def main() -> None:
            assert log.hold(held("model.call", "A"))
            await asyncio.sleep(HOLD_S + 0.05)  # handed to the store: its group waits for the lock
            waiting.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)

        asyncio.run(main())

    thread = threading.Thread(target=loop)
    with another_writer(tmp_path) as holder:
        thread.start()
        try:
            assert waiting.wait(10)
            holder.execute("COMMIT")
            log.close()  # a server's main thread closing the log
            time.sleep(0.5)
        finally:
            stop.set()
            thread.join()
    with AuditLog.open(tmp_path) as reopened:
        assert [r.kind for r in reopened.query()] == ["task.state", "model.call"]


def test_a_held_record_whose_transaction_met_an_io_error_goes_with_the_next_record(
    log: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transient failure that is not the lock (SQLITE_IOERR) fails the records' transaction: the
    held one is not dropped, so the tool call appended next still finds its turn ahead of it."""
    log.append("task.state", source="cli", task_id="first")
    real = AuditStore._attempt
    failures = [sqlite3.OperationalError("disk I/O error")]

    def flaky(self: AuditStore, builds: list[Any]) -> Any:
        if failures:
            raise failures.pop()
        return real(self, builds)

    monkeypatch.setattr(AuditStore, "_attempt", flaky)

    async def main() -> None:
        assert log.hold(held("model.call", "A"))
        await asyncio.sleep(HOLD_S * 2)  # on its own: its transaction fails
        await log.aappend("tool.call", source="a2a-http", task_id="A")

    asyncio.run(main())
    assert not failures
    assert [(r.kind, r.task_id) for r in log.query()][1:] == [("model.call", "A"), ("tool.call", "A")]


def test_held_records_left_by_a_loop_that_closed_are_written_when_the_log_closes(tmp_path: Path) -> None:
    """A sync append (a worker thread, a CLI command) does not take held records: it could commit
    them behind the loop's own group for the call they precede. The log's close writes them."""
    audit = AuditLog.open(tmp_path)

    async def hold(kind: str) -> None:
        assert audit.hold(held(kind))

    asyncio.run(hold("model.call"))  # the loop is gone before its timer fires
    audit.append("decision", source="cli", task_id="t")
    asyncio.run(hold("budget"))  # a second loop: its own timer, though the first one's never ran
    audit.close()
    with AuditLog.open(tmp_path) as reopened:
        assert [r.kind for r in reopened.query()] == ["decision", "model.call", "budget"]
        assert reopened.verify().ok


def test_a_held_record_on_a_new_loop_gets_its_own_timer(tmp_path: Path) -> None:
    audit = AuditLog.open(tmp_path)

    async def hold(kind: str, wait: float) -> list[str]:
        assert audit.hold(held(kind))
        await asyncio.sleep(wait)
        return [r.kind for r in await audit.aquery()]

    try:
        assert asyncio.run(hold("model.call", 0)) == []  # closed before its timer
        assert asyncio.run(hold("budget", HOLD_S * 4)) == ["model.call", "budget"]
    finally:
        audit.close()


WRITER = """
import sys, time
from pathlib import Path
from framework.runtime.audit import AuditLog

root, name = Path(sys.argv[1]), sys.argv[2]
with AuditLog.open(root) as audit:
    (root / f"ready-{name}").touch()
    while not (root / "go").exists():
        time.sleep(0.005)
    for i in range(50):
        audit.append("tool.call", source="a2a-stdio", task_id=name, data={"i": i})
        time.sleep(0.002)  # let the other process in between appends, so the two really interleave
"""

ASYNC_WRITER = """
import asyncio, sys, time
from pathlib import Path
from framework.runtime.audit import AuditLog

root, name = Path(sys.argv[1]), sys.argv[2]


async def task(audit, n):  # as a server's tasks append: group commits, waiting for the other process's lock
    for i in range(n, 50, 5):
        await audit.aappend("tool.call", source="a2a-http", task_id=name, data={"i": i, "task": n})
        await asyncio.sleep(0.002)


async def main(audit):
    await asyncio.wait_for(asyncio.gather(*(task(audit, n) for n in range(5))), 60)


with AuditLog.open(root) as audit:
    (root / f"ready-{name}").touch()
    while not (root / "go").exists():
        time.sleep(0.005)
    asyncio.run(main(audit))
"""


HOLDING_WRITER = ASYNC_WRITER.replace(
    """async def task(audit, n):  # as a server's tasks append: group commits, waiting for the other process's lock
    for i in range(n, 50, 5):
        await audit.aappend("tool.call", source="a2a-http", task_id=name, data={"i": i, "task": n})
        await asyncio.sleep(0.002)
""",
    """async def task(audit, n):  # a governed run's turns: the model turn held, then its tool call appended
    for i in range(n, 50, 5):
        assert audit.hold([("model.call", {"source": "a2a-http", "task_id": name, "data": {"i": i, "task": n}})])
        await asyncio.sleep(0.001 * (i % 3))  # sometimes another task's append takes it along, sometimes not
        await audit.aappend("tool.call", source="a2a-http", task_id=name, data={"i": i, "task": n})
""",
)
assert HOLDING_WRITER != ASYNC_WRITER


def run_writers(root: Path, writer: str) -> None:
    """Two processes running ``writer`` on the log in ``root`` at the same instant, to their end."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", writer, str(root), f"p{n}"], env=env, stderr=subprocess.PIPE)
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((root / f"ready-p{n}").exists() for n in range(2)):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            for p in procs:  # stop the other one, or reading its stderr would wait for it forever
                if p.poll() is None:
                    p.kill()
            pytest.fail(f"a writer exited before starting: {[(p.returncode, p.communicate()[1]) for p in procs]}")
        time.sleep(0.01)
    (root / "go").touch()
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()


@pytest.mark.parametrize("writer", [WRITER, ASYNC_WRITER], ids=["append", "aappend-in-groups"])
def test_concurrent_appends_from_two_processes_form_one_chain(tmp_path: Path, writer: str) -> None:
    run_writers(tmp_path, writer)
    with AuditLog.open(tmp_path) as audit:
        result = audit.verify()
        assert (result.ok, result.checked) == (True, 100)
        for n in range(2):
            mine = [r.data for r in audit.query(task_id=f"p{n}")]
            assert sorted(d["i"] for d in mine) == list(range(50))  # each once
            for t in {d.get("task") for d in mine}:  # and each writer's own in the order it appended them
                order = [d["i"] for d in mine if d.get("task") == t]
                assert order == sorted(order)


def test_held_turns_of_two_processes_each_come_before_their_tool_call_and_once(tmp_path: Path) -> None:
    run_writers(tmp_path, HOLDING_WRITER)
    with AuditLog.open(tmp_path) as audit:
        result = audit.verify()
        assert (result.ok, result.checked) == (True, 200)
        for n in range(2):
            mine = [(r.kind, r.data["i"]) for r in audit.query(task_id=f"p{n}")]
            assert sorted(mine) == sorted((kind, i) for kind in ("model.call", "tool.call") for i in range(50))
            for i in range(50):  # each turn on disk before the call it asked for
                assert mine.index(("model.call", i)) < mine.index(("tool.call", i))


def test_a_failed_append_leaves_the_chain_as_it_was(tmp_path: Path) -> None:
    from framework.runtime.audit_store import AuditStore

    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore(url)

    def broken(seq: int, prev_hash: str) -> dict[str, object]:
        raise ValueError("no row")

    with pytest.raises(ValueError, match="no row"):
        store.append(broken)
    with AuditLog(store) as audit:
        assert audit.append("decision", source="cli", task_id="t").seq == 1
        assert audit.verify().ok


def test_a_closed_log_still_appends_to_the_same_chain(tmp_path: Path) -> None:
    audit = AuditLog.open(tmp_path)
    first = audit.append("decision", source="cli", task_id="t")
    audit.close()
    second = audit.append("decision", source="cli", task_id="t")
    audit.close()
    assert (second.seq, second.prev_hash) == (2, first.hash)
    assert verify(tmp_path) == []


# -- secrets ---------------------------------------------------------------------------------------


def test_secrets_are_masked_before_storage(tmp_path: Path) -> None:
    data = {"cmd": f"curl -H 'Authorization: Bearer {SECRET}'", "nested": [{"env": {"KEY": SECRET}}], SECRET: 1}
    with AuditLog.open(tmp_path, secrets=[SECRET]) as audit:
        record = audit.append("tool.call", source="cli", task_id="t", agent=f"a-{SECRET}", data=data)
        assert audit.verify().ok
    assert record.data == {"cmd": "curl -H 'Authorization: Bearer ***'", "nested": [{"env": {"KEY": "***"}}], "***": 1}
    assert record.agent == "a-***"
    stored = b"".join(p.read_bytes() for p in (tmp_path / ".ca").glob("audit.db*"))
    assert b"Bearer ***" in stored
    assert SECRET.encode() not in stored


def test_a_secret_the_process_learns_after_the_log_opened_is_masked_too(tmp_path: Path) -> None:
    """An editor gives an MCP server's headers over ACP once the runtime (and its log) is open."""
    later = "Bearer edtok-secret-5555-audit"
    with AuditLog.open(tmp_path) as audit:
        audit.append("decision", source="cli", task_id="t", data={"a": "before"})
        KNOWN.add([later])
        record = audit.append("tool.call", source="cli", task_id="t", data={"text": later, "token": later[7:]})
    assert record.data == {"text": "***", "token": "***"}


def test_the_longest_secret_is_masked_first_and_short_values_are_left_alone(tmp_path: Path) -> None:
    with AuditLog.open(tmp_path, secrets=["hunter22", "hunter22-extra", "no"]) as audit:
        record = audit.append("decision", source="cli", task_id="t", data={"a": "hunter22-extra hunter22 no"})
    assert record.data == {"a": "*** *** no"}


def test_a_deeply_nested_record_verifies(log: AuditLog) -> None:
    """Data nested as deep as the log accepts it (a model's tool arguments can be) is checked, not a
    RecursionError for `ca audit --verify`."""
    args: dict[str, Any] = {}
    inner = args
    for _ in range(900):
        inner["a"] = {}
        inner = inner["a"]
    log.append("tool.call", source="cli", task_id="t", data={"args": args})
    log.append("tool.result", source="cli", task_id="t")
    result = log.verify()
    assert result.ok and result.checked == 2, result.problems


def test_a_secret_deep_in_a_record_is_masked(tmp_path: Path) -> None:
    args: dict[str, Any] = {}
    inner = args
    for _ in range(900):
        inner["a"] = {}
        inner = inner["a"]
    inner["key"] = f'say "{SECRET}"'
    with AuditLog.open(tmp_path, secrets=[SECRET]) as audit:
        record = audit.append("tool.call", source="cli", task_id="t", data={"args": args})
        assert audit.verify().ok
    assert SECRET not in json.dumps(record.data) and 'say \\"***\\"' in json.dumps(record.data)
