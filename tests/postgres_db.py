"""A PostgreSQL database of its own for a test module: created on the real server, dropped after.

The server is ``CA_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``,
the machine's trust-auth database); each database is ``ca_test_<name>_<random hex>``, so
engineers and modules running at the same time never see each other's rows. Where no server
answers, the tests skip and say why: a shared database cannot be faked with SQLite.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import pytest

SERVER_URL = os.environ.get("CA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _why_not() -> str:
    """Why the server cannot be used, or '' when it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed (the 'postgres' extra)"
    try:
        with psycopg.connect(SERVER_URL, connect_timeout=3):
            return ""
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"


@contextmanager
def fresh_database(name: str) -> Iterator[str]:
    """The URL of a new, empty database (skipping the test when no server answers); dropped on exit."""
    import psycopg

    why = _why_not()
    if why:
        pytest.skip(f"no PostgreSQL at {SERVER_URL} ({why}); set CA_TEST_POSTGRES_URL to a server this test may use")
    database = f"ca_test_{name}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    try:
        yield urlsplit(SERVER_URL)._replace(path=f"/{database}").geturl()
    finally:
        with psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
