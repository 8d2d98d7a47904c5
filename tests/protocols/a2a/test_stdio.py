"""`ca run --stdio`: A2A JSON-RPC over a real subprocess's stdin/stdout, one message per line.

Long-lived processes (one per agent) are shared by the module; tests that need end of input
start their own. Every stdout line the peer (:class:`tests.a2a_peers.StdioPeer`) reads is parsed
as JSON, so anything else on stdout fails whichever test sees it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_peers import STDIO_PROJECT, StdioPeer, reply_text, result_of, user_message
from tests.conftest import write_project

pytestmark = pytest.mark.e2e

# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("stdio"), STDIO_PROJECT)


@pytest.fixture(scope="module")
def peers(project: Path) -> Iterator[dict[str, StdioPeer]]:
    """The module's processes, started together (they load in parallel).

    ``echo`` is started without an agent name (the project's default agent); ``slow`` and
    ``quiet`` are each ended by one test that checks what end of input does.
    """
    started = {
        "echo": StdioPeer(project),
        "twice": StdioPeer(project, "twice"),
        "writer": StdioPeer(project, "writer"),
        "slow": StdioPeer(project, "slow"),
        "quiet": StdioPeer(project, "echo"),
    }
    try:
        yield started
    finally:
        for peer in started.values():
            peer.kill()


@pytest.fixture
def echo(peers: dict[str, StdioPeer]) -> StdioPeer:
    return peers["echo"]


# -- operations ---------------------------------------------------------------------------------


def test_agent_discover_returns_the_default_agents_card(echo: StdioPeer) -> None:
    card = result_of(echo.request("agent/discover"))
    assert card["name"] == "echo"  # the project's default_agent: the process was started without a name
    assert card["capabilities"]["streaming"] is True
    # No HTTP URL: nothing listens there; this process answers on its stdin and stdout.
    assert not {"supportedInterfaces", "url", "additionalInterfaces"} & set(card)
    assert "http://" not in json.dumps(card)
    assert card["capabilities"]["extensions"][0]["uri"] == "urn:cleveragents:extensions:v1"


def test_send_message_returns_a_completed_task_with_the_reply(echo: StdioPeer) -> None:
    task = result_of(echo.request("SendMessage", {"message": user_message("hello there")}))["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["artifactId"] == "reply"
    assert reply_text(task) == "[echo] You said: hello there"
    assert task["metadata"]["stopReason"] == "end_turn"


def test_v03_message_send_and_the_tasks_send_alias_answer_in_v03_shape(echo: StdioPeer) -> None:
    for method in ("message/send", "tasks/send"):
        message = {
            "kind": "message",
            "messageId": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"kind": "text", "text": method}],
        }
        task = result_of(echo.request(method, {"message": message}))
        assert task["kind"] == "task"
        assert task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": f"[echo] You said: {method}"}]


def test_streaming_sends_notifications_and_ends_with_the_response_of_the_same_id(echo: StdioPeer) -> None:
    notes, final = echo.stream("SendStreamingMessage", {"message": user_message("one two three")})
    assert all(n["jsonrpc"] == "2.0" and "id" not in n for n in notes)
    events = [n["params"]["event"] for n in notes]
    assert events[0]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    task_id = events[0]["task"]["id"]
    assert events[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert all(c["taskId"] == task_id and c["artifact"]["artifactId"] == "reply" for c in chunks)
    assert [bool(c.get("append")) for c in chunks[:-1]] == [False] + [True] * (len(chunks) - 2)
    assert "".join(c["artifact"]["parts"][0]["text"] for c in chunks[:-1]) == "[echo] You said: one two three"
    assert chunks[-1]["lastChunk"] is True
    assert chunks[-1]["artifact"]["parts"] == [{"text": "[echo] You said: one two three"}]
    update = result_of(final)["statusUpdate"]
    assert update["taskId"] == task_id
    assert update["status"]["state"] == "TASK_STATE_COMPLETED"


def test_get_task_and_list_tasks_show_what_ran(echo: StdioPeer) -> None:
    task = result_of(echo.request("SendMessage", {"message": user_message("remember me")}))["task"]
    got = result_of(echo.request("GetTask", {"id": task["id"]}))
    assert got["id"] == task["id"] and got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply_text(got) == "[echo] You said: remember me"
    listed = result_of(echo.request("ListTasks", {"contextId": task["contextId"]}))
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    missing = echo.request("GetTask", {"id": "no-such-task"})
    assert missing["error"]["code"] == -32001


def test_messages_in_one_context_share_the_conversation(peers: dict[str, StdioPeer]) -> None:
    twice = peers["twice"]
    first = result_of(twice.request("SendMessage", {"message": user_message("hi")}))["task"]
    context = first["contextId"]
    second = result_of(twice.request("SendMessage", {"message": user_message("again", contextId=context)}))["task"]
    other = result_of(twice.request("SendMessage", {"message": user_message("hi")}))["task"]
    assert (reply_text(first), reply_text(second), reply_text(other)) == (
        "first answer",
        "second answer",
        "first answer",
    )
    assert second["contextId"] == context and second["id"] != first["id"]
    assert other["contextId"] != context
    listed = result_of(twice.request("ListTasks", {"contextId": context}))["tasks"]
    assert {t["id"] for t in listed} == {first["id"], second["id"]}


def test_approval_round_trip_runs_the_side_effect_exactly_once(project: Path, peers: dict[str, StdioPeer]) -> None:
    writer = peers["writer"]
    paused = result_of(writer.request("SendMessage", {"message": user_message("go")}))["task"]
    status = paused["status"]
    assert status["state"] == "TASK_STATE_INPUT_REQUIRED"
    text, data = status["message"]["parts"]
    assert "writer wants to run append" in text["text"] and "Reply 'approve' or 'reject: REASON'." in text["text"]
    assert data["data"]["extension"] == "urn:cleveragents:extensions:v1"
    [pending] = data["data"]["pending"]
    assert (pending["kind"], pending["tool"], pending["args"]) == (
        "approval",
        "append",
        {"file": "effects.log", "text": "hello"},
    )
    assert "approve" in pending["decisions"]
    assert not (project / "effects.log").exists()

    ids = {"taskId": paused["id"], "contextId": paused["contextId"]}
    done = result_of(writer.request("SendMessage", {"message": user_message("approve", **ids)}))["task"]
    assert done["id"] == paused["id"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply_text(done) == "done"
    assert (project / "effects.log").read_text() == "hello\n"

    again = result_of(writer.request("GetTask", {"id": paused["id"]}))
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert (project / "effects.log").read_text() == "hello\n"


# -- errors and framing ---------------------------------------------------------------------------


def test_a_malformed_line_gets_parse_error_and_the_loop_goes_on(echo: StdioPeer) -> None:
    echo.send("{this is not json")
    error = echo.wait_for(lambda m: m.get("id") is None and "error" in m)
    assert error["error"]["code"] == -32700
    assert error["jsonrpc"] == "2.0"
    assert result_of(echo.request("SendMessage", {"message": user_message("still here")}))["task"]["status"][
        "state"
    ] == ("TASK_STATE_COMPLETED")


def test_an_unknown_method_gets_method_not_found(echo: StdioPeer) -> None:
    answer = echo.request("tasks/frobnicate", {})
    assert answer["error"]["code"] == -32601
    platform = echo.request("_cleveragents/frobnicate", {})
    assert platform["error"]["code"] == -32601
    assert "_cleveragents/registry/list" in platform["error"]["message"]


def test_invalid_requests_are_answered_not_dropped(echo: StdioPeer) -> None:
    echo.send({"jsonrpc": "2.0", "id": "bad-method", "method": ["SendMessage"]})
    assert echo.answer("bad-method")["error"]["code"] == -32600
    echo.send({"jsonrpc": "2.0", "id": "no-method"})
    assert echo.answer("no-method")["error"]["code"] == -32600
    echo.send("[1, 2]")
    batch = echo.wait_for(lambda m: m.get("id") is None and "error" in m)
    assert batch["error"]["code"] == -32600
    assert echo.request("SendMessage", {})["error"]["code"] == -32602


def test_initialize_after_the_first_message_is_an_error_not_a_crash(echo: StdioPeer) -> None:
    """The first line chooses the protocol: ``initialize`` later on an A2A stream is just an unknown method."""
    answer = echo.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
    assert answer["error"]["code"] == -32601
    assert result_of(echo.request("agent/discover"))["name"] == "echo"
    assert echo.proc.poll() is None


def test_notifications_get_no_answer_and_stdout_has_only_json(peers: dict[str, StdioPeer]) -> None:
    peer = peers["quiet"]
    peer.send({"jsonrpc": "2.0", "method": "tasks/frobnicate"})
    peer.send({"jsonrpc": "2.0", "method": "_cleveragents/diagnostics"})
    peer.send({"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "no-such-task"}})
    peer.send({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": user_message("x")}})
    peer.send("not json at all")
    code, messages = peer.close()
    assert code == 0, peer.stderr()
    by_id = {m.get("id"): m for m in messages}
    assert len(messages) == 2 and set(by_id) == {None, 7}, messages
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[7]["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(peer.lines) == 2  # and the helper parsed each as JSON
    assert "Traceback" not in peer.stderr()


def test_end_of_input_finishes_what_is_in_flight_then_exits_zero(project: Path, peers: dict[str, StdioPeer]) -> None:
    """A stream in flight is answered; a task a later non-blocking send left running completes and is stored."""
    peer = peers["slow"]
    stream = {"message": user_message("nap")}
    peer.send({"jsonrpc": "2.0", "id": "stream", "method": "SendStreamingMessage", "params": stream})
    peer.wait_for(lambda m: m.get("method") == "_cleveragents/stream" and "caEvent" in json.dumps(m))  # napping
    params = {"message": user_message("nap"), "configuration": {"returnImmediately": True}}
    accepted = result_of(peer.request("SendMessage", params))["task"]
    assert accepted["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    code, messages = peer.close()
    assert code == 0, peer.stderr()
    assert "Traceback" not in peer.stderr()
    answer = messages[-1]
    assert answer["id"] == "stream" and "method" not in answer
    assert answer["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # Another process of the same agent sees the non-blocking task finished in the shared store
    # (under its own path each agent sees only its tasks).
    other = StdioPeer(project, "slow")
    try:
        task = result_of(other.request("GetTask", {"id": accepted["id"]}))
    finally:
        other.close()
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply_text(task) == "rested enough"
