"""The ``_cleveragents/*`` platform methods and the request size limit, over HTTP against a real ``ca serve``.

One server serves the module; each test makes its own tasks.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.a2a_peers import Json, reply_text, result_of, user_message
from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

MAX_BYTES = 6000

PROJECT = {
    "ca.yaml": f"default_agent: echo\nserver:\n  max_request_bytes: {MAX_BYTES}\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/guide.yaml": """
        name: guide
        description: Shows the way
        skills:
          - {id: directions, name: Directions, description: How to get somewhere, tags: [travel, maps]}
    """,
    "agents/writer.yaml": writer_agent(extra="\n        budget: {max_tool_calls: 5, max_turns: 4}"),
    "tools/side.py": SIDE_EFFECT,
}


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("platform"), PROJECT)


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[ServerProcess]:
    served = start_serve(project)
    try:
        yield served
    finally:
        served.stop()


def paused_task(server: ServerProcess) -> Json:
    """A writer task waiting for approval of its side effect."""
    task: Json = result_of(server.rpc("SendMessage", {"message": user_message("go")}, agent="writer"))["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task


def error_of(answer: Json, code: int) -> str:
    assert "result" not in answer, answer
    assert answer["error"]["code"] == code, answer
    message: str = answer["error"]["message"]
    return message


# -- registry -------------------------------------------------------------------------------------


def test_registry_list_names_every_agent_with_its_url_and_skills(server: ServerProcess) -> None:
    agents = {a["name"]: a for a in result_of(server.rpc("_cleveragents/registry/list"))["agents"]}
    assert sorted(agents) == ["echo", "guide", "writer"]
    guide = agents["guide"]
    assert guide["kind"] == "llm" and guide["description"] == "Shows the way" and guide["source"] == "project"
    assert guide["url"] == f"{server.url}/agents/guide/"
    assert guide["skills"] == [{"id": "directions", "name": "Directions", "tags": ["travel", "maps"]}]


def test_registry_get_returns_the_card_or_agent_not_found(server: ServerProcess) -> None:
    card = result_of(server.rpc("_cleveragents/registry/get", {"name": "guide"}))["card"]
    assert card["name"] == "guide"
    assert card["supportedInterfaces"][0]["url"] == f"{server.url}/agents/guide/"
    message = error_of(server.rpc("_cleveragents/registry/get", {"name": "nobody"}), -32084)
    assert "'nobody'" in message
    error_of(server.rpc("_cleveragents/registry/get", {}), -32602)


def test_platform_methods_answer_on_every_agent_endpoint(server: ServerProcess) -> None:
    for path in ("/", "/agents/guide/", "/agents/writer/"):
        response = server.post({"jsonrpc": "2.0", "id": "p", "method": "_cleveragents/diagnostics"}, path=path)
        assert response.status_code == 200
        assert response.json()["id"] == "p" and "agents" in response.json()["result"]


# -- approvals ----------------------------------------------------------------------------------------


def test_approvals_list_shows_a_paused_task_with_its_pending_payload_and_expiry(server: ServerProcess) -> None:
    task = paused_task(server)
    approvals = result_of(server.rpc("_cleveragents/approvals/list"))["approvals"]
    [entry] = [a for a in approvals if a["taskId"] == task["id"]]
    assert entry["contextId"] == task["contextId"] and entry["agent"] == "writer"
    [pending] = entry["pending"]
    assert (pending["kind"], pending["tool"], pending["args"]) == (
        "approval",
        "append",
        {"file": "effects.log", "text": "hello"},
    )
    assert pending["agent"] == "writer" and "writer wants to run append" in pending["message"]
    assert pending["rule"] and pending["reason"]
    assert pending["expired"] is False
    assert pending["expiresAt"] > pending["pausedAt"]
    [payload] = task["status"]["message"]["parts"][1]["data"]["pending"]
    assert pending["id"] == payload["id"]  # the interrupt the A2A status names

    only_echo = result_of(server.rpc("_cleveragents/approvals/list", {"agent": "echo"}))["approvals"]
    assert only_echo == []


def test_approvals_decide_runs_the_decision_and_a_second_decide_is_refused(
    project: Path, server: ServerProcess
) -> None:
    task = paused_task(server)
    before = (project / "effects.log").read_text() if (project / "effects.log").exists() else ""
    decided = result_of(server.rpc("_cleveragents/approvals/decide", {"taskId": task["id"], "decision": "approve"}))
    done = decided["task"]
    assert done["id"] == task["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply_text(done) == "done"
    assert (project / "effects.log").read_text() == before + "hello\n"

    got = result_of(server.rpc("GetTask", {"id": task["id"]}, agent="writer"))
    assert got["status"]["state"] == "TASK_STATE_COMPLETED" and reply_text(got) == "done"
    listed = result_of(server.rpc("_cleveragents/approvals/list"))["approvals"]
    assert task["id"] not in [a["taskId"] for a in listed]

    again = server.rpc("_cleveragents/approvals/decide", {"taskId": task["id"], "decision": "approve"})
    assert "not waiting for a decision" in error_of(again, -32088)
    assert (project / "effects.log").read_text() == before + "hello\n"


def test_approvals_decide_validates_its_params(server: ServerProcess) -> None:
    bad = server.rpc("_cleveragents/approvals/decide", {"taskId": "x", "decision": "maybe"})
    assert "decision" in error_of(bad, -32602)
    missing = server.rpc("_cleveragents/approvals/decide", {"decision": "approve"})
    assert "taskId" in error_of(missing, -32602)
    unknown = server.rpc("_cleveragents/approvals/decide", {"taskId": "no-such-task", "decision": "approve"})
    error_of(unknown, -32001)


# -- budget, audit, diagnostics ------------------------------------------------------------------------


def test_budget_status_reports_usage_and_caps(server: ServerProcess) -> None:
    task = paused_task(server)
    status = result_of(server.rpc("_cleveragents/budget/status", {"taskId": task["id"]}))
    assert status["taskId"] == task["id"] and status["state"] == "input-required"
    assert status["budget"] == {"maxToolCalls": 5, "maxTurns": 4, "onExceed": "stop", "extendBy": 0.5}
    usage = status["usage"]
    assert set(usage) >= {"inputTokens", "outputTokens", "modelCalls", "toolCalls"}
    assert usage["modelCalls"] == 1
    error_of(server.rpc("_cleveragents/budget/status", {"taskId": "no-such-task"}), -32001)


def test_budget_status_after_a_decision_counts_the_whole_task(server: ServerProcess) -> None:
    """Usage from before the pause is kept when the task resumes (the tool call ran after it)."""
    task = paused_task(server)
    result_of(server.rpc("_cleveragents/approvals/decide", {"taskId": task["id"], "decision": "approve"}))
    usage = result_of(server.rpc("_cleveragents/budget/status", {"taskId": task["id"]}))["usage"]
    assert (usage["modelCalls"], usage["toolCalls"]) == (2, 1)


def test_usage_counts_are_integers_where_we_write_the_json_and_equal_numbers_in_a2a_metadata(
    server: ServerProcess,
) -> None:
    """docs/a2a.md: a2a-sdk writes metadata through protobuf (doubles), our own results use integers."""
    task = paused_task(server)
    result_of(server.rpc("_cleveragents/approvals/decide", {"taskId": task["id"], "decision": "approve"}))
    usage = result_of(server.rpc("_cleveragents/budget/status", {"taskId": task["id"]}))["usage"]
    counts = {k: usage[k] for k in ("inputTokens", "outputTokens", "modelCalls", "toolCalls")}
    assert all(type(v) is int for v in counts.values()), usage
    done = result_of(server.rpc("GetTask", {"id": task["id"]}, agent="writer"))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    wire = done["metadata"]["usage"]  # the final status update's metadata, merged into the task's
    assert {k: wire[k] for k in counts} == counts  # the same numbers, whatever their spelling


def test_audit_query_returns_the_tasks_records_in_order(server: ServerProcess) -> None:
    task = paused_task(server)
    result_of(server.rpc("_cleveragents/approvals/decide", {"taskId": task["id"], "decision": "approve"}))
    records = result_of(server.rpc("_cleveragents/audit/query", {"taskId": task["id"]}))["records"]
    assert all(r["taskId"] == task["id"] and r["conversationId"] == task["contextId"] for r in records)
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(b["prevHash"] == a["hash"] for a, b in itertools.pairwise(records) if b["seq"] == a["seq"] + 1)
    kinds = [r["kind"] for r in records]
    states = [r["data"]["state"] for r in records if r["kind"] == "task.state"]
    assert states[:3] == ["submitted", "working", "input-required"] and states[-1] == "completed"
    for kind in ("approval", "decision", "tool.call", "tool.result"):
        assert kind in kinds
    assert kinds.index("approval") < kinds.index("decision") < kinds.index("tool.call") < kinds.index("tool.result")

    first_two = result_of(server.rpc("_cleveragents/audit/query", {"taskId": task["id"], "limit": 2}))["records"]
    assert first_two == records[:2]
    since = result_of(server.rpc("_cleveragents/audit/query", {"taskId": task["id"], "sinceSeq": seqs[1]}))["records"]
    assert [r["seq"] for r in since] == [s for s in seqs if s > seqs[1]]
    by_context = result_of(
        server.rpc("_cleveragents/audit/query", {"contextId": task["contextId"], "kind": "decision"})
    )
    assert [r["kind"] for r in by_context["records"]] == ["decision"]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"sinceSeq": -1}, "sinceSeq"),
        ({"taskid": "x"}, "taskid"),
    ],
)
def test_audit_query_bad_params_are_invalid_params_naming_the_param(
    server: ServerProcess, params: Json, named: str
) -> None:
    message = error_of(server.rpc("_cleveragents/audit/query", params), -32602)
    assert re.search(rf"\b{named}\b", message), message


def test_diagnostics_report_the_bundle_and_its_agents(server: ServerProcess) -> None:
    diagnostics = result_of(server.rpc("_cleveragents/diagnostics"))
    assert re.fullmatch(r"[0-9a-f]{64}", diagnostics["bundle"])
    assert diagnostics["agents"] == ["echo", "guide", "writer"]
    assert diagnostics["errors"] == [] and diagnostics["warnings"] == []
    health = httpx.get(f"{server.url}/healthz").json()
    assert diagnostics["bundle"].startswith(health["bundle"])
    error_of(server.rpc("_cleveragents/diagnostics", {"verbose": True}), -32602)


def test_platform_calls_are_found_whatever_the_order_of_their_keys(server: ServerProcess) -> None:
    """``params`` may come first and be long: the call is still a platform call."""
    body = {"params": {"kind": "x" * 4500}, "jsonrpc": "2.0", "id": "late", "method": "_cleveragents/audit/query"}
    response = server.post(json.dumps(body).encode())
    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": "late", "result": {"records": []}}


# -- limits ------------------------------------------------------------------------------------------


def test_a_body_over_the_limit_gets_413_with_a_json_rpc_error_and_the_server_goes_on(server: ServerProcess) -> None:
    big = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message("x" * 2 * MAX_BYTES)}}
    response = server.post(big)
    assert response.status_code == 413
    answer = response.json()
    assert answer["jsonrpc"] == "2.0"
    assert f"larger than {MAX_BYTES} bytes" in error_of(answer, -32600)
    platform = server.post(
        {"jsonrpc": "2.0", "id": 2, "method": "_cleveragents/audit/query", "params": {"kind": "y" * MAX_BYTES}}
    )
    assert platform.status_code == 413

    assert httpx.get(f"{server.url}/healthz").status_code == 200
    task = result_of(server.rpc("SendMessage", {"message": user_message("still here")}))["task"]
    assert reply_text(task) == "[echo] You said: still here"
