"""`ca audit --verify` through the real process: which kind of chain it checked, a keyed chain
against a rewrite whose plain hashes were recomputed, the key's variable, and a damaged audit.db
(for `ca audit`, `ca audit --verify` and `ca run` alike)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from framework.runtime.audit import AuditLog
from tests.conftest import ProjectFactory, run_ca

KEY_ENV = "CA_TEST_AUDIT_KEY"
KEY = "test-audit-key-0123456789abcdef"
OTHER_KEY = "another-audit-key-fedcba9876543210"
KEYED_YAML = f"version: 1\naudit: {{key_env: {KEY_ENV}}}\n"
AGENT = "name: helper\nmodel: offline\n"
WITH_KEY = {KEY_ENV: KEY}


def key_id(key: str) -> str:
    """The key id as docs/governance.md defines it, computed here independently of ca."""
    return hmac.new(key.encode(), b"ca-audit-key-id", hashlib.sha256).hexdigest()[:8]


def project(make_project: ProjectFactory, *, keyed: bool) -> Path:
    files = {"agents/helper.yaml": AGENT}
    if keyed:
        files["ca.yaml"] = KEYED_YAML
    return make_project(files)


def open_log(root: Path, key: str | None) -> AuditLog:
    if key is None:
        return AuditLog.open(root)
    from framework.runtime.audit_chain import ChainKey

    return AuditLog.open(root, key=ChainKey(key.encode(), KEY_ENV))


def fill(root: Path, n: int, key: str | None = None) -> None:
    """Append ``n`` records to the project's log (keyed with ``key`` when given) and close it."""
    with open_log(root, key) as log:
        for i in range(n):
            log.append("tool.call", source="cli", task_id="t", agent="helper", data={"i": i})


def db_file(root: Path) -> Path:
    return root / ".ca" / "audit.db"


def plain_hash(row: dict[str, object]) -> str:
    """What anyone can compute: sha256 of the canonical JSON of the fields an unkeyed hash covers."""
    fields = {k: v for k, v in row.items() if k not in ("hash", "chain", "key_id")}
    fields["data"] = json.loads(str(fields["data"]))
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def rewrite(root: Path, seq: int, *, downgrade: bool) -> None:
    """An attacker without the key: change record ``seq`` and recompute a plain chain from it to the
    head. ``downgrade``: also mark the rewritten records unkeyed; else leave their chain fields be."""
    with sqlite3.connect(db_file(root)) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM audit WHERE seq >= ? ORDER BY seq", (seq,))]
        prev = conn.execute("SELECT hash FROM audit WHERE seq = ?", (seq - 1,)).fetchone()
        prev_hash = prev[0] if prev else "0" * 64
        for row in rows:
            if row["seq"] == seq:
                row["data"] = '{"i":999}'
            row["prev_hash"] = prev_hash
            if downgrade:
                row["chain"], row["key_id"] = "sha256", ""
            row["hash"] = prev_hash = plain_hash(row)
            conn.execute(
                "UPDATE audit SET data = ?, prev_hash = ?, chain = ?, key_id = ?, hash = ? WHERE seq = ?",
                (row["data"], row["prev_hash"], row["chain"], row["key_id"], row["hash"], row["seq"]),
            )
        conn.execute("UPDATE audit_head SET hash = ?", (prev_hash,))


