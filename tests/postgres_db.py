"""A PostgreSQL database of a test's own: created on the server of ``CA_TEST_POSTGRES_URL`` and dropped after.

Engineers and CI jobs run tests against one server at the same time; each test module that writes
to PostgreSQL creates ``ca_test_<name>_<random hex>`` so nobody sees another's rows. Where no
server answers, :func:`own_database` skips the test and says why (a shared database cannot be
faked with SQLite).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

SERVER_URL = os.environ.get("CA_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextmanager
def own_database(label: str) -> Iterator[str]:
    """The URL of a new, empty database (dropped at the end); skips when no server answers."""
    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed (the 'postgres' extra)")
    try:
        admin = psycopg.connect(SERVER_URL, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        pytest.skip(
            f"no PostgreSQL at {SERVER_URL} ({type(exc).__name__}: {str(exc).strip()}); "
            "set CA_TEST_POSTGRES_URL to a server this test may create databases on"
        )
    name = f"ca_test_{label}_{uuid.uuid4().hex[:12]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(SERVER_URL, name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
