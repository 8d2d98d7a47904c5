"""``ca tasks cancel TASK`` ends any task: paused, running in this process, in a live `ca serve`,
or left running by a process that died — each exactly once, audited, with a clear line."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from a2a.utils.errors import TaskNotCancelableError

from framework.protocols.a2a.http import stop_elsewhere
from framework.runtime.events import RunEvent
from framework.runtime.runtime import Runtime
from framework.runtime.tasks import TaskStore
from framework.spec import load_project
from tests.conftest import CA, NAP, NAPPER, REPO, SIDE_EFFECT, ProjectFactory, run_ca, writer_agent
from tests.serving import group_alive, sleeping_child, start_serve

USER = f"cli:{getpass.getuser()}"

SLEEPER = """
name: sleeper
tools: [shell]
profile: autonomous
capabilities: {shell: {allow: ["sleep *"], timeout: 1m}}
"""


def _tasks(root: Path) -> list[dict[str, Any]]:
    listed = run_ca("tasks", "list", "--json", cwd=root)
    assert listed.returncode == 0, listed.stderr
    tasks: list[dict[str, Any]] = json.loads(listed.stdout)
    return tasks


def _paused(root: Path) -> str:
    """Run the writer until it waits for approval of its side effect; the task id."""
    ran = run_ca("run", "writer", "write it", cwd=root)
    assert ran.returncode == 3, ran.stderr
    [task] = [t for t in _tasks(root) if t["state"] == "input-required"]
    return str(task["id"])


def _audit(root: Path, task_id: str) -> str:
    shown = run_ca("audit", "--task", task_id, cwd=root)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_a_paused_task_is_canceled_once_and_its_approval_can_no_longer_run_it(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": writer_agent(), "tools/side.py": SIDE_EFFECT})
    task_id = _paused(root)

    canceled = run_ca("tasks", "cancel", task_id[:12], cwd=root)
    assert canceled.returncode == 0, canceled.stderr
    assert canceled.stdout.strip() == f"canceled task {task_id[:12]}: it was waiting for a decision"
    [task] = [t for t in _tasks(root) if t["id"] == task_id]
    assert (task["state"], task["pending"], task["error"]) == ("canceled", [], f"canceled by {USER}")

    approved = run_ca("approve", task_id, cwd=root)
    assert approved.returncode == 1
    assert f"was already decided by {USER}" in approved.stderr and "canceled" in approved.stderr
    assert not (root / "effects.log").exists(), "the canceled task's tool ran"

    again = run_ca("tasks", "cancel", task_id, cwd=root)
    assert again.returncode == 1
    assert again.stderr.strip() == f"error: task {task_id[:12]} is already canceled; there is nothing to cancel"
    records = [line for line in _audit(root, task_id).splitlines() if "state=canceled" in line]
    assert len(records) == 1 and f"by={USER}" in records[0], records
    assert run_ca("audit", "--verify", cwd=root).returncode == 0


def test_an_unknown_task_is_a_usage_error(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": writer_agent(), "tools/side.py": SIDE_EFFECT})
    unknown = run_ca("tasks", "cancel", "nosuchtask", cwd=root)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "error: task 'nosuchtask' not found; `ca tasks list` shows the tasks of this project"
    )


def test_a_cancel_and_an_approval_at_the_same_moment_one_wins(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": writer_agent(), "tools/side.py": SIDE_EFFECT})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(3):
        (root / "effects.log").unlink(missing_ok=True)
        task_id = _paused(root)
        racers = [
            subprocess.Popen([*CA, *args, task_id], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for args in (("tasks", "cancel", "--wait", "60"), ("approve",))  # a slow machine: not "still running"
        ]
        (cancel_out, _), _ = (racer.communicate(timeout=120) for racer in racers)
        cancel_code, approve_code = (racer.returncode for racer in racers)
        [task] = [t for t in _tasks(root) if t["id"] == task_id]
        lines = (root / "effects.log").read_text().splitlines() if (root / "effects.log").exists() else []
        if cancel_code == 1:  # the approval won and its run completed first: the side effect ran once
            assert (approve_code, task["state"], lines) == (0, "completed", ["hello"])
        elif b"waiting for a decision" in cancel_out:  # the cancel won: the approval was refused, nothing ran
            assert (cancel_code, approve_code, task["state"], lines) == (0, 1, "canceled", [])
        else:  # the approval won, then the cancel stopped its run: the side effect ran at most once
            assert (cancel_code, approve_code, task["state"]) == (0, 130, "canceled"), cancel_out
            assert lines in ([], ["hello"])


def test_a_task_running_in_a_live_server_is_stopped_by_that_server(make_project: ProjectFactory) -> None:
    root = make_project({"agents/sleeper.yaml": SLEEPER, "ca.yaml": "default_agent: sleeper\n"})
    server = start_serve(root)
    answers: list[dict[str, Any]] = []
    message = {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": '@tool shell {"command": "sleep 30"}'}]}
    }
    try:
        caller = threading.Thread(target=lambda: answers.append(server.rpc("SendMessage", message, agent="sleeper")))
        caller.start()
        child = sleeping_child(server.proc.pid, server.output)
        [task] = [t for t in _tasks(root) if t["state"] == "working"]
        started = time.monotonic()
        baseline = run_ca("tasks", "list", cwd=root)  # what starting `ca` costs here, for the bound below
        startup = time.monotonic() - started
        assert baseline.returncode == 0
        started = time.monotonic()
        canceling = subprocess.Popen(
            [*CA, "tasks", "cancel", task["id"]],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        while group_alive(child) and time.monotonic() - started < 30:
            time.sleep(0.02)
        stopped_after = time.monotonic() - started
        out, err = canceling.communicate(timeout=30)
        caller.join(timeout=30)
        server.assert_alive()
        got = server.rpc("GetTask", {"id": task["id"]}, agent="sleeper")
    finally:
        server.stop()
    assert canceling.returncode == 0, err
    assert out.strip() == f"canceled task {task['id'][:12]}: the process running it (pid {server.proc.pid}) stopped it"
    assert not group_alive(child), "the tool's process group outlived the cancel"
    assert stopped_after < startup + 2.0, (stopped_after, startup)
    [answer] = answers
    status = answer["result"]["task"]["status"]
    assert status["state"] == "TASK_STATE_CANCELED", answer
    assert f"canceled by {USER}" in json.dumps(status["message"])
    assert got["result"]["status"]["state"] == "TASK_STATE_CANCELED", got
    [record] = [t for t in _tasks(root) if t["id"] == task["id"]]
    assert (record["state"], record["error"]) == ("canceled", f"canceled by {USER}")
    [audited] = [line for line in _audit(root, task["id"]).splitlines() if "state=canceled" in line]
    assert f"by={USER}" in audited, audited  # recorded by the server that stopped it, naming who asked
    server.assert_clean_exit()


def test_a_task_left_running_by_a_killed_process_is_canceled(make_project: ProjectFactory) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.Popen(
        [*CA, "run", "napper", "nap"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not [t for t in _tasks(root) if t["state"] == "working"] and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=10)
    [task] = [t for t in _tasks(root) if t["state"] == "working"]

    canceled = run_ca("tasks", "cancel", task["id"], cwd=root)
    assert canceled.returncode == 0, canceled.stderr
    assert (
        canceled.stdout.strip()
        == f"canceled task {task['id'][:12]}: the process that ran it (pid {run.pid}) had stopped"
    )
    [record] = [t for t in _tasks(root) if t["id"] == task["id"]]
    assert record["state"] == "canceled"
    assert f"the process running it, pid {run.pid}, had stopped" in record["error"]


def test_a_run_of_this_process_is_stopped_by_the_runtime(
    make_project: ProjectFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    monkeypatch.chdir(root)  # the nap tool leaves its mark in the working folder

    async def go() -> tuple[str, str, list[RunEvent]]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            seen: list[RunEvent] = []

            async def consume() -> None:
                async for event in runtime.send("napper", "nap", conversation="c1", task_id="t-here"):
                    seen.append(event)

            run = asyncio.create_task(consume())
            while (task := runtime.tasks.find("t-here")) is None or task.state != "working" or not seen:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # into the tool's nap
            outcome = await runtime.cancel("t-here", by="tester")
            with pytest.raises(asyncio.CancelledError):
                await run
            return outcome.how, outcome.task.state, seen

    how, state, _ = asyncio.run(go())
    assert (how, state) == ("here", "canceled")
    assert (root / "nap-interrupted").exists(), "the running tool was not stopped"


def test_a_cancel_that_comes_as_the_run_writes_its_end_leaves_the_end_standing(make_project: ProjectFactory) -> None:
    """A stop asked while the run records its answer (as a watch on PostgreSQL may, from a look just
    before) does not stop it: the task completes, and every client is told it completed."""
    root = make_project({"agents/echo.yaml": "name: echo\n"})

    async def go() -> tuple[list[bool], list[RunEvent], str, str]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            stopped: list[bool] = []
            write = runtime.tasks.aset

            async def ending(task_id: str, **fields: Any) -> Any:
                if fields.get("state") == "completed":  # the end's first write: a stop comes now
                    stopped.append(runtime.watch.stop(task_id, "tester"))
                    await asyncio.sleep(0)
                return await write(task_id, **fields)

            runtime.tasks.aset = ending  # type: ignore[method-assign]
            seen = [event async for event in runtime.send("echo", "hi", conversation="c1", task_id="t-end")]
            await asyncio.sleep(0.01)  # anything pending of a stop would land now
            record = await runtime.tasks.aget("t-end")
            return stopped, seen, record.state, json.dumps([r.data for r in runtime.audit.query(task_id="t-end")])

    stopped, seen, state, audited = asyncio.run(go())
    assert stopped == [False], "the run was stopped as it wrote its end"
    assert (type(seen[-1]).__name__, getattr(seen[-1], "state", None), state) == (
        "RunFinished",
        "completed",
        "completed",
    )
    assert '"canceled"' not in audited


def test_an_a2a_cancel_of_a_run_elsewhere_that_completes_first_is_refused_and_leaves_its_row_alone(
    make_project: ProjectFactory,
) -> None:
    """With a shared store, a CancelTask for a task another process runs waits for that process; a
    run that completes first is not canceled, and the client is told so (TaskNotCancelable)."""
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    store = TaskStore.open(root)
    task = store.create(agent="napper", conversation="c1", source="a2a-http", input="nap")
    store.update(task.id, state="working")
    bystander = subprocess.Popen(["sleep", "60"])  # the process running it: alive, it never looks

    async def go() -> None:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), source="a2a-http", stack=stack)
            canceling = asyncio.create_task(stop_elsewhere(runtime, task.id))
            while not (await runtime.tasks.aget(task.id)).cancel_requested:
                await asyncio.sleep(0.02)
            store.update(task.id, state="completed", output="done")  # it ended before it looked
            with pytest.raises(TaskNotCancelableError, match="completed before the cancel reached it"):
                await canceling

    try:
        with sqlite3.connect(root / ".ca" / "tasks.db") as conn:
            conn.execute("UPDATE tasks SET owner_pid = ? WHERE id = ?", (bystander.pid, task.id))
        asyncio.run(go())
    finally:
        bystander.kill()
        bystander.wait()
        store.close()
    [record] = [t for t in _tasks(root) if t["id"] == task.id]
    assert record["state"] == "completed"


def test_a_ca_run_canceled_from_another_terminal_says_so_and_exits_130(make_project: ProjectFactory) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.Popen(
        [*CA, "run", "napper", "nap"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (working := [t for t in _tasks(root) if t["state"] == "working"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        [task] = working
        canceled = run_ca("tasks", "cancel", task["id"], cwd=root)
        _, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert canceled.returncode == 0, canceled.stderr
    assert canceled.stdout.strip().endswith(f"the process running it (pid {run.pid}) stopped it")
    assert run.returncode == 130, err
    assert f"task {task['id'][:12]} was canceled by {USER}" in err
    assert "Traceback" not in err
    assert (root / "nap-interrupted").exists(), "the running tool was not stopped"


def test_a_running_task_whose_process_does_not_stop_it_is_reported_still_running(
    make_project: ProjectFactory,
) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    store = TaskStore.open(root)
    task = store.create(agent="napper", conversation="c1", source="cli", input="nap")
    store.update(task.id, state="working")
    store.close()
    bystander = subprocess.Popen(["sleep", "60"])  # alive, but it runs no ca task and never looks
    try:
        with sqlite3.connect(root / ".ca" / "tasks.db") as conn:
            conn.execute("UPDATE tasks SET owner_pid = ? WHERE id = ?", (bystander.pid, task.id))
        refused = run_ca("tasks", "cancel", task.id, "--wait", "0.5", cwd=root)
    finally:
        bystander.kill()
        bystander.wait()
    assert refused.returncode == 1
    assert f"task {task.id[:12]} is still working: the process running it (pid {bystander.pid}" in refused.stderr
    assert "did not stop it within 0.5 s; the cancel request stays on the task" in refused.stderr
    [record] = [t for t in _tasks(root) if t["id"] == task.id]
    assert (record["state"], record["cancel_requested"]) == ("working", USER)


def _asked_to_stop(root: Path, task_id: str, caller: subprocess.Popen[str]) -> None:
    """Wait until ``caller`` (a ``ca tasks cancel``) has put its request on the task's record."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and caller.poll() is None:
        with sqlite3.connect(root / ".ca" / "tasks.db") as conn:
            if conn.execute("SELECT cancel_requested FROM tasks WHERE id = ?", (task_id,)).fetchone()[0]:
                return
        time.sleep(0.05)
    pytest.fail(f"the cancel never asked the running process to stop it: {caller.communicate()}")


