"""Hostile and malformed input on `ca run --stdio`, A2A and ACP: one regression test per bug.

Every process here runs with a strict UTF-8 locale and no PYTHONIOENCODING, as an editor may
start it; every stdout line must be JSON (the peer fails on anything else), and no traceback
may reach stderr.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import Json, StdioPeer, result_of, user_message
from tests.conftest import write_project

pytestmark = pytest.mark.e2e

PROJECT = {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"}
INITIALIZE: Json = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": 1, "clientCapabilities": {}},
}
DEEP = "[" * 1000 + "]" * 1000


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("hostile-stdio"), PROJECT)


@pytest.fixture(autouse=True)
def strict_locale(monkeypatch: pytest.MonkeyPatch) -> None:
    """StdioPeer passes this process's environment on: a strict UTF-8 locale, no encoding override."""
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    monkeypatch.delenv("PYTHONUTF8", raising=False)


@pytest.fixture
def peer(project: Path) -> Iterator[StdioPeer]:
    started = StdioPeer(project)
    try:
        yield started
    finally:
        started.kill()


def null_error(peer: StdioPeer) -> Json:
    message = peer.wait_for(lambda m: m.get("id") is None and "error" in m)
    assert "\n" not in message["error"]["message"]
    return message


def clean_end(peer: StdioPeer) -> list[Json]:
    code, rest = peer.close()
    assert code == 0, peer.stderr()
    assert "Traceback" not in peer.stderr(), peer.stderr()
    return rest


def test_blank_lines_and_a_garbage_first_line_do_not_lock_the_protocol_in(peer: StdioPeer) -> None:
    peer.send_raw(b"\n   \n\r\n")
    peer.send("this is not json")
    peer.send("[1, 2]")
    assert null_error(peer)["error"]["code"] == -32700
    assert null_error(peer)["error"]["code"] == -32600
    peer.send(INITIALIZE)
    assert result_of(peer.answer(0))["protocolVersion"] == 1  # ACP, chosen by the first request
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
    assert "sessionId" in result_of(peer.answer(1))
    clean_end(peer)


def test_a_garbage_first_line_before_an_a2a_request_gets_its_parse_error(peer: StdioPeer) -> None:
    peer.send_raw(b"\xff\xfe garbage\n")
    assert null_error(peer)["error"]["code"] == -32700
    task = result_of(peer.request("SendMessage", {"message": user_message("hi")}))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    clean_end(peer)


@pytest.mark.parametrize("protocol", ["a2a", "acp"])
def test_invalid_utf8_on_stdin_is_a_parse_error_not_the_end_of_the_process(peer: StdioPeer, protocol: str) -> None:
    if protocol == "acp":
        peer.send(INITIALIZE)
        peer.answer(0)
    else:
        peer.request("agent/discover")
    peer.send_raw(b'{"jsonrpc": "2.0", "id": "\xff\xfe", "method": "session/new", "params": {}}\n')
    error = null_error(peer)  # unanswerable: its id cannot be read
    assert error["error"]["code"] == -32700 and "not UTF-8" in error["error"]["message"]
    peer.send_raw(b"\xc3\x28\n")
    assert null_error(peer)["error"]["code"] == -32700
    if protocol == "acp":
        peer.send({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/", "mcpServers": []}})
        assert "sessionId" in result_of(peer.answer(1))
    else:
        assert result_of(peer.request("agent/discover"))["name"] == "echo"
    clean_end(peer)


@pytest.mark.parametrize("protocol", ["a2a", "acp"])
def test_invalid_ids_get_invalid_request_with_id_null_and_deep_json_a_parse_error(
    peer: StdioPeer, protocol: str
) -> None:
    peer.send(INITIALIZE if protocol == "acp" else {"jsonrpc": "2.0", "id": 0, "method": "agent/discover"})
    peer.answer(0)
    for bad in ("true", "[1]", '{"a": 1}', "9" * 4301):
        peer.send(f'{{"jsonrpc": "2.0", "id": {bad}, "method": "session/new", "params": {{}}}}')
        assert null_error(peer)["error"]["code"] == -32600
    peer.send(f'{{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {{"a": {DEEP}}}}}')
    assert null_error(peer)["error"]["code"] == -32700
    clean_end(peer)


def test_a2a_notifications_and_bad_v03_requests_over_stdio(peer: StdioPeer) -> None:
    peer.send({"jsonrpc": "2.0", "method": "agent/discover"})
    peer.send({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": user_message("quiet")}})
    peer.send({"jsonrpc": "2.0", "method": "tasks/get", "params": {}})
    answer = peer.request("message/send", {"message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}]}})
    assert answer["error"]["code"] == -32602
    assert "params.message.messageId: Field required" in answer["error"]["message"]
    assert peer.request("tasks/get", {})["error"]["code"] == -32602
    poisoned = peer.request("SendMessage", {"message": {**user_message("x"), "parts": [{"data": {"n": 10**400}}]}})
    assert poisoned["error"]["code"] == -32602
    tasks = result_of(peer.request("ListTasks", {}))["tasks"]
    assert any(t["history"][0]["parts"][0].get("text") == "quiet" for t in tasks)  # the notification ran
    rest = clean_end(peer)
    assert rest == [], rest  # nothing answered the three notifications
    assert "pydantic" not in peer.stderr()


def test_a_line_over_the_size_limit_is_refused_and_the_loop_goes_on(project: Path) -> None:
    small = write_project(
        project / "small", {**PROJECT, "ca.yaml": "default_agent: echo\nserver: {max_request_bytes: 2048}\n"}
    )
    peer = StdioPeer(small, "echo")
    try:
        peer.request("agent/discover")
        peer.send(
            {"jsonrpc": "2.0", "id": "big", "method": "SendMessage", "params": {"message": user_message("x" * 5000)}}
        )
        error = null_error(peer)
        assert error["error"]["code"] == -32600 and "max_request_bytes" in error["error"]["message"]
        assert result_of(peer.request("agent/discover"))["name"] == "echo"
        clean_end(peer)
    finally:
        peer.kill()
