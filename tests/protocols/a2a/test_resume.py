"""A server killed while a task's model call is in flight: the next server runs the task again.

A run checkpoints its conversation when it ends or pauses, and every tool call is audited before the
tool runs; so a task of an A2A server that had started no tool call when its process died can run
again from its conversation's last checkpoint, with no side effect twice. The next `ca serve` on the
project (or another replica, once the lease expired) does: the task ends ``completed``, its answer in
the A2A row, and the conversation holds the message once. A task whose tool had started still ends
``failed``, saying which tool. The model is a local OpenAI-compatible server (the edge we do not own)
whose answer stalls, so the kill lands mid-call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from a2a.helpers import get_artifact_text
from a2a.types import StreamResponse, SubscribeToTaskRequest, TaskState

from framework.runtime.leases import RUNNING
from framework.runtime.runtime import Runtime
from framework.runtime.stores import state_dir
from framework.runtime.tasks import TaskStore
from framework.spec import load_project
from tests import conftest
from tests.a2a_peers import a2a_client
from tests.conftest import REPO, SIDE_EFFECT, run_ca, write_project, writer_agent
from tests.fake_openai import FakeOpenAI
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e

NAP = '''
    import asyncio
    from pathlib import Path


    async def nap(seconds: float) -> str:
        """Sleep for a while, leaving a mark first."""
        Path("nap-started").write_text("yes")
        await asyncio.sleep(seconds)
        return "rested"
'''
"""``tools/nap.py``: a slow tool that shows when it started."""

STALL_S = 120.0
"""How long the stalled model call waits: far past every kill and restart here."""


def _agent(base_url: str, tools: str = "") -> str:
    return f"""
        name: chat
        profile: autonomous
        instructions: Be brief.
        model:
          provider: openai
          name: fake-model
          base_url: {base_url}
          api_key_env: FAKE_PROVIDER_KEY
          params: {{max_retries: 0, timeout: 300}}
        {tools}
    """


def _project(root: Path, base_url: str, *, store: str = "", tools: str = "") -> Path:
    config = "default_agent: chat\n" + (f"store: {{url: {store!r}}}\n" if store else "")
    return write_project(
        root,
        {
            "ca.yaml": config,
            "agents/chat.yaml": _agent(base_url, tools),
            "tools/nap.py": NAP,
            ".env": "FAKE_PROVIDER_KEY=k\n",
        },
    )


def _send(
    server: ServerProcess, text: str, context: str | None = None, *, wait: bool = True, agent: str = "chat"
) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    if context:
        message["contextId"] = context
    params = {"message": message, "configuration": {"returnImmediately": not wait}}
    answer = server.rpc("SendMessage", params, agent=agent)
    assert "result" in answer, answer
    task: dict[str, Any] = answer["result"]["task"]
    return task


def _until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
    return found


def _final(server: ServerProcess, task_id: str, timeout: float = 60) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        task: dict[str, Any] = server.rpc("GetTask", {"id": task_id}, agent="chat")["result"]
        return None if task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING") else task

    found: dict[str, Any] = _until(f"task {task_id} never ended:\n{server.output()}", ended, timeout)
    return found


def _reply(task: dict[str, Any]) -> str:
    return " ".join(p["text"] for a in task.get("artifacts", []) for p in a["parts"] if "text" in p).strip()


def _said(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of a model request's messages, the system prompt left out."""
    return [(m["role"], str(m.get("content") or "").strip()) for m in request["messages"] if m["role"] != "system"]


def _states(root: Path, task_id: str) -> list[dict[str, Any]]:
    audit = run_ca("audit", "--json", "--limit", "10000", cwd=root)
    assert audit.returncode == 0, audit.stderr
    return [r["data"] for r in json.loads(audit.stdout) if r["task_id"] == task_id and r["kind"] == "task.state"]


def _verified(root: Path) -> None:
    verified = run_ca("audit", "--verify", cwd=root)
    assert verified.returncode == 0 and verified.stdout.startswith("audit log ok: "), verified.stdout + verified.stderr


def _killed_mid_call(root: Path, model: FakeOpenAI, text: str) -> dict[str, Any]:
    """The task of ``text`` sent to a new server on ``root``, SIGKILLed once the task's model call started."""
    server: ServerProcess = start_serve(root)
    try:
        task = _send(server, text, wait=False)
        _until("the model call never started", lambda: len(model.requests) == 1)
        server.stop(signal.SIGKILL)
    finally:
        server.stop()
    return task


