"""`ca run --stdio`: the seed's request shapes (``tasks/send {"task": ...}``, ``tasks/get`` and
``tasks/cancel`` by ``task_id``), accepted as aliases, through a real subprocess."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import STDIO_PROJECT, StdioPeer, result_of
from tests.conftest import write_project

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, StdioPeer]]:
    project: Path = write_project(tmp_path_factory.mktemp("shapes"), STDIO_PROJECT)
    auth = {"ca.yaml": "server:\n  auth: {bearer_tokens_env: T_TOKENS}\n", "agents/echo.yaml": "name: echo\n"}
    authed: Path = write_project(tmp_path_factory.mktemp("authed"), auth)  # it has an extended card
    started = {
        "echo": StdioPeer(project, "echo"),
        "writer": StdioPeer(project, "writer"),
        "authed": StdioPeer(authed, "echo", env={"T_TOKENS": "t"}),
    }
    try:
        yield started
    finally:
        for peer in started.values():
            peer.kill()


def test_tasks_send_with_a_task_text_runs_it(peers: dict[str, StdioPeer]) -> None:
    task = result_of(peers["echo"].request("tasks/send", {"task": "Draft the release notes"}))
    assert (task["kind"], task["status"]["state"]) == ("task", "completed")
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "[echo] You said: Draft the release notes"}]


def test_tasks_send_keeps_its_priority_in_the_message_metadata(peers: dict[str, StdioPeer]) -> None:
    task = result_of(peers["echo"].request("tasks/send", {"task": "Tidy up", "priority": "high"}))
    assert task["status"]["state"] == "completed"
    [asked] = [m for m in task["history"] if m["role"] == "user"]
    assert asked["metadata"] == {"priority": "high"}
    assert asked["parts"] == [{"kind": "text", "text": "Tidy up"}]


def test_tasks_get_and_cancel_by_task_id(peers: dict[str, StdioPeer]) -> None:
    writer = peers["writer"]
    paused = result_of(writer.request("tasks/send", {"task": "write it"}))
    assert paused["status"]["state"] == "input-required"
    got = result_of(writer.request("tasks/get", {"task_id": paused["id"]}))
    assert (got["id"], got["status"]["state"]) == (paused["id"], "input-required")
    canceled = result_of(writer.request("tasks/cancel", {"task_id": paused["id"]}))
    assert (canceled["id"], canceled["status"]["state"]) == (paused["id"], "canceled")
    assert result_of(writer.request("tasks/get", {"task_id": paused["id"]}))["status"]["state"] == "canceled"
    missing = writer.request("tasks/get", {"task_id": "no-such-task"})
    assert missing["error"]["code"] == -32001  # A2A's task not found, as for tasks/get {"id": ...}


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("tasks/send", {"task": ""}, "tasks/send: task must be the text of the task (a non-empty string), got ''"),
        ("tasks/send", {"task": 7}, "tasks/send: task must be the text of the task (a non-empty string), got 7"),
        ("tasks/send", {"task": "x", "priority": [1]}, "tasks/send: priority must be a string or an integer, got [1]"),
        (
            "tasks/send",
            {"task": "x", "urgent": True},
            "tasks/send: unknown params 'urgent'; this shape takes priority, task",
        ),
        ("tasks/get", {"task_id": ""}, "tasks/get: task_id must be a task's id (a non-empty string), got ''"),
        ("tasks/cancel", {"task_id": "t", "why": "x"}, "tasks/cancel: unknown params 'why'; this shape takes task_id"),
    ],
)
def test_a_wrong_legacy_shape_gets_invalid_params_saying_what_to_send(
    peers: dict[str, StdioPeer], method: str, params: dict[str, object], message: str
) -> None:
    answer = peers["echo"].request(method, params)
    assert answer["error"] == {"code": -32602, "message": message}


@pytest.mark.parametrize("method", ["agent/discover", "GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"])
def test_cards_over_stdio_name_no_http_url(peers: dict[str, StdioPeer], method: str) -> None:
    card = result_of(peers["authed"].request(method, {} if method != "agent/discover" else None))
    assert card["name"] == "echo" and card["skills"]
    assert not {"supportedInterfaces", "url", "preferredTransport", "additionalInterfaces"} & set(card)
    assert "http://" not in json.dumps(card)
