"""Transport parity: the same cases over ``ca run --stdio`` and over ``ca serve``, with identical results.

Each transport gets its own copy of the same project (so listing tasks sees only its own).
A case runs its requests on one transport and returns everything it saw; the two results must
be equal once volatile values are normalised: ids (task, context, message, interrupt) become
``<idN>`` in order of first appearance, timestamps become ``<time>``. States, artifact texts,
error codes and messages, notification sequences: all must match exactly.

Known differences, by design: a line that is not JSON gets -32700 on both, but stdio words it
"invalid JSON: …" where HTTP gives the parser's message alone (the case compares the codes);
a request without an id (a notification) gets no answer on stdio, while HTTP answers every
POST, so no case sends one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.a2a_peers import STDIO_PROJECT, Json, StdioPeer, is_v1, user_message
from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

AGENTS = ("echo", "twice", "writer", "stingy", "desk")
"""The agents the cases talk to (stdio serves one agent per process)."""
PROJECT_AGENTS = [
    name.removeprefix("agents/").removesuffix(".yaml") for name in STDIO_PROJECT if name.startswith("agents/")
]
VOLATILE_IDS = {"id", "taskId", "contextId", "messageId", "task_id", "conversation_id"}
TIMES = {"timestamp", "ts", "pausedAt", "expiresAt"}


class Transport(Protocol):
    root: Path

    def call(self, agent: str, request: Json) -> Json:
        """The answer to one request."""
        ...

    def stream(self, agent: str, request: Json) -> tuple[list[Any], Json]:
        """The events a streaming request sent before its answer, and the answer."""
        ...

    def raw(self, agent: str, line: str) -> Json:
        """The answer to a line that is not a request object (it has no id)."""
        ...


@dataclass
class Stdio:
    root: Path
    peers: dict[str, StdioPeer]

    def call(self, agent: str, request: Json) -> Json:
        notes, answer = self.peers[agent].exchange(request)
        assert notes == []
        return answer

    def stream(self, agent: str, request: Json) -> tuple[list[Any], Json]:
        notes, answer = self.peers[agent].exchange(request)
        return [n["params"]["event"] for n in notes], answer

    def raw(self, agent: str, line: str) -> Json:
        self.peers[agent].send(line)
        return self.peers[agent].wait_for(lambda m: m.get("id") is None and "error" in m)


@dataclass
class Http:
    root: Path
    server: ServerProcess

    def call(self, agent: str, request: Json) -> Json:
        response = self.server.post(request, path=f"/agents/{agent}/")
        assert response.status_code == 200, response.text
        answer: Json = response.json()
        return answer

    def stream(self, agent: str, request: Json) -> tuple[list[Any], Json]:
        headers = {"content-type": "application/json", "A2A-Version": "1.0"} if is_v1(request["method"]) else {}
        url = f"{self.server.url}/agents/{agent}/"
        messages: list[Json] = []
        with self.server.client.stream("POST", url, content=json.dumps(request).encode(), headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data:"):
                    messages.append(json.loads(line[5:]))
        events = [m.get("result", m.get("error")) for m in messages[:-1]]
        return events, messages[-1]

    def raw(self, agent: str, line: str) -> Json:
        answer: Json = self.server.post(line.encode(), path=f"/agents/{agent}/").json()
        return answer


def normalise(value: Any) -> Any:
    """``value`` with ids renamed in order of first appearance (keys walked sorted) and times blanked."""
    names: dict[str, str] = {}

    def walk(item: Any, key: str | None) -> Any:
        if isinstance(item, dict):
            return {k: walk(item[k], k) for k in sorted(item)}
        if isinstance(item, list | tuple):
            return [walk(x, key) for x in item]
        if key in TIMES:
            return "<time>"
        if key in VOLATILE_IDS and isinstance(item, str):
            return names.setdefault(item, f"<id{len(names) + 1}>")
        return item

    return walk(value, None)


# -- the cases ---------------------------------------------------------------------------------------

Case = Callable[[Transport], Any]
CASES: dict[str, Case] = {}


def case(run: Case) -> Case:
    CASES[run.__name__] = run
    return run


class Ids:
    """Request ids: the same sequence on both transports."""

    def __init__(self) -> None:
        self.n = 0

    def rpc(self, method: str, params: Json | None = None) -> Json:
        self.n += 1
        request: Json = {"jsonrpc": "2.0", "id": f"c{self.n}", "method": method}
        if params is not None:
            request["params"] = params
        return request


def task_of(answer: Json) -> Json:
    assert "result" in answer, answer
    task: Json = answer["result"]["task"]
    return task


def state(answer: Json) -> str:
    return str(task_of(answer)["status"]["state"])


def code(answer: Json) -> int:
    assert "error" in answer, answer
    return int(answer["error"]["code"])


@case
def send(t: Transport) -> Any:
    answer = t.call("echo", Ids().rpc("SendMessage", {"message": user_message("hello parity")}))
    assert state(answer) == "TASK_STATE_COMPLETED"
    return answer


@case
def send_v03(t: Transport) -> Any:
    message = {
        "kind": "message",
        "messageId": uuid.uuid4().hex,
        "role": "user",
        "parts": [{"kind": "text", "text": "old"}],
    }
    answer = t.call("echo", Ids().rpc("message/send", {"message": message}))
    assert answer["result"]["status"]["state"] == "completed"
    return answer


@case
def stream(t: Transport) -> Any:
    events, answer = t.stream("echo", Ids().rpc("SendStreamingMessage", {"message": user_message("one two three")}))
    assert len(events) > 3
    assert answer["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    return events, answer


@case
def workflow_outputs(t: Transport) -> Any:
    """A Message reply, artifacts with data and file parts, and a free-text answer to an ask."""
    ids = Ids()

    def desk(text: str, kind: str, **more: str) -> Json:
        return {"message": {**user_message(text, **more), "metadata": {"kind": kind}}}

    hello = t.call("desk", ids.rpc("SendMessage", desk("Ada", "hello")))
    assert hello["result"]["message"]["parts"] == [{"text": "Hello, Ada"}]
    files = t.call("desk", ids.rpc("SendMessage", desk("maps", "files")))
    assert task_of(files)["artifacts"][0]["parts"][1] == {
        "raw": "bm90ZXMgb24gbWFwcw==",  # "notes on maps"
        "filename": "notes.txt",
        "mediaType": "text/plain",
    }
    asked = t.call("desk", ids.rpc("SendMessage", desk("help", "other")))
    assert state(asked) == "TASK_STATE_INPUT_REQUIRED"
    where = {"taskId": task_of(asked)["id"], "contextId": task_of(asked)["contextId"]}
    answered = t.call("desk", ids.rpc("SendMessage", {"message": user_message("the red one", **where)}))
    assert state(answered) == "TASK_STATE_COMPLETED"
    return hello, files, asked, answered


@case
def get(t: Transport) -> Any:
    ids = Ids()
    sent = t.call("echo", ids.rpc("SendMessage", {"message": user_message("keep this")}))
    got = t.call("echo", ids.rpc("GetTask", {"id": task_of(sent)["id"]}))
    assert got["result"]["artifacts"][0]["parts"] == [{"text": "[echo] You said: keep this"}]
    missing = t.call("echo", ids.rpc("GetTask", {"id": "no-such-task"}))
    assert code(missing) == -32001
    return sent, got, missing


@case
def list_one_conversation(t: Transport) -> Any:
    ids = Ids()
    first = t.call("twice", ids.rpc("SendMessage", {"message": user_message("hi")}))
    context = task_of(first)["contextId"]
    second = t.call("twice", ids.rpc("SendMessage", {"message": user_message("again", contextId=context)}))
    listed = t.call("twice", ids.rpc("ListTasks", {"contextId": context, "includeArtifacts": True}))
    assert len(listed["result"]["tasks"]) == 2
    assert task_of(second)["artifacts"][0]["parts"] == [{"text": "second answer"}]
    return first, second, listed


@case
def cancel_a_finished_task(t: Transport) -> Any:
    ids = Ids()
    sent = t.call("echo", ids.rpc("SendMessage", {"message": user_message("done already")}))
    canceled = t.call("echo", ids.rpc("CancelTask", {"id": task_of(sent)["id"]}))
    assert code(canceled) == -32002
    return sent, canceled


@case
def approval_round_trip(t: Transport) -> Any:
    ids = Ids()
    paused = t.call("writer", ids.rpc("SendMessage", {"message": user_message("go")}))
    assert state(paused) == "TASK_STATE_INPUT_REQUIRED"
    task = task_of(paused)
    answer = user_message("approve", taskId=task["id"], contextId=task["contextId"])
    done = t.call("writer", ids.rpc("SendMessage", {"message": answer}))
    assert state(done) == "TASK_STATE_COMPLETED"
    effects = (t.root / "effects.log").read_text()
    assert effects == "hello\n"
    return paused, done, effects


@case
def failing_run(t: Transport) -> Any:
    answer = t.call("stingy", Ids().rpc("SendMessage", {"message": user_message("spend")}))
    assert state(answer) == "TASK_STATE_FAILED"
    [_, data] = task_of(answer)["status"]["message"]["parts"]
    assert data["data"]["error"]["code"] == "budget_exceeded"
    return answer


@case
def unknown_method(t: Transport) -> Any:
    ids = Ids()
    answers = [
        t.call("echo", ids.rpc("tasks/frobnicate", {})),
        t.call("echo", ids.rpc("Frobnicate", {})),
        t.call("echo", ids.rpc("_cleveragents/frobnicate", {})),
    ]
    assert [code(a) for a in answers] == [-32601, -32601, -32601]
    return answers


@case
def invalid_params(t: Transport) -> Any:
    ids = Ids()
    answers = [
        t.call("echo", ids.rpc("SendMessage", {})),
        t.call("echo", ids.rpc("GetTask", {"id": 5, "historyLength": "all"})),
        t.call("echo", ids.rpc("_cleveragents/audit/query", {"limit": 0})),
        t.call("echo", ids.rpc("_cleveragents/registry/get", {"nom": "echo"})),
    ]
    assert [code(a) for a in answers] == [-32602] * 4
    return answers


@case
def invalid_request(t: Transport) -> Any:
    answer = t.call("echo", {"jsonrpc": "2.0", "id": "no-method", "params": {}})
    assert code(answer) == -32600
    return answer


@case
def not_a_request(t: Transport) -> Any:
    """Invalid JSON and a batch: the codes agree; the parse error's wording differs (see the module doc)."""
    invalid, batch = t.raw("echo", "{not json"), t.raw("echo", "[1, 2]")
    assert (invalid["id"], code(invalid), code(batch)) == (None, -32700, -32600)
    return code(invalid), batch


