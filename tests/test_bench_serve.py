"""bench/serve.py --store postgresql://…, run tiny so the option cannot silently break: one and two
`ca serve` replicas on PostgreSQL reported next to SQLite's `ca serve`, their databases dropped."""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from tests.bench_output import CA_ROW, blocks
from tests.conftest import REPO
from tests.postgres_db import SERVER_URL, fresh_database

BENCH = [sys.executable, "bench/serve.py"]
ROWS = (
    CA_ROW,
    "ca serve, PostgreSQL store.url, 1 replica",
    "ca serve, PostgreSQL store.url, 2 replicas (two folders, one database), requests round-robin",
)


def _databases(prefix: str) -> list[str]:
    import psycopg

    with psycopg.connect(SERVER_URL, connect_timeout=3) as conn:
        rows = conn.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (prefix + "_",))
        return [row[0] for row in rows]


@pytest.mark.e2e
def test_a_postgresql_store_adds_one_and_two_replicas_next_to_sqlite_and_drops_its_databases() -> None:
    with fresh_database("bench") as url:
        prefix = urlsplit(url).path.strip("/")
        options = ["--requests", "8", "--concurrency", "2", "--rounds", "1", "--warmup", "2", "--ttfe-runs", "1"]
        result = subprocess.run(
            [*BENCH, *options, "--store", url], cwd=REPO, capture_output=True, text=True, timeout=100, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        found = blocks(result.stdout)
        for row in ROWS:
            assert "failures     0/8" in found[row], (row, result.stdout)
            assert any(line.startswith("throughput") and "req/s" in line for line in found[row]), result.stdout
        for row in ROWS[1:]:
            lines = [line for line in found[row] if line.startswith("PostgreSQL")]
            assert any(line.endswith("CPU/request in its backends for this database") for line in lines), result.stdout
            assert any("transactions/request" in line for line in lines), result.stdout
        ratios = found[f"ca serve on PostgreSQL ({url}, a fresh database each), per round"]
        assert [line for line in ratios if "/" in line and "×" not in line] == [
            "1 replica / SQLite",
            "2 replicas / SQLite",
            "2 replicas / 1 replica",
        ]
        assert _databases(prefix) == []


def test_a_store_that_is_neither_sqlite_nor_postgresql_is_refused_before_anything_starts() -> None:
    result = subprocess.run(
        [*BENCH, "--store", "mysql://root@127.0.0.1/db"], cwd=REPO, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2
    assert "'mysql://root@127.0.0.1/db': use sqlite, sqlite-sdk-default or postgresql://" in result.stderr


def test_an_unreachable_postgresql_server_is_one_line_with_its_password_hidden() -> None:
    url = "postgresql://bench:secret@127.0.0.1:1/bench"
    result = subprocess.run([*BENCH, "--store", url], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("--store postgresql://bench:***@127.0.0.1:1/bench: OperationalError: ")
    assert result.stderr.count("\n") == 1
    assert "secret" not in result.stderr


def test_a_password_in_the_query_of_an_unreachable_store_is_hidden_too() -> None:
    url = "postgresql://bench@127.0.0.1:1/bench?sslmode=disable&password=secret"
    result = subprocess.run([*BENCH, "--store", url], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("--store postgresql://bench@127.0.0.1:1/bench?sslmode=disable&password=***: ")
    assert "secret" not in result.stderr