@contextmanager
def _replicas(roots: list[Path]) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """Two replicas (hosts ``replica-a``, ``replica-b``) with a 3 s lease on ``roots``, stopped on exit."""
    env = {"CA_TASK_LEASE": "3s"}
    a: ServerProcess = start_serve(roots[0], env=env, host="replica-a")
    try:
        b: ServerProcess = start_serve(roots[1], env=env, host="replica-b")
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(stalls=[0, STALL_S]) as server:  # the first message answers, the second's call stalls
        yield server


def test_a_task_killed_mid_model_call_is_resumed_by_the_next_server(tmp_path: Path, model: FakeOpenAI) -> None:
    root = _project(tmp_path / "project", model.url)
    first: ServerProcess = start_serve(root)
    try:
        answered = _send(first, "first")
        assert answered["status"]["state"] == "TASK_STATE_COMPLETED", answered
        context = answered["contextId"]
        task = _send(first, "second", context, wait=False)
        _until("the second model call never started", lambda: len(model.requests) == 2)
        first.stop(signal.SIGKILL)
    finally:
        first.stop()
    second: ServerProcess = start_serve(root)
    try:
        done = _final(second, task["id"])
        assert done["status"]["state"] == "TASK_STATE_COMPLETED", (done, second.output())
        assert _reply(done) == "The tool said: you said second", done
        resumed = model.requests[2]
        assert _said(resumed) == [
            ("user", "first"),
            ("assistant", "The tool said: you said first"),
            ("user", "second"),  # once: the dead run checkpointed nothing of it
        ], resumed
        states = _states(root, task["id"])
        assert [s["state"] for s in states] == ["submitted", "working", "working", "completed"], states
        assert states[2]["resumed_from"].startswith(f"pid {first.proc.pid} on "), states[2]
        third = _send(second, "third", context)  # the conversation goes on from the resumed answer
        assert _reply(third) == "The tool said: you said third", third
        assert [text for role, text in _said(model.requests[3]) if role == "user"] == ["first", "second", "third"]
    finally:
        second.stop()
    _verified(root)


