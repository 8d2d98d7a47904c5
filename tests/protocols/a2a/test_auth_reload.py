"""``ca serve --reload`` cannot weaken the server: ``server.auth``, host and port are kept until restart.

One authenticated ``ca serve --reload`` serves the module; each test edits ``ca.yaml``, waits for the
notice on stderr and puts the file back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.a2a_peers import result_of
from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

TOKENS = {"T_TOKENS": "token-one"}
BEARER = {"Authorization": "Bearer token-one"}
AUTH_YAML = "default_agent: echo\nserver:\n  auth: {bearer_tokens_env: T_TOKENS}\n"
PROJECT = {"ca.yaml": AUTH_YAML, "agents/echo.yaml": "name: echo\n"}
DEADLINE = 15.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = write_project(tmp_path_factory.mktemp("auth-reload"), PROJECT)
    served = start_serve(root, "--reload", env=TOKENS)
    try:
        yield served
    finally:
        served.stop()
    served.assert_clean_exit()


def wait_for(probe: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def edit_ca_yaml(server: ServerProcess, text: str, notice: str) -> None:
    """Save ``ca.yaml`` and wait until the server has reloaded it and printed ``notice``."""
    (server.root / "ca.yaml").write_text(text, encoding="utf-8")
    wait_for(lambda: notice in server.stderr(), repr(notice))


def restore(server: ServerProcess) -> None:
    reloads = server.stderr().count("reloaded: ")
    (server.root / "ca.yaml").write_text(AUTH_YAML, encoding="utf-8")
    wait_for(lambda: server.stderr().count("reloaded: ") > reloads, "the reload of the restored ca.yaml")


def restart_notices(server: ServerProcess) -> list[str]:
    notices: list[str] = result_of(server.rpc("_cleveragents/diagnostics", headers=BEARER))["restart"]
    return notices


def anonymous_list_tasks(server: ServerProcess) -> int:
    return server.post({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).status_code


def test_a_reload_that_removes_auth_keeps_it_enforced_and_asks_for_a_restart(server: ServerProcess) -> None:
    try:
        edit_ca_yaml(server, "default_agent: echo\n", "restart to apply server.auth")
        assert anonymous_list_tasks(server) == 401
        assert server.proc.poll() is None
        [notice] = restart_notices(server)
        assert notice.startswith("server.auth (")
    finally:
        restore(server)
    assert restart_notices(server) == []


def test_a_reload_that_changes_the_tokens_variable_keeps_the_tokens_of_the_start(server: ServerProcess) -> None:
    try:
        edit_ca_yaml(
            server, "default_agent: echo\nserver:\n  auth: {bearer_tokens_env: OTHER}\n", "restart to apply server.auth"
        )
        assert "error" not in server.stderr().lower()
        assert result_of(server.rpc("ListTasks", {}, headers=BEARER)) is not None
        assert anonymous_list_tasks(server) == 401
    finally:
        restore(server)


def test_a_reload_that_changes_host_and_port_asks_for_a_restart(server: ServerProcess) -> None:
    try:
        edit_ca_yaml(
            server,
            AUTH_YAML + "  host: 0.0.0.0\n  port: 9999\n",
            "restart to apply server.host (127.0.0.1 -> 0.0.0.0), server.port (8765 -> 9999)",
        )
        assert restart_notices(server) == ["server.host (127.0.0.1 -> 0.0.0.0)", "server.port (8765 -> 9999)"]
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        restore(server)