def head_hash(root: Path) -> str:
    with sqlite3.connect(db_file(root)) as conn:
        found: str = conn.execute("SELECT hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()[0]
    return found


# -- which kind of chain was checked ------------------------------------------------------------


def test_verify_says_it_checked_an_unkeyed_chain_and_what_that_does_not_detect(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=False)
    fill(root, 4)
    result = run_ca("audit", "--verify", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        "audit log ok: 4 records, unkeyed chain (sha256): detects edits, not a rewrite of the whole chain;"
        f" head {head_hash(root)}\n"
    )


def test_verify_says_it_checked_a_keyed_chain_and_names_the_key_by_its_id(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 4, KEY)
    result = run_ca("audit", "--verify", cwd=root, env=WITH_KEY)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (
        f"audit log ok: 4 records, keyed chain (hmac-sha256, key id {key_id(KEY)}); head {head_hash(root)}\n"
    )
    assert KEY.encode() not in b"".join(p.read_bytes() for p in (root / ".ca").glob("audit.db*"))


def test_verify_says_from_which_record_a_chain_turned_keyed(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 3)
    fill(root, 2, KEY)
    result = run_ca("audit", "--verify", cwd=root, env=WITH_KEY)
    assert result.returncode == 0, result.stderr
    assert f"5 records, keyed chain (hmac-sha256, key id {key_id(KEY)}) from record 4, the records before" in (
        result.stdout
    )


def test_ca_run_with_the_key_appends_a_keyed_chain(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    ran = run_ca("run", "helper", "hello", cwd=root, env=WITH_KEY)
    assert ran.returncode == 0, ran.stderr
    result = run_ca("audit", "--verify", cwd=root, env=WITH_KEY)
    assert result.returncode == 0, result.stderr
    assert f"records, keyed chain (hmac-sha256, key id {key_id(KEY)}); head" in result.stdout


# -- a keyed chain against a rewrite -------------------------------------------------------------


@pytest.mark.parametrize(
    ("downgrade", "problem"),
    [
        (True, "record 3 is not keyed (sha256) but follows keyed record 1: it was rewritten without the key"),
        (False, "record 3 was edited: its hash does not match its content"),
    ],
    ids=["marked-unkeyed", "still-marked-keyed"],
)
def test_verify_names_a_keyed_record_rewritten_with_a_recomputed_plain_chain(
    make_project: ProjectFactory, downgrade: bool, problem: str
) -> None:
    root = project(make_project, keyed=True)
    fill(root, 6, KEY)
    rewrite(root, 3, downgrade=downgrade)
    result = run_ca("audit", "--verify", cwd=root, env=WITH_KEY)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == problem
    assert "audit log TAMPERED" in result.stderr


def test_the_same_rewrite_of_an_unkeyed_chain_verifies(make_project: ProjectFactory) -> None:
    """What the unkeyed chain's ok line warns about: a recomputed chain cannot be told from the real one."""
    root = project(make_project, keyed=False)
    fill(root, 6)
    rewrite(root, 3, downgrade=True)
    result = run_ca("audit", "--verify", cwd=root)
    assert result.returncode == 0, result.stderr
    assert "unkeyed chain (sha256): detects edits, not a rewrite of the whole chain" in result.stdout


def test_verify_fails_a_keyed_chain_rewritten_unkeyed_from_its_first_record(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 6, KEY)
    rewrite(root, 1, downgrade=True)
    result = run_ca("audit", "--verify", cwd=root, env=WITH_KEY)
    assert result.returncode == 1
    assert result.stderr.startswith(f"no record is keyed, though ca.yaml names audit.key_env {KEY_ENV!r}")


def test_verify_with_another_key_names_the_records_it_cannot_check(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 6, KEY)
    result = run_ca("audit", "--verify", cwd=root, env={KEY_ENV: OTHER_KEY})
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        f"6 records (1–6) are keyed (hmac-sha256, key id {key_id(KEY)}), not with the key in {KEY_ENV}"
        f" (key id {key_id(OTHER_KEY)}): set {KEY_ENV} to the key they were written with"
    )


# -- the key's variable --------------------------------------------------------------------------


def test_verify_of_a_keyed_chain_without_its_variable_says_which_to_set(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 2, KEY)
    result = run_ca("audit", "--verify", cwd=root)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: ca.yaml audit.key_env names {KEY_ENV!r}, which is not set: export")
    assert len(result.stderr.splitlines()) == 1


def test_ca_run_without_the_key_variable_refuses_before_recording_anything(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    result = run_ca("run", "helper", "hello", cwd=root)
    assert result.returncode == 2
    assert f"error: ca.yaml audit.key_env names {KEY_ENV!r}, which is not set" in result.stderr
    assert not db_file(root).exists()


def test_a_key_kept_in_dotenv_beside_the_log_is_refused(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    (root / ".env").write_text(f"{KEY_ENV}={KEY}\n")
    result = run_ca("audit", "--verify", cwd=root)
    assert result.returncode == 2
    assert f"names {KEY_ENV!r}, which is set only in .env: the audit key must not be stored beside" in result.stderr


def test_ca_run_refuses_to_extend_a_keyed_chain_once_ca_yaml_names_no_key(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=False)
    fill(root, 2, KEY)
    result = run_ca("run", "helper", "hello", cwd=root)
    assert result.returncode == 2
    assert f"is keyed (hmac-sha256, key id {key_id(KEY)}), but ca.yaml names no audit.key_env" in result.stderr


def test_ca_run_refuses_to_extend_a_keyed_chain_with_another_key(make_project: ProjectFactory) -> None:
    root = project(make_project, keyed=True)
    fill(root, 2, KEY)
    result = run_ca("run", "helper", "hello", cwd=root, env={KEY_ENV: OTHER_KEY})
    assert result.returncode == 2
    assert f"{KEY_ENV} holds another key (key id {key_id(OTHER_KEY)})" in result.stderr
    with sqlite3.connect(db_file(root)) as conn:
        assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] == 2


# -- a damaged audit.db -------------------------------------------------------------------------


def random_bytes(db: Path) -> str:
    db.write_bytes(os.urandom(8192))
    return "file is not a database"


def truncated(db: Path) -> str:
    os.truncate(db, db.stat().st_size // 2)
    return "database disk image is malformed"


def table_missing(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE audit_head")
    return "its table 'audit_head' is missing"


VERIFY = ("audit", "--verify")
CASES = [(damage, VERIFY) for damage in (random_bytes, truncated, table_missing)]
CASES += [(random_bytes, ("audit",)), (random_bytes, ("run", "helper", "hello"))]  # every command that opens it


@pytest.mark.parametrize(("damage", "command"), CASES, ids=[f"{d.__name__}-{' '.join(c)}" for d, c in CASES])
def test_a_damaged_audit_db_is_one_line_naming_the_file_and_what_to_do(
    make_project: ProjectFactory, damage: Callable[[Path], str], command: tuple[str, ...]
) -> None:
    root = project(make_project, keyed=False)
    fill(root, 300)  # several pages, so that half of the file is missing some
    db = db_file(root)
    assert not Path(f"{db}-wal").exists()  # closing folded the WAL into the file
    detail = damage(db)
    result = run_ca(*command, cwd=root)
    assert result.returncode == 2
    assert result.stderr == (
        f"error: the audit log {db} is corrupt ({detail}): move {db} and its -wal and -shm files aside"
        " (keep them as evidence); ca then starts a new log\n"
    )


def test_a_deeply_nested_record_is_shown_and_verified(make_project: ProjectFactory) -> None:
    """Tool arguments nested 900 deep (a model can send them; the log takes them) are printed and
    checked, not an internal error: the record's fields are read as they are, not copied recursively."""
    root = project(make_project, keyed=False)
    args: dict[str, object] = {}
    inner = args
    for _ in range(900):
        inner["a"] = inner = {}
    with AuditLog.open(root) as log:
        log.append("tool.call", source="cli", task_id="t", data={"args": args})
    shown = run_ca("audit", "--json", cwd=root)
    assert shown.returncode == 0 and "internal error" not in shown.stderr, shown.stderr
    [record] = json.loads(shown.stdout)
    assert record["kind"] == "tool.call" and "a" in record["data"]["args"]
    checked = run_ca("audit", "--verify", cwd=root)
    assert checked.returncode == 0 and "audit log ok: 1 records" in checked.stdout, checked.stderr
