"""``/metrics`` of a real `ca serve`, scraped after a known load and parsed with prometheus-client."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.a2a_peers import result_of, user_message
from tests.conftest import SIDE_EFFECT, write_project, writer_agent
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

TOKEN = "metrics-token"
PROJECT = {
    "ca.yaml": """
        default_agent: echo
        server:
          auth:
            credentials:
              - {name: ops, token_env: OPS_TOKEN, roles: [caller, approver]}
              - {name: team, token_env: TEAM_TOKEN}
    """,
    "agents/echo.yaml": "name: echo\n",
    "agents/writer.yaml": writer_agent(),
    "tools/side.py": SIDE_EFFECT,
}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _samples(server: ServerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = httpx.get(server.url + "/metrics", headers=AUTH, timeout=30)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_metrics_count_a_known_load_and_are_behind_auth(tmp_path: Path) -> None:
    root = write_project(tmp_path, PROJECT)
    server = start_serve(root, env={"OPS_TOKEN": TOKEN, "TEAM_TOKEN": "team-token"})
    try:
        assert httpx.get(server.url + "/metrics", timeout=30).status_code == 401  # no credentials, no figures
        team = httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer team-token"}, timeout=30)
        assert team.status_code == 403 and "approver role" in team.text  # they span every caller's tasks
        for i in range(3):
            sent = result_of(server.rpc("SendMessage", {"message": user_message(f"hello {i}")}, headers=AUTH))
            assert sent["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        paused = result_of(server.rpc("SendMessage", {"message": user_message("go")}, agent="writer", headers=AUTH))
        task_id = paused["task"]["id"]
        decided = server.rpc("_cleveragents/approvals/decide", {"taskId": task_id, "decision": "approve"}, headers=AUTH)
        assert "result" in decided, decided
        for garbage in ("NoSuchMethod", "Another/made-up"):
            server.rpc(garbage, {}, headers=AUTH)
        samples = _samples(server)
    finally:
        server.stop()

    requests = "ca_requests_total"
    assert _value(samples, requests, method="SendMessage", code="200") == 4
    assert _value(samples, requests, method="_cleveragents/approvals/decide", code="200") == 1
    assert _value(samples, requests, method="unknown", code="-32601") == 2  # unknown names get no label of their own
    assert _value(samples, requests, method="GET /metrics", code="401") == 1
    assert _value(samples, requests, method="GET /metrics", code="403") == 1
    assert _value(samples, "ca_request_seconds_count", method="SendMessage") == 4

    assert _value(samples, "ca_task_runs_total", agent="echo", state="completed") == 3
    assert _value(samples, "ca_task_runs_total", agent="writer", state="input-required") == 1
    assert _value(samples, "ca_task_runs_total", agent="writer", state="completed") == 1
    assert _value(samples, "ca_tasks", state="completed") == 4
    assert _value(samples, "ca_pending_approvals") == 0

    assert _value(samples, "ca_model_calls_total", agent="echo", model="offline:offline") == 3
    assert _value(samples, "ca_model_calls_total", agent="writer", model="scripted:scripted") == 2
    assert _value(samples, "ca_model_call_seconds_count", agent="echo", model="offline:offline") == 3
    assert _value(samples, "ca_tokens_total", agent="echo", model="offline:offline", type="output") > 0
    assert _value(samples, "ca_tool_calls_total", agent="writer", tool="append", decision="allowed") == 1
    assert _value(samples, "ca_tool_call_seconds_count", agent="writer", tool="append") == 1
    assert _value(samples, "ca_approval_wait_seconds_count") == 1
    # Local models cost nothing, and that is known (a model without a price gets no sample, not 0).
    cost = ("ca_cost_usd_total", frozenset({"agent": "writer", "model": "scripted:scripted"}.items()))
    assert samples[cost] == 0