def test_a_blocking_send_killed_mid_model_call_is_answered_to_its_copy_by_the_next_server(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    """A blocking SendMessage killed mid model call (its client never gets an answer): the next server
    resumes the task, and a copy of the message (same messageId) gets that answer, not a second run."""
    root = _project(tmp_path / "project", model.url)
    first: ServerProcess = start_serve(root)
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "second"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    lost: list[BaseException] = []

    def send() -> None:  # its answer never comes: the server is killed first
        try:
            httpx.post(f"{first.url}/agents/chat/", json=body, headers={"A2A-Version": "1.0"}, timeout=STALL_S)
        except httpx.TransportError as exc:
            lost.append(exc)

    try:
        message["contextId"] = _send(first, "first")["contextId"]
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        _until("the second model call never started", lambda: len(model.requests) == 2)
        first.stop(signal.SIGKILL)
        sender.join(30)
        assert lost, "the blocking SendMessage was answered before the kill"
    finally:
        first.stop()
    second: ServerProcess = start_serve(root)
    try:
        again = second.rpc("SendMessage", {"message": message}, agent="chat")
        task = again["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", (again, second.output())
        assert _reply(task) == "The tool said: you said second", task
        assert len(model.requests) == 3, model.requests  # the killed call and the resumed one: no third run
        assert _final(second, task["id"])["status"]["state"] == "TASK_STATE_COMPLETED"
        listed = second.rpc("ListTasks", {"contextId": message["contextId"]}, agent="chat")["result"]["tasks"]
        assert task["id"] in [t["id"] for t in listed], listed
        states = _states(root, task["id"])
        assert [s["state"] for s in states] == ["submitted", "working", "working", "completed"], states
    finally:
        second.stop()
    _verified(root)


def test_a_task_killed_while_its_tool_runs_ends_failed_naming_the_tool(tmp_path: Path) -> None:
    tools = "tools:\n          - python: tools/nap.py:nap"
    with FakeOpenAI(tool_args={"seconds": 60}) as model:
        root = _project(tmp_path / "project", model.url, tools=tools)
        first: ServerProcess = start_serve(root)
        try:
            task = _send(first, "nap", wait=False)
            _until("the tool never started", lambda: (root / "nap-started").exists())
            first.stop(signal.SIGKILL)
        finally:
            first.stop()
        second: ServerProcess = start_serve(root)
        try:
            done = _final(second, task["id"])
        finally:
            second.stop()
        assert len(model.requests) == 1, model.requests  # never run again
    assert done["status"]["state"] == "TASK_STATE_FAILED", done
    text = done["status"]["message"]["parts"][0]["text"]
    assert "it was not resumed because a tool call (nap) had started: send the message again" in text, text
    assert [s["state"] for s in _states(root, task["id"])] == ["submitted", "working", "failed"]
    _verified(root)


KILLED_RECORDING = """
import asyncio, os, signal, sys
from contextlib import AsyncExitStack
from pathlib import Path

from framework.runtime.runtime import Runtime
from framework.runtime.tasks import TaskStore
from framework.spec import load_project

state, agent = sys.argv[1:]
update = TaskStore.aset  # the record's end (a pause or an answer)


async def dies(self, task_id, **fields):
    if fields.get("state") == state:  # its run checkpointed its end or pause; its record says nothing yet
        os.kill(os.getpid(), signal.SIGKILL)
    return await update(self, task_id, **fields)


async def main():
    TaskStore.aset = dies
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(Path.cwd()), source="a2a-http", stack=stack)
        async for event in runtime.send(agent, "go", conversation="c1", task_id="t1"):
            print(event, flush=True)


asyncio.run(main())
"""
"""A server's run of task ``t1`` (``go`` to AGENT in conversation ``c1``), SIGKILLed as it records STATE."""


def _killed_recording(root: Path, state: str, agent: str) -> None:
    died = subprocess.run(
        [sys.executable, "-c", KILLED_RECORDING, state, agent],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stdout + died.stderr


def _conversation(root: Path, agent: str) -> list[tuple[str, str]]:
    """(type, text) of each message conversation ``c1`` holds."""

    async def read() -> list[tuple[str, str]]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            state = await runtime.bundle.graph(agent).aget_state({"configurable": {"thread_id": "c1"}})
            return [(m.type, m.text) for m in state.values["messages"]]

    return asyncio.run(read())


def _resumed(root: Path, state: str, url: str = "") -> TaskStore:
    """The task store (``url``: on PostgreSQL), once the next server on ``root`` resumed task ``t1``
    and it reached ``state``."""
    server: ServerProcess = start_serve(root)
    store = TaskStore.open(root, url=url)
    try:
        _until(f"t1 never stopped running:\n{server.output()}", lambda: store.get("t1").state not in RUNNING)
        task = store.get("t1")
        assert task.state == state, (task, server.output())
    finally:
        server.stop()
    return store


@pytest.mark.parametrize("lost", [False, True], ids=["pause-checkpointed", "its-interrupt-not-written"])
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_a_task_killed_after_its_pause_was_checkpointed_waits_for_its_decision_again(
    tmp_path: Path, lost: bool, engine: str
) -> None:
    """Killed after its run checkpointed the pause, before its record said so: the next server goes on
    from that checkpoint and the task waits for its decision again. The message is not sent a second
    time: the model would see it twice, after a tool call no tool answered (the chaos test saw such a
    task end ``completed`` with its tool never run). ``lost``: the kill came between the checkpoint and
    its pending writes (the interrupt), so the checkpoint only says the tool call comes next."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(fresh_database("paused")) if engine == "postgresql" else ""
        files = {"agents/writer.yaml": writer_agent(), "tools/side.py": SIDE_EFFECT}
        root = write_project(tmp_path / "project", files | ({"ca.yaml": f"store: {{url: {url!r}}}\n"} if url else {}))
        _killed_recording(root, "input-required", "writer")
        if lost and url:
            with psycopg.connect(url, autocommit=True) as db:
                assert db.execute("DELETE FROM checkpoint_writes").rowcount > 0
        elif lost:
            with sqlite3.connect(state_dir(root) / "conversations.db") as db:
                assert db.execute("DELETE FROM writes").rowcount > 0
        store = _resumed(root, "input-required", url)
        try:
            assert [p.pause.kind for p in store.get("t1").pending] == ["approval"]
        finally:
            store.close()
        decided = run_ca("approve", "t1", cwd=root)
        assert decided.returncode == 0, decided.stdout + decided.stderr
        assert (root / "effects.log").read_text() == "hello\n"  # the tool ran, once
        states = _states(root, "t1")
        assert [s["state"] for s in states] == [
            "submitted",
            "working",
            "working",
            "input-required",
            "working",
            "completed",
        ]
        assert "resumed_from" in states[2], states
        assert _conversation(root, "writer") == [("human", "go"), ("ai", ""), ("tool", "appended"), ("ai", "done")]
        _verified(root)


def test_a_task_killed_after_its_end_was_checkpointed_ends_with_that_answer(tmp_path: Path) -> None:
    """Killed after its run checkpointed the answer, before its record said so: the next server takes
    the answer from that checkpoint; the model is not called again and the conversation holds the
    message once."""
    root = write_project(tmp_path / "project", {"agents/echo.yaml": "name: echo\nprofile: autonomous\n"})
    _killed_recording(root, "completed", "echo")
    store = _resumed(root, "completed")
    try:
        assert store.get("t1").output == "[echo] You said: go"
    finally:
        store.close()
    audit = json.loads(run_ca("audit", "--json", cwd=root).stdout)
    assert sum(1 for r in audit if r["kind"] == "model.call") == 1, audit
    assert _conversation(root, "echo") == [("human", "go"), ("ai", "[echo] You said: go")]
    _verified(root)


@pytest.fixture
def replicas(tmp_path: Path, model: FakeOpenAI) -> Iterator[tuple[ServerProcess, ServerProcess, Path]]:
    with fresh_database("resume") as url:
        roots = [_project(tmp_path / name, model.url, store=url) for name in ("a", "b")]
        with _replicas(roots) as (a, b):
            yield a, b, roots[1]


def test_a_task_of_a_killed_replica_is_resumed_by_the_other(
    replicas: tuple[ServerProcess, ServerProcess, Path], model: FakeOpenAI
) -> None:
    a, b, root = replicas
    answered = _send(a, "first")
    context = answered["contextId"]
    task = _send(a, "second", context, wait=False)
    _until("the second model call never started", lambda: len(model.requests) == 2)
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    done = _final(b, task["id"], timeout=30)  # the lease (3 s) and a third, then the model's answer
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", (done, b.output())
    assert _reply(done) == "The tool said: you said second", done
    assert [text for role, text in _said(model.requests[2]) if role == "user"] == ["first", "second"]
    states = _states(root, task["id"])
    assert [s["state"] for s in states] == ["submitted", "working", "working", "completed"], states
    assert "on replica-a" in states[2]["resumed_from"], states[2]
    _verified(root)
    b.assert_alive()


def test_a_resumed_run_is_stopped_by_cancel_task(tmp_path: Path) -> None:
    with FakeOpenAI(stalls=[STALL_S, STALL_S]) as model:  # the resumed call stalls too
        root = _project(tmp_path / "project", model.url)
        task = _killed_mid_call(root, model, "wait")
        second: ServerProcess = start_serve(root)
        try:
            _until("the resumed model call never started", lambda: len(model.requests) == 2)
            canceled = second.rpc("CancelTask", {"id": task["id"]}, agent="chat")
            assert canceled["result"]["status"]["state"] == "TASK_STATE_CANCELED", canceled
            done = _final(second, task["id"])
            second.assert_alive()
        finally:
            second.stop()
    assert done["status"]["state"] == "TASK_STATE_CANCELED", done
    assert [s["state"] for s in _states(root, task["id"])] == ["submitted", "working", "working", "canceled"]
    _verified(root)


def test_an_owner_paused_past_its_lease_does_not_run_the_tool_its_taker_runs(tmp_path: Path) -> None:
    """Replica A is stopped (SIGSTOP: a VM pause, a held event loop) longer than its lease while its
    task waits for the model; B takes the task over and runs it, tool included. A then goes on: its
    tool call is audited, then fenced — A no longer owns the task, so its tool does not run, and it
    writes nothing of the task (found on a branch that attacked the feature)."""
    tools = "tools:\n          - python: tools/nap.py:nap"
    with FakeOpenAI(tool_args={"seconds": 0}, stalls=[8.0, 0.0]) as model, fresh_database("fenced") as url:
        roots = [_project(tmp_path / name, model.url, store=url, tools=tools) for name in ("a", "b")]
        with _replicas(roots) as (a, b):
            task = _send(a, "nap", wait=False)
            _until("A's model call never started", lambda: len(model.requests) == 1)
            a.proc.send_signal(signal.SIGSTOP)
            try:
                _until("B never ran the tool", lambda: (roots[1] / "nap-started").exists(), timeout=30)
            finally:
                a.proc.send_signal(signal.SIGCONT)
            done = _final(b, task["id"], timeout=30)
            _until("A's model call never answered", lambda: len(model.requests) >= 3, timeout=30)
            time.sleep(2)  # A's answer arrived: its tool call would run now, its run would checkpoint
            a.assert_alive()
            _send(b, "again", done["contextId"])  # the conversation is B's run's, not A's stopped one
            [asked] = [r for r in model.requests if r["messages"][-1].get("content") == "again"]
            roles = [m["role"] for m in asked["messages"] if m["role"] != "system"]
            assert roles == ["user", "assistant", "tool", "assistant", "user"], asked["messages"]
        assert not (roots[0] / "nap-started").exists(), "A ran the tool too"
        assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
        states = _states(roots[1], task["id"])
        assert [s["state"] for s in states] == ["submitted", "working", "working", "completed"], states
        denials = run_ca("audit", "--json", "--task", task["id"], cwd=roots[1])
        records = json.loads(denials.stdout)
        assert [r["data"]["rule"] for r in records if r["kind"] == "denial"] == ["lease"], records
        _verified(roots[1])


def test_a_subscriber_to_a_resumed_task_gets_its_answer_and_end(tmp_path: Path) -> None:
    with FakeOpenAI(stalls=[STALL_S, 3.0]) as model:  # the resumed call answers 3 s after it was made
        root = _project(tmp_path / "project", model.url)
        task = _killed_mid_call(root, model, "wait")
        second: ServerProcess = start_serve(root)
        try:
            _until("the resumed model call never started", lambda: len(model.requests) == 2)

            async def follow() -> list[StreamResponse]:
                async with a2a_client(second.url, "chat", streaming=True) as client:
                    request = SubscribeToTaskRequest(id=task["id"])
                    return [event async for event in client.subscribe(request)]

            events = asyncio.run(asyncio.wait_for(follow(), 60))
        finally:
            second.stop()
    assert events[0].HasField("task") and events[0].task.status.state == TaskState.TASK_STATE_WORKING, events[0]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED, events[-1]
    relayed = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert relayed and get_artifact_text(relayed[-1]).strip() == "The tool said: you said wait", events


BOSS = """
    name: boss
    profile: autonomous
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: napper, args: {input: "nap"}}]
        - done
    tools: [{agent: napper}]
    capabilities: {agents: [napper]}
"""
NAPPER = conftest.NAPPER.replace("seconds: 20", "seconds: 8")
"""An agent whose one tool call naps 8 s (:data:`NAP`)."""


def test_an_agent_call_longer_than_the_lease_is_not_taken_for_an_orphan(tmp_path: Path) -> None:
    """An in-process agent call is a child task of its own: its lease is renewed with its parent's, so
    the other replica leaves it running (a lease of 3 s, a call of 8 s)."""
    files = {"agents/boss.yaml": BOSS, "agents/napper.yaml": NAPPER, "tools/nap.py": NAP}
    with fresh_database("calls") as url:
        roots = [
            write_project(tmp_path / name, {**files, "ca.yaml": f"default_agent: boss\nstore: {{url: {url!r}}}\n"})
            for name in ("a", "b")
        ]
        with _replicas(roots) as (a, b):
            answer = _send(a, "go", agent="boss")
            b.assert_alive()
        assert answer["status"]["state"] == "TASK_STATE_COMPLETED", answer
        store = TaskStore.open(roots[1], url=url)
        try:
            [child] = [t for t in store.list() if t.parent == answer["id"]]
        finally:
            store.close()
        assert (child.state, child.error) == ("completed", ""), child
        assert [s["state"] for s in _states(roots[1], child.id)] == ["submitted", "working", "completed"]


def test_an_owner_paused_past_its_lease_records_nothing_when_its_model_answers(tmp_path: Path) -> None:
    """As above with no tool: A, held while its model answers, ends its run after B took the task over.
    It asks the fence before it checkpoints and before it records the end, so the task's audit has one
    end (B's) and the conversation is B's."""
    with FakeOpenAI(stalls=[8.0, 0.0]) as model, fresh_database("fenced_end") as url:
        roots = [_project(tmp_path / name, model.url, store=url) for name in ("a", "b")]
        with _replicas(roots) as (a, b):
            task = _send(a, "hello", wait=False)
            _until("A's model call never started", lambda: len(model.requests) == 1)
            a.proc.send_signal(signal.SIGSTOP)
            try:
                done = _final(b, task["id"], timeout=30)
            finally:
                a.proc.send_signal(signal.SIGCONT)
            time.sleep(8)  # A's stalled answer arrives and its run ends
            a.assert_alive()
            _send(b, "again", done["contextId"])
            [asked] = [r for r in model.requests if r["messages"][-1].get("content") == "again"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
        states = [s["state"] for s in _states(roots[1], task["id"])]
        assert states == ["submitted", "working", "working", "completed"], states
        assert [m["role"] for m in asked["messages"] if m["role"] != "system"] == ["user", "assistant", "user"]
        _verified(roots[1])
