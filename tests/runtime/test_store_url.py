"""A store URL as messages show it: every password it carries is ``***``, in the user part and in
the query string (libpq and asyncpg read ``?password=``, ``?sslpassword=`` …), while the drivers
get the URL as written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from framework.errors import StoreUnreachable
from framework.runtime.audit_store import AuditStore
from framework.runtime.database import PostgresDatabase
from framework.runtime.store_url import libpq_url, psycopg_url
from framework.runtime.stores import open_checkpointer
from framework.runtime.tasks import TaskStore
from tests.conftest import ProjectFactory, run_ca
from tests.postgres_db import fresh_database

SECRET = "pw-query-secret-55"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://ca:hunter2@db:5432/ca", "postgresql://ca:***@db:5432/ca"),
        ("postgresql://ca@db/ca?password=hunter2", "postgresql://ca@db/ca?password=***"),
        (
            "postgresql+asyncpg://ca@db/ca?sslmode=require&sslpassword=hunter2&application_name=ca",
            "postgresql+asyncpg://ca@db/ca?sslmode=require&sslpassword=***&application_name=ca",
        ),
        ("postgresql://db/ca?oauth_client_secret=hunter2", "postgresql://db/ca?oauth_client_secret=***"),
        ("postgresql://ca:a%40b@db/ca?password=c%26d#e", "postgresql://ca:***@db/ca?password=***"),
        ("postgresql://ca:p?w#x@db/ca", "postgresql://ca:***@db/ca"),
        ("postgresql://ca:pa/ss?w@db/ca?password=x", "postgresql://ca:***@db/ca?password=***"),
        ("postgresql://db/ca?application_name=a@b", "postgresql://db/ca?application_name=a@b"),
        (
            "postgresql://ca@db/ca?PassWord=hunter2&%70assword=hunter2",
            "postgresql://ca@db/ca?PassWord=***&%70assword=***",
        ),
        ("postgresql://ca:@db/ca?password=", "postgresql://ca:***@db/ca?password=***"),
        (
            "postgresql://ca@db/ca?sslmode=require&sslkey=/keys/ca.key",
            "postgresql://ca@db/ca?sslmode=require&sslkey=/keys/ca.key",
        ),
        ("postgresql://password@db/password?user=password", "postgresql://password@db/password?user=password"),
        ("postgresql://ca@[::1/ca?password=hunter2", "postgresql://ca@[::1/ca?password=***"),
        ("sqlite:///.ca/state.db", "sqlite:///.ca/state.db"),
        ("not a url password=hunter2", "not a url password=hunter2"),
    ],
)
def test_every_password_of_a_store_url_is_hidden(url: str, shown: str) -> None:
    from framework.spec.urls import hidden

    assert hidden(url) == shown


def test_the_drivers_get_the_url_as_written() -> None:
    url = f"postgresql+asyncpg://ca:pw@127.0.0.1:1/ca?sslmode=disable&password={SECRET}"
    assert libpq_url(url) == f"postgresql://ca:pw@127.0.0.1:1/ca?sslmode=disable&password={SECRET}"
    assert psycopg_url(url) == f"postgresql+psycopg://ca:pw@127.0.0.1:1/ca?sslmode=disable&password={SECRET}"


def test_a_password_in_the_query_reaches_the_server_while_the_store_shows_it_hidden() -> None:
    with fresh_database("store_url") as plain:
        url = f"{plain}?sslmode=disable&password={SECRET}"
        database = PostgresDatabase(url)
        try:
            assert database.url == url
            assert database._conn.info.password == SECRET  # what libpq was given
            assert database.name == plain + "?sslmode=disable&password=***"
        finally:
            database.close()


def test_a_password_in_the_query_is_hidden_when_the_server_cannot_be_reached(tmp_path: Path) -> None:
    url = f"postgresql://ca@127.0.0.1:1/ca?password={SECRET}"
    with pytest.raises(StoreUnreachable) as tasks:
        TaskStore.open(tmp_path, url=url)

    async def conversations() -> None:
        async with open_checkpointer(tmp_path, url=url):
            raise AssertionError("opened a store on port 1")

    with pytest.raises(StoreUnreachable) as checkpoints:
        asyncio.run(conversations())
    with pytest.raises(StoreUnreachable) as audit:
        AuditStore(psycopg_url(url))
    for raised in (tasks, checkpoints, audit):
        message = str(raised.value)
        assert SECRET not in message and SECRET not in repr(raised.value.data)
        assert "://ca@127.0.0.1:1/ca?password=*** (" in message


@pytest.mark.parametrize("command", [["run", "t", "hi"], ["serve", "--port", "0"], ["db", "upgrade"]])
def test_the_cli_hides_a_password_given_in_ca_store_url_query(make_project: ProjectFactory, command: list[str]) -> None:
    root = make_project({"agents/t.yaml": "name: t\nmodel: offline\n"})
    url = f"postgresql://ca@127.0.0.1:1/ca?sslmode=disable&password={SECRET}"
    done = run_ca(*command, cwd=root, env={"CA_STORE_URL": url})
    assert done.returncode == 2, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "postgresql://ca@127.0.0.1:1/ca?sslmode=disable&password=*** (" in done.stderr


def test_an_unsupported_store_url_hides_its_passwords(make_project: ProjectFactory) -> None:
    """In the message; the source line under it shows ca.yaml as written."""
    root = make_project(
        {
            "ca.yaml": f"store: {{url: 'mysql://ca:{SECRET}@db/ca?password={SECRET}'}}\n",
            "agents/t.yaml": "name: t\nmodel: offline\n",
        }
    )
    done = run_ca("validate", cwd=root)
    assert done.returncode == 2, done.stderr
    assert "error: unsupported store URL 'mysql://ca:***@db/ca?password=***': use one of" in done.stderr
    (root / "ca.yaml").unlink()
    done = run_ca("validate", cwd=root, env={"CA_STORE_URL": f"mysql://ca@db/ca?sslpassword={SECRET}"})
    assert done.returncode == 2, done.stderr
    assert "CA_STORE_URL='mysql://ca@db/ca?sslpassword=***': unsupported store URL" in done.stderr
    assert SECRET not in done.stderr
