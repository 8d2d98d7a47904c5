"""``/healthz`` and ``/readyz`` of a real `ca serve`: public under auth, counted by ``/metrics``;
``/readyz`` answers 503 with a reason while the server drains after SIGTERM, and when its
PostgreSQL task store goes away."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

TOKEN = "probe-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLEEPER = """
name: sleeper
tools: [shell]
profile: autonomous
capabilities: {shell: {allow: ["sleep *"], timeout: 1m}}
"""
ADMIN = "postgresql://127.0.0.1:5432/test"
URL = os.environ.get("CA_TEST_POSTGRES_URL", ADMIN)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = write_project(
        tmp_path_factory.mktemp("probes"),
        {
            "ca.yaml": """
                default_agent: echo
                server:
                  auth:
                    credentials: [{name: ops, token_env: OPS_TOKEN, roles: [caller, approver]}]
            """,
            "agents/echo.yaml": "name: echo\n",
        },
    )
    server = start_serve(root, env={"OPS_TOKEN": TOKEN})
    yield server
    server.stop()


def test_both_probes_answer_without_credentials_under_auth(guarded: ServerProcess) -> None:
    health = httpx.get(guarded.url + "/healthz", timeout=10)
    ready = httpx.get(guarded.url + "/readyz", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready", "agents": ["echo"], "bundle": health.json()["bundle"]}
    assert httpx.get(guarded.url + "/agents/echo/readyz", timeout=10).status_code == 401  # only the exact path


def test_the_probes_are_counted_by_their_route(guarded: ServerProcess) -> None:
    for _ in range(3):
        httpx.get(guarded.url + "/readyz", timeout=10)
    metrics = httpx.get(guarded.url + "/metrics", headers=AUTH, timeout=10)
    samples = {
        (sample.name, sample.labels.get("method"), sample.labels.get("code")): sample.value
        for family in text_string_to_metric_families(metrics.text)
        for sample in family.samples
    }
    assert samples[("ca_requests_total", "GET /readyz", "200")] >= 3


def test_readyz_is_503_while_the_server_drains(tmp_path: Path) -> None:
    root = write_project(
        tmp_path,
        {"ca.yaml": "default_agent: sleeper\nserver: {shutdown_timeout: 5s}\n", "agents/sleeper.yaml": SLEEPER},
    )
    server = start_serve(root)
    prober = httpx.Client(timeout=10)  # one kept-alive connection, as a load balancer's
    try:
        assert prober.get(server.url + "/readyz").status_code == 200
        message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": '@tool shell {"command": "sleep 30"}'}]}
        caller = threading.Thread(target=lambda: server.rpc("SendMessage", {"message": message}, agent="sleeper"))
        caller.start()
        _wait_for_child(server, "sleep")
        server.proc.send_signal(signal.SIGTERM)
        answer = _poll(prober, server.url + "/readyz", lambda r: r.status_code == 503)
        assert answer.json() == {
            "status": "draining",
            "reason": "the server is shutting down: it finishes its running tasks and accepts no new ones",
        }
        assert prober.get(server.url + "/healthz").status_code == 200  # alive while it drains
        caller.join(timeout=30)
        server.proc.wait(timeout=30)
    finally:
        prober.close()
        server.stop(signal.SIGKILL)


def test_readyz_is_503_when_the_postgresql_store_goes_away(tmp_path: Path) -> None:
    database = _fresh_database()
    root = write_project(tmp_path, {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"})
    server = start_serve(root, env={"CA_STORE_URL": _database_url(database)})  # the store from the environment
    try:
        ready = httpx.get(server.url + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        _drop_database(database)
        gone = _poll(httpx.Client(timeout=20), server.url + "/readyz", lambda r: r.status_code == 503)
        assert gone.json()["status"] == "store_unreachable"
        assert gone.json()["reason"].startswith("the task store does not answer (")
        assert "127.0.0.1" not in gone.text and database not in gone.text  # anyone may read it
        assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
        assert "readiness: the task store does not answer" in server.stderr()
    finally:
        server.stop()
        _drop_database(database)


# -- helpers ------------------------------------------------------------------------------


def _poll(client: httpx.Client, url: str, done: Any, timeout: float = 20) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(url)
        if done(answer) or time.monotonic() > deadline:
            assert done(answer), (answer.status_code, answer.text)
            return answer
        time.sleep(0.1)


def _wait_for_child(server: ServerProcess, name: str, timeout: float = 30) -> None:
    import subprocess

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(server.proc.pid), "-x", name], capture_output=True, text=True)
        if found.stdout.strip():
            return
        time.sleep(0.1)
    pytest.fail(f"the tool never started {name}:\n{server.output()}")


def _admin(sql: str) -> None:
    asyncpg = pytest.importorskip("asyncpg", reason="asyncpg (the 'postgres' extra) is not installed")

    async def run() -> None:
        conn = await asyncpg.connect(URL, timeout=3)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


def _fresh_database() -> str:
    """A new database of this test's own on the PostgreSQL server (skip when none answers)."""
    name = f"ca_test_probes_{uuid.uuid4().hex[:12]}"
    try:
        _admin(f'CREATE DATABASE "{name}"')
    except (OSError, TimeoutError) as exc:
        pytest.skip(f"no PostgreSQL at {URL} ({type(exc).__name__}: {exc}); set CA_TEST_POSTGRES_URL")
    return name


def _database_url(name: str) -> str:
    return URL.rsplit("/", 1)[0] + "/" + name


def _drop_database(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
