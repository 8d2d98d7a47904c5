"""Hostile and malformed input over HTTP: one regression test per bug found by fuzzing `ca serve`.

Each answer is the JSON-RPC error the spec names (or the REST error shape), never HTTP 5xx or a
traceback in the server's log, and no input changes what later callers get.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.a2a_peers import Json, user_message
from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

PROJECT = {"ca.yaml": "default_agent: echo\n", "agents/echo.yaml": "name: echo\n"}
DEEP = "[" * 1000 + "]" * 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    served: ServerProcess = start_serve(write_project(tmp_path_factory.mktemp("hostile-http"), PROJECT))
    try:
        yield served
    finally:
        served.stop()
        served.assert_clean_exit()  # no traceback in the log, for every request of the module


def post(server: ServerProcess, body: bytes | str, path: str = "/agents/echo/", **headers: str) -> httpx.Response:
    content = body.encode() if isinstance(body, str) else body
    return server.client.post(
        server.url + path, content=content, headers={"content-type": "application/json", **headers}
    )


def answer(response: httpx.Response) -> Json:
    """A JSON-RPC answer: HTTP 200, JSON, exactly one of result and error."""
    assert response.status_code == 200, (response.status_code, response.text[:500])
    decoded: Json = response.json()
    assert decoded["jsonrpc"] == "2.0" and ("result" in decoded) != ("error" in decoded), decoded
    return decoded


def refused(response: httpx.Response, code: int) -> Json:
    decoded = answer(response)
    assert "error" in decoded and decoded["error"]["code"] == code, decoded
    assert "\n" not in decoded["error"]["message"], decoded  # one line, no pydantic dump
    return decoded


def request(method: str, params: Any, request_id: Any = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})


def list_tasks(server: ServerProcess) -> list[Json]:
    tasks: list[Json] = answer(post(server, request("ListTasks", {}), **{"A2A-Version": "1.0"}))["result"]["tasks"]
    return tasks


def send(server: ServerProcess, message: Json, path: str = "/agents/echo/") -> Json:
    decoded = answer(post(server, request("SendMessage", {"message": message}), path, **{"A2A-Version": "1.0"}))
    assert "result" in decoded, decoded
    task: Json = decoded["result"]["task"]
    return task


# -- values that serialize differently than they parse --------------------------------------------


@pytest.mark.parametrize(
    "data",
    ['{"n": 1e999}', '{"n": -1e999}', '{"n": 1152921504606846976}', '{"text": "\\ud800"}', '{"\\udfff": 1}'],
    ids=["inf", "minus-inf", "beyond-2**53", "lone-surrogate", "lone-surrogate-key"],
)
def test_a_value_that_cannot_be_stored_is_refused_and_later_list_tasks_still_work(
    server: ServerProcess, data: str
) -> None:
    message = user_message("poison")
    body = request("SendMessage", {"message": {**message, "parts": "PARTS"}}).replace(
        '"PARTS"', f'[{{"data": {data}}}]'
    )
    error = refused(post(server, body, **{"A2A-Version": "1.0"}), -32602)
    assert error["id"] == 1 and "params.message.parts[0].data" in error["error"]["message"]
    assert all(task["history"][0]["messageId"] != message["messageId"] for task in list_tasks(server))
    assert send(server, user_message("still fine"))["status"]["state"] == "TASK_STATE_COMPLETED"
    assert list_tasks(server)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_are_a_parse_error(server: ServerProcess, literal: str) -> None:
    error = refused(
        post(server, f'{{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {{"id": {literal}}}}}'), -32700
    )
    assert error["id"] is None


# -- nesting, encodings, ids --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "method"),
    [("/agents/echo/", "_cleveragents/diagnostics"), ("/agents/nobody/", "GetTask"), ("/agents/echo/", "GetTask"), ("/", "ListTasks")],
    ids=["platform-method", "unknown-agent", "a2a-method", "root-endpoint"],
)  # fmt: skip
def test_json_nested_a_thousand_deep_is_a_parse_error_on_every_path(
    server: ServerProcess, path: str, method: str
) -> None:
    body = f'{{"jsonrpc": "2.0", "id": 5, "method": "{method}", "params": {{"a": {DEEP}}}}}'
    error = refused(post(server, body, path, **{"A2A-Version": "1.0"}), -32700)
    assert "deeper than 64 levels" in error["error"]["message"]
    server.assert_alive()


def test_invalid_utf8_inside_a_json_string_is_a_parse_error(server: ServerProcess) -> None:
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "\xff\xfe"}}'
    error = refused(post(server, body, **{"A2A-Version": "1.0"}), -32700)
    assert error["id"] is None and "not UTF-8" in error["error"]["message"]


def test_invalid_utf8_in_a_rest_body_is_a_rest_400(server: ServerProcess) -> None:
    body = b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "\xff"}]}}'
    response = post(server, body, "/agents/echo/rest/message:send", **{"A2A-Version": "1.0"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT") and "not UTF-8" in error["message"]


def test_a_rest_send_with_an_unstorable_value_is_a_rest_400_and_stores_nothing(server: ServerProcess) -> None:
    message = user_message("poison over rest")
    body = json.dumps({"message": {**message, "parts": "PARTS"}}).replace('"PARTS"', '[{"data": {"n": 1e999}}]')
    response = post(server, body, "/agents/echo/rest/message:send")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "body.message.parts[0].data.n" in error["message"]
    assert all(task["history"][0]["messageId"] != message["messageId"] for task in list_tasks(server))


@pytest.mark.parametrize(
    "request_id", ["9" * 4301, "true", "false", '{"a": 1}', "[1]", '"\\ud800"'],
    ids=["4301-digits", "true", "false", "object", "array", "lone-surrogate"],
)  # fmt: skip
@pytest.mark.parametrize("method", ["GetTask", "_cleveragents/diagnostics", "message/send"])
def test_an_invalid_id_is_an_invalid_request_answered_with_id_null(
    server: ServerProcess, request_id: str, method: str
) -> None:
    body = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "{method}", "params": {{"id": "x"}}}}'
    error = refused(post(server, body, **{"A2A-Version": "1.0"}), -32600)
    assert error["id"] is None


def test_a_valid_id_is_echoed_even_when_the_method_is_not(server: ServerProcess) -> None:
    error = refused(post(server, '{"jsonrpc": "2.0", "id": "mine", "method": ["GetTask"]}'), -32600)
    assert error["id"] == "mine"


# -- notifications --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        '{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "no-such-task"}}',
        '{"jsonrpc": "2.0", "method": "_cleveragents/diagnostics"}',
        '{"jsonrpc": "2.0", "method": "NoSuchMethod"}',
        '{"jsonrpc": "2.0", "method": "tasks/get", "params": {}}',
        '{"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": {"parts": [{"data": {"n": 1e999}}]}}}',
    ],
    ids=["a2a", "platform", "unknown-method", "bad-v03-params", "unstorable-params"],
)
def test_a_notification_gets_no_content(server: ServerProcess, body: str) -> None:
    response = post(server, body, **{"A2A-Version": "1.0"})
    assert response.status_code == 204 and response.content == b""


def test_a_notification_is_still_run(server: ServerProcess) -> None:
    message = user_message("notified")
    body = json.dumps({"jsonrpc": "2.0", "method": "SendMessage", "params": {"message": message}})
    assert post(server, body, **{"A2A-Version": "1.0"}).status_code == 204
    assert any(task["history"][0]["messageId"] == message["messageId"] for task in list_tasks(server))


# -- versions and v0.3 requests -----------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_a_v03_method_under_another_a2a_version_is_version_not_supported(server: ServerProcess, version: str) -> None:
    error = refused(post(server, request("tasks/get", {"id": "x"}), **{"A2A-Version": version}), -32009)
    assert "A2A-Version" in error["error"]["message"] and "GetTask" in error["error"]["message"]


def test_a_v1_method_without_the_header_names_it(server: ServerProcess) -> None:
    error = refused(post(server, request("GetTask", {"id": "x"})), -32009)
    assert "send A2A-Version: 1.0" in error["error"]["message"]


@pytest.mark.parametrize(
    ("method", "params", "reason"),
    [
        ("message/send", {"message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}]}}, "params.message.messageId: Field required"),
        ("message/send", {"message": {"role": "user", "messageId": "m"}}, "params.message.parts: Field required"),
        ("tasks/get", {}, "params.id: Field required"),
    ],
    ids=["no-message-id", "no-parts", "tasks-get-empty"],
)  # fmt: skip
def test_a_bad_v03_request_is_invalid_params_with_a_one_line_reason_and_log(
    server: ServerProcess, method: str, params: Json, reason: str
) -> None:
    request_id = uuid.uuid4().hex
    error = refused(post(server, request(method, params, request_id)), -32602)
    assert error["id"] == request_id and reason in error["error"]["message"]
    assert "pydantic" not in error["error"]["message"]
    logged = [line for line in server.stderr().splitlines() if reason in line]
    assert logged and all(line.startswith("refused a JSON-RPC request") for line in logged)
    assert "Traceback" not in server.stderr()


# -- REST version, paths ------------------------------------------------------------------------


def test_a_rest_call_without_a2a_version_is_taken_as_the_cards_version(server: ServerProcess) -> None:
    card = server.client.get(server.url + "/agents/echo/.well-known/agent-card.json").json()
    rest = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "HTTP+JSON"]
    assert rest[0]["protocolVersion"] == "1.0"  # first: what a client picks (0.3.0 follows for v0.3 clients)
    body = json.dumps({"message": user_message("over rest")})
    response = post(server, body, "/agents/echo/rest/message:send")
    assert response.status_code == 200, response.text
    assert response.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    listed = server.client.get(server.url + "/agents/echo/rest/tasks")
    assert listed.status_code == 200 and listed.json()["tasks"]


def test_post_to_an_agent_without_the_trailing_slash_is_the_endpoint(server: ServerProcess) -> None:
    task = send(server, user_message("no slash"), path="/agents/echo")
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    diagnostics = answer(post(server, request("_cleveragents/diagnostics", None), "/agents/echo"))
    assert diagnostics["result"]["agents"] == ["echo"]
    unknown = post(server, request("GetTask", {"id": "x"}), "/agents/nobody", **{"A2A-Version": "1.0"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == -32084
    assert "'nobody' not found" in unknown.json()["error"]["message"]


def test_the_log_has_one_line_per_refusal(server: ServerProcess) -> None:
    refused(post(server, "{not json"), -32700)
    lines = [line for line in server.stderr().splitlines() if "parse error: invalid JSON" in line]
    assert lines and all(line.startswith("refused a JSON-RPC request on /agents/echo/: -32700") for line in lines)