@case
def platform_methods(t: Transport) -> Any:
    ids = Ids()
    sent = t.call("echo", ids.rpc("SendMessage", {"message": user_message("count me")}))
    budget = t.call("echo", ids.rpc("_cleveragents/budget/status", {"taskId": task_of(sent)["id"]}))
    assert budget["result"]["state"] == "completed"
    nobody = t.call("echo", ids.rpc("_cleveragents/registry/get", {"name": "nobody"}))
    assert code(nobody) == -32084
    diagnostics = t.call("echo", ids.rpc("_cleveragents/diagnostics"))
    assert diagnostics["result"]["agents"] == sorted(PROJECT_AGENTS)
    approvals = t.call("echo", ids.rpc("_cleveragents/approvals/list", {"agent": "echo"}))
    assert approvals["result"] == {"approvals": []}
    return sent, budget, nobody, diagnostics, approvals


# -- the suite -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stdio, Http]]:
    """Both transports on twin projects; the stdio processes load while the server starts."""
    stdio_root = write_project(tmp_path_factory.mktemp("parity-stdio"), STDIO_PROJECT)
    http_root = write_project(tmp_path_factory.mktemp("parity-http"), STDIO_PROJECT)
    peers = {name: StdioPeer(stdio_root, name) for name in AGENTS}
    server = None
    try:
        server = start_serve(http_root)
        yield Stdio(stdio_root, peers), Http(http_root, server)
    finally:
        for peer in peers.values():
            peer.kill()
        if server is not None:
            server.stop()


@pytest.mark.parametrize("name", list(CASES))
def test_both_transports_give_the_same_result(transports: tuple[Stdio, Http], name: str) -> None:
    stdio, http = transports
    over_stdio = normalise(CASES[name](stdio))
    over_http = normalise(CASES[name](http))
    assert over_stdio == over_http
