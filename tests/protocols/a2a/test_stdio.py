"""`ca run --stdio`: A2A JSON-RPC over a real subprocess's stdin/stdout, one message per line.

Long-lived processes (one per agent) are shared by the module; tests that need end of input
start their own. Every stdout line the helper reads is parsed as JSON, so anything else on
stdout fails whichever test sees it.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CA, NAP, REPO, SIDE_EFFECT, writer_agent

pytestmark = pytest.mark.e2e

Json = dict[str, Any]

PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",
    "agents/twice.yaml": """
        name: twice
        model:
          provider: scripted
          replies: ["first answer", "second answer"]
    """,
    "agents/writer.yaml": writer_agent(),
    "agents/slow.yaml": """
        name: slow
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 1}}]
            - rested enough
        tools:
          - python: tools/nap.py:nap
    """,
    "agents/desk.yaml": """
        name: desk
        kind: workflow
        steps:
          - id: kind
            router:
              on: "{{ request.metadata.kind }}"
              routes:
                - when: {regex: "^hello$"}
                  steps: [{id: hi, message: "Hello, {{ input }}"}]
                - when: {regex: "^files$"}
                  steps:
                    - id: bundle
                      artifact:
                        parts:
                          - data: {asked: "{{ input }}"}
                          - file: {name: notes.txt, media_type: text/plain, content: "notes on {{ input }}"}
              default:
                - {id: which, ask: {message: "Which one?"}}
    """,
    "agents/stingy.yaml": """
        name: stingy
        profile: autonomous
        budget: {max_turns: 1, on_exceed: fail}
        model:
          provider: scripted
          replies:
            - tool_calls: [{name: nap, args: {seconds: 0}}]
            - never said
        tools:
          - python: tools/nap.py:nap
    """,
    "tools/side.py": SIDE_EFFECT,
    "tools/nap.py": NAP,
}


def write_project(root: Path, files: Mapping[str, str]) -> Path:
    """Write ``{relative path: text}`` under ``root`` (text dedented), like ``make_project``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def user_message(text: str, **ids: str) -> Json:
    """A v1.0 user message (``taskId``/``contextId`` as keyword arguments)."""
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}


class StdioPeer:
    """A real ``ca run --stdio [AGENT]`` process: request lines in, message lines out, with timeouts.

    A reader thread moves stdout lines into a queue, so nothing blocks on a full pipe and every
    read has a deadline. Messages read while waiting for another one are kept in an inbox.
    """

    def __init__(self, root: Path, agent: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [*CA, "run", "--stdio", *([agent] if agent else [])],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.lines: list[str] = []
        """Every line the process wrote to stdout, as read."""
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._inbox: list[Json] = []
        self._eof = False
        self._ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._queue.put(raw.decode("utf-8"))
        self._queue.put(None)

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", errors="replace")

    def send(self, message: Json | str) -> None:
        """Write one line (a dict is encoded as JSON)."""
        assert self.proc.stdin is not None
        line = message if isinstance(message, str) else json.dumps(message)
        self.proc.stdin.write(line.encode("utf-8") + b"\n")
        self.proc.stdin.flush()

    def _pull(self, deadline: float) -> Json | None:
        """The next message, or None at end of output; fails at the deadline or on a non-JSON line."""
        if self._eof:
            return None
        try:
            line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.001))
        except queue.Empty:
            raise AssertionError(f"no message in time; stderr:\n{self.stderr()[-3000:]}") from None
        if line is None:
            self._eof = True
            return None
        self.lines.append(line)
        assert line.endswith("\n"), f"an unterminated line on stdout: {line!r}"
        try:
            message = json.loads(line)
        except ValueError:
            raise AssertionError(f"stdout carries something that is not JSON: {line!r}") from None
        assert isinstance(message, dict), line
        return message

    def wait_for(self, matches: Callable[[Json], bool], timeout: float = 60) -> Json:
        """The first message (kept or new) that ``matches``; the others stay in the inbox."""
        for kept in self._inbox:
            if matches(kept):
                self._inbox.remove(kept)
                return kept
        deadline = time.monotonic() + timeout
        while True:
            message = self._pull(deadline)
            if message is None:
                raise AssertionError(f"stdout ended before the message came; stderr:\n{self.stderr()[-3000:]}")
            if matches(message):
                return message
            self._inbox.append(message)

    def next_id(self) -> str:
        self._ids += 1
        return f"r{self._ids}"

    def answer(self, request_id: Any, timeout: float = 60) -> Json:
        """The response (not a notification) to ``request_id``."""
        return self.wait_for(lambda m: "method" not in m and m.get("id") == request_id, timeout)

    def request(self, method: str, params: Json | None = None, *, timeout: float = 60) -> Json:
        """Send a request and wait for its response."""
        request_id = self.next_id()
        message: Json = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self.answer(request_id, timeout)

    def stream(self, method: str, params: Json, *, timeout: float = 60) -> tuple[list[Json], Json]:
        """A streaming request: its ``_cleveragents/stream`` notifications, then its response."""
        return self.exchange({"jsonrpc": "2.0", "id": self.next_id(), "method": method, "params": params}, timeout)

    def exchange(self, request: Json, timeout: float = 60) -> tuple[list[Json], Json]:
        """Send a request (with an id); the stream notifications that came for it, and its response."""
        self.send(request)
        final = self.answer(request["id"], timeout)
        notes = [
            m for m in self._inbox if m.get("method") == "_cleveragents/stream" and m["params"]["id"] == request["id"]
        ]
        self._inbox = [m for m in self._inbox if m not in notes]
        return notes, final

    def close(self, timeout: float = 60) -> tuple[int, list[Json]]:
        """End of input: the exit code and every message not consumed yet."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        rest = list(self._inbox)
        self._inbox.clear()
        while (message := self._pull(deadline)) is not None:
            rest.append(message)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1)), rest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self._stderr.close()


def result_of(answer: Json) -> Any:
    assert "error" not in answer, answer
    return answer["result"]


def reply_text(task: Json) -> str:
    [artifact] = task["artifacts"]
    return "".join(part["text"] for part in artifact["parts"])


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_project(tmp_path_factory.mktemp("stdio"), PROJECT)


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
    assert [i["protocolBinding"] for i in card["supportedInterfaces"]] == ["JSONRPC", "HTTP+JSON"]
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


def test_end_of_input_finishes_what_is_in_flight_then_exits_zero(peers: dict[str, StdioPeer]) -> None:
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
    # Another process sees the non-blocking task finished in the shared store.
    task = result_of(peers["echo"].request("GetTask", {"id": accepted["id"]}))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert reply_text(task) == "rested enough"