@pytest.mark.parametrize("ends", ["completed", "input-required"])
def test_a_run_that_ends_on_its_own_as_the_cancel_comes_is_reported_as_it_ended(
    make_project: ProjectFactory, ends: str
) -> None:
    """The running process completes the task (or pauses it again) before it sees the request: a
    completed task is not reported canceled; a new pause is canceled."""
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    store = TaskStore.open(root)
    task = store.create(agent="napper", conversation="c1", source="cli", input="nap")
    store.update(task.id, state="working")
    bystander = subprocess.Popen(["sleep", "60"])  # the "running process": alive, it never looks
    try:
        with sqlite3.connect(root / ".ca" / "tasks.db") as conn:
            conn.execute("UPDATE tasks SET owner_pid = ? WHERE id = ?", (bystander.pid, task.id))
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        caller = subprocess.Popen(
            [*CA, "tasks", "cancel", task.id, "--wait", "30"],
            cwd=root,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _asked_to_stop(root, task.id, caller)
        store.update(task.id, state=ends, output="done")  # type: ignore[arg-type]
        out, err = caller.communicate(timeout=60)
    finally:
        bystander.kill()
        bystander.wait()
        store.close()
    [record] = [t for t in _tasks(root) if t["id"] == task.id]
    if ends == "completed":
        assert (caller.returncode, record["state"]) == (1, "completed"), (out, err)
        assert err.strip() == f"error: task {task.id[:12]} completed before the cancel reached it; it was not canceled"
        assert "state=canceled" not in _audit(root, task.id)
    else:
        assert (caller.returncode, record["state"]) == (0, "canceled"), (out, err)
        assert out.strip() == f"canceled task {task.id[:12]}: it was waiting for a decision"


def test_a_cancel_request_that_came_too_late_does_not_stop_the_run_of_a_later_decision(
    make_project: ProjectFactory,
) -> None:
    """A request left on a running task (its cancel gave up) whose run then paused is not held
    against the next decision: the approved run goes on to the end."""
    slow = SIDE_EFFECT.replace(
        "        with Path", "        time.sleep(1)  # longer than a look for requests\n        with Path"
    )
    slow = slow.replace("    from pathlib import Path", "    import time\n    from pathlib import Path")
    root = make_project({"agents/writer.yaml": writer_agent(), "tools/side.py": slow})
    task_id = _paused(root)
    with sqlite3.connect(root / ".ca" / "tasks.db") as conn:  # as a cancel that asked while it ran, then gave up
        conn.execute("UPDATE tasks SET cancel_requested = ? WHERE id = ?", (USER, task_id))
    approved = run_ca("approve", task_id, cwd=root)
    assert approved.returncode == 0, approved.stderr
    [record] = [t for t in _tasks(root) if t["id"] == task_id]
    assert (record["state"], record["cancel_requested"]) == ("completed", "")
    assert (root / "effects.log").read_text().splitlines() == ["hello"]


def test_a_canceled_pause_no_longer_blocks_its_conversation_but_a_live_one_does(make_project: ProjectFactory) -> None:
    root = make_project({"agents/writer.yaml": writer_agent(), "tools/side.py": SIDE_EFFECT})
    first = run_ca("run", "writer", "write it", "--session", "s1", cwd=root)
    assert first.returncode == 3, first.stderr  # waiting for an approval

    blocked = run_ca("run", "writer", "something else", "--session", "s1", cwd=root)
    assert blocked.returncode != 0 and "waiting for a decision" in blocked.stderr

    [paused] = [t for t in _tasks(root) if t["state"] == "input-required"]
    assert run_ca("tasks", "cancel", paused["id"], cwd=root).returncode == 0
    again = run_ca("run", "writer", "write it again", "--session", "s1", cwd=root)
    assert again.returncode == 0, again.stderr  # the canceled call is answered "cancelled"; the turn runs
    assert again.stdout.strip() == "done"
    assert not (root / "effects.log").exists()


def test_a_canceled_pause_is_closed_only_by_the_agent_whose_conversation_it_is(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/writer.yaml": writer_agent(),
            "agents/other.yaml": writer_agent("other", reply="other's answer"),
            "tools/side.py": SIDE_EFFECT,
        }
    )
    assert run_ca("run", "writer", "write it", "--session", "s1", cwd=root).returncode == 3
    [paused] = [t for t in _tasks(root) if t["state"] == "input-required"]
    assert run_ca("tasks", "cancel", paused["id"], cwd=root).returncode == 0

    elsewhere = run_ca("run", "other", "hello", "--session", "s1", cwd=root)
    assert elsewhere.returncode != 0 and "belongs to agent 'writer'" in elsewhere.stderr

    again = run_ca("run", "writer", "write it again", "--session", "s1", cwd=root)
    assert again.returncode == 0, again.stderr  # its own agent closes the canceled call and goes on
    assert again.stdout.strip() == "done"
    assert not (root / "effects.log").exists()
