"""MCP servers as tools, end to end: the real ``ca`` process, a real MCP server (built with the
official ``mcp`` SDK, ``tests/fixtures/mcp/server.py``) over stdio, the scripted model.

Every test checks that no server process outlives ``ca`` (each server writes its pid into
``MCP_PID_DIR``).
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.audit import AuditLog
from tests.a2a_peers import result_of, user_message
from tests.conftest import CA, REPO, ProjectFactory, events, free_port, run_ca, write_project
from tests.serving import running, start_serve

SERVER = REPO / "tests" / "fixtures" / "mcp" / "server.py"


def ca_yaml(extra: str = "") -> str:
    return f"""
        mcp_servers:
          notes:
            command: {sys.executable}
            args: [{SERVER}]
            env: {{MCP_PID_DIR: "${{MCP_PID_DIR:-}}", MCP_NOTES_FILE: "${{MCP_NOTES_FILE:-}}", ECHO_VARIANT: "${{ECHO_VARIANT:-}}"}}
            timeout: 30s{extra}
    """


def agent(
    calls: list[dict[str, Any]], *, allow: str = '["notes.*"]', profile: str = "autonomous", tools: str = ""
) -> str:
    replies = [{"tool_calls": [c]} for c in calls] + ["done"]
    return f"""
        name: notebook
        profile: {profile}
        model:
          provider: scripted
          replies: {json.dumps(replies)}
        tools:
          - {tools or "{mcp: notes}"}
        capabilities:
          mcp: {{allow: {allow}}}
    """


def call(tool: str, **args: Any) -> dict[str, Any]:
    return {"name": f"notes.{tool}", "args": args}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    pids = tmp_path / "pids"
    pids.mkdir()
    values = {"MCP_PID_DIR": str(pids), "MCP_NOTES_FILE": str(tmp_path / "notes.txt")}
    yield values
    assert_no_servers_left(pids)


def started(env: dict[str, str]) -> list[int]:
    return [int(p.name) for p in Path(env["MCP_PID_DIR"]).iterdir()]


def assert_no_servers_left(pids: Path, wait: float = 5.0) -> None:
    deadline = time.monotonic() + wait
    left = [int(p.name) for p in pids.iterdir()]
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if running(pid)]
        time.sleep(0.05)
    assert not left, f"MCP server processes outlived ca: {left}"


def audited(root: Path, kind: str) -> list[dict[str, Any]]:
    """The data of every audit record of ``kind`` (read from the project's audit log)."""
    log = AuditLog.open(root)
    try:
        return [dict(r.data) for r in log.query(kind=kind)]
    finally:
        log.close()


def results(stdout: str) -> list[tuple[str, str, bool]]:
    return [(e["tool"], e["result"], e["is_error"]) for e in events(stdout) if e["kind"] == "tool_result"]


def project(make_project: ProjectFactory, agent_yaml: str, extra: str = "") -> Path:
    return make_project({"ca.yaml": ca_yaml(extra), "agents/notebook.yaml": agent_yaml})


def test_validate_checks_declarations_without_starting_a_server(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([]))
    done = run_ca("validate", str(root), env=env)
    assert done.returncode == 0, done.stderr
    assert "no ca.mcp.lock: the tools of MCP servers 'notes' are not pinned" in done.stderr
    assert "ca.yaml:2:3: warning" in done.stderr
    assert started(env) == []


def test_mcp_list_prints_each_tool_with_its_annotations(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([]))
    done = run_ca("mcp", "list", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    tools = {t["tool"]: t for t in json.loads(done.stdout)["servers"]["notes"]}
    assert tools["notes.echo"]["annotations"] == {"readOnlyHint": True}
    assert tools["notes.echo"]["description"] == "Echo the text back."
    assert tools["notes.add_note"]["annotations"] == {}
    assert tools["notes.wipe"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True}
    assert {t["pin"] for t in tools.values()} == {"unlocked"}
    text = run_ca("mcp", "list", "notes", cwd=root, env=env)
    assert "echo" in text.stdout and "readOnlyHint=true" in text.stdout
    unknown = run_ca("mcp", "list", "note", cwd=root, env=env)
    assert unknown.returncode == 2
    assert "unknown MCP server 'note'; did you mean 'notes'?" in unknown.stderr


def test_mcp_list_and_lock_find_the_project_from_a_subfolder_or_take_p(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([]))
    listed = run_ca("mcp", "list", "--json", cwd=root / "agents", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "notes.echo" in {t["tool"] for t in json.loads(listed.stdout)["servers"]["notes"]}
    locked = run_ca("mcp", "lock", cwd=root / "agents", env=env)
    assert locked.returncode == 0, locked.stderr
    assert (root / "ca.mcp.lock").is_file() and not (root / "agents" / "ca.mcp.lock").exists()
    named = run_ca("mcp", "list", "notes", "-p", str(root), cwd=root.parent, env=env)
    assert named.returncode == 0 and "echo" in named.stdout, named.stderr


def test_a_tool_call_runs_through_the_server_and_is_audited(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([call("echo", text="hi"), call("add_note", text="milk")]))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    assert results(done.stdout) == [("notes.echo", "echo: hi", False), ("notes.add_note", "noted (1 notes)", False)]
    assert len(started(env)) == 1  # one server for both calls, not one per call
    calls = audited(root, "tool.call")
    assert [(c["tool"], c["args"]) for c in calls] == [
        ("notes.echo", {"text": "hi"}),
        ("notes.add_note", {"text": "milk"}),
    ]


def test_a_tool_outside_capabilities_is_denied_and_the_model_goes_on(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([call("add_note", text="x"), call("echo", text="ok")], allow='["notes.echo"]'))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    [(_, denied, is_error), echoed] = results(done.stdout)
    assert is_error and "MCP tool 'notes.add_note' is not in capabilities.mcp.allow ('notes.echo')" in denied
    assert echoed == ("notes.echo", "echo: ok", False)
    assert not Path(env["MCP_NOTES_FILE"]).exists()
    denials = audited(root, "denial")
    assert [(d["tool"], d["rule"]) for d in denials] == [("notes.add_note", "capabilities.mcp.allow")]


def test_a_server_the_capabilities_do_not_name_is_denied(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([call("echo", text="hi")], allow='["github.*"]'))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    [(_, denied, is_error)] = results(done.stdout)
    assert is_error and "add 'notes.echo' (or 'notes.*' for every tool of 'notes')" in denied


def test_include_and_exclude_narrow_the_tools_the_model_sees(make_project: ProjectFactory, env: dict[str, str]) -> None:
    tools = "{mcp: notes, include: ['e*', 'add_*'], exclude: [add_note]}"
    root = project(make_project, agent([call("add_note", text="x")], tools=tools))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    [(_, result, is_error)] = results(done.stdout)
    assert is_error and "the agent has no tool 'notes_add_note'" in result  # excluded: it is not the agent's


def test_supervised_allows_read_only_tools_and_asks_for_the_rest(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([call("echo", text="hi"), call("add_note", text="milk")], profile="supervised"))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    assert done.returncode == 3, done.stderr  # waiting for a decision
    assert results(done.stdout) == [("notes.echo", "echo: hi", False)]
    [paused] = [e for e in events(done.stdout) if e["kind"] == "paused"]
    assert paused["payload"]["tool"] == "notes.add_note"
    assert "does not mark this tool read-only" in paused["payload"]["reason"]
    assert not Path(env["MCP_NOTES_FILE"]).exists()


def test_an_ask_survives_sigkill_and_is_approved_from_another_process_once(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([call("wipe"), call("add_note", text="milk")], profile="supervised"))
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CA, "run", "notebook", "go"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
    )
    os.close(slave)
    seen, deadline = b"", time.monotonic() + 60
    try:
        while b"[a]pprove" not in seen:
            assert time.monotonic() < deadline, f"no approval prompt; saw {seen!r}"
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 4096)
        assert b"notebook wants to run notes.wipe" in seen
        proc.kill()
        proc.wait(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert_no_servers_left(Path(env["MCP_PID_DIR"]))  # the server went with the killed ca
    listed = json.loads(run_ca("tasks", "list", "--pending", "--json", cwd=root).stdout)
    [task] = listed
    approved = run_ca("approve", task["id"][:12], "--json", cwd=root, env=env)
    assert approved.returncode == 3, approved.stderr  # wipe ran; add_note asks next
    assert results(approved.stdout) == [("notes.wipe", "wiped", False)]
    again = run_ca("approve", task["id"][:12], "--json", cwd=root, env=env)
    assert again.returncode == 0, again.stderr
    assert results(again.stdout) == [("notes.add_note", "noted (1 notes)", False)]
    assert Path(env["MCP_NOTES_FILE"]).read_text() == "milk\n"  # ran exactly once


def test_a_crashing_server_gives_an_error_result_and_is_restarted_once(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    calls = [call("crash"), call("echo", text="back"), call("crash"), call("echo", text="gone")]
    root = project(make_project, agent(calls))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    assert done.returncode == 0, done.stderr
    [crashed, back, crashed_again, gone] = results(done.stdout)
    assert crashed[2] and "closed the connection (it exited or crashed)" in crashed[1]
    assert back == ("notes.echo", "echo: back", False)
    assert crashed_again[2]
    assert gone[2] and "crashed again after a restart; it is not started again" in gone[1]
    assert len(started(env)) == 2


def test_results_are_capped_and_images_described(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([call("big", size=100_000), call("image")]))
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=env)
    [(_, big, _), (_, image, is_error)] = results(done.stdout)
    assert big.startswith("x" * 65536) and "more characters cut: MCP results are capped at 65536" in big
    assert "[image image/png, 24 bytes: not passed on" in image and not is_error


def test_a_tool_changed_after_the_lock_is_refused_until_locked_again(
    make_project: ProjectFactory, env: dict[str, str]
) -> None:
    root = project(make_project, agent([call("echo", text="hi")]))
    locked = run_ca("mcp", "lock", cwd=root, env=env)
    assert locked.returncode == 0, locked.stderr
    assert "notes: 7 tools pinned (first lock)" in locked.stdout
    assert run_ca("validate", str(root), env=env).stderr == ""  # pinned: no warning

    changed = {**env, "ECHO_VARIANT": "1"}
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env=changed)
    [(_, refused, is_error)] = results(done.stdout)
    assert is_error and "changed since ca.mcp.lock was written" in refused and "run `ca mcp lock`" in refused
    denials = audited(root, "denial")
    assert [(d["tool"], d["rule"]) for d in denials] == [("notes.echo", "mcp.lock")]

    relocked = run_ca("mcp", "lock", cwd=root, env=changed)
    assert "1 changed" in relocked.stdout and "changed: notes.echo" in relocked.stdout
    again = run_ca("run", "notebook", "go", "--json", "--session", "s2", cwd=root, env=changed)
    assert results(again.stdout) == [("notes.echo", "echo: hi", False)]


def test_a_server_that_cannot_start_fails_the_run_with_a_clear_message(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "ca.yaml": "mcp_servers: {notes: {command: ./no-such-server}}\n",
            "agents/notebook.yaml": agent([call("echo", text="hi")]),
        }
    )
    done = run_ca("run", "notebook", "go", cwd=root)
    assert done.returncode == 1
    assert "MCP server 'notes' could not start" in done.stderr and "Traceback" not in done.stderr


def test_sigkill_of_ca_mid_call_leaves_no_server(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([call("nap", seconds=30)]))
    proc = subprocess.Popen(
        [*CA, "run", "notebook", "go"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not started(env):
            assert time.monotonic() < deadline, "the server never started"
            time.sleep(0.1)
        time.sleep(1.0)  # the call is under way
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_no_servers_left(Path(env["MCP_PID_DIR"]))


def test_validating_and_compiling_the_spec_imports_nothing_of_the_mcp_sdk(make_project: ProjectFactory) -> None:
    root = project(make_project, agent([]))
    code = (
        "import sys; from pathlib import Path; import framework.cli.app; from framework.spec import load_project; "
        f"load_project(Path({str(root)!r})); "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith(('mcp.', 'mcp_types'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The test server over streamable HTTP on loopback, requiring a bearer token; its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port), HTTP_TOKEN],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the HTTP MCP server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


HTTP_TOKEN = "sekrit-token-4242"


def test_a_streamable_http_server_gets_its_headers_and_they_stay_secret(
    make_project: ProjectFactory, http_server: str
) -> None:
    root = make_project(
        {
            "ca.yaml": f"mcp_servers:\n  notes: {{url: '{http_server}', headers_env: {{Authorization: NOTES_AUTH}}}}\n",
            "agents/notebook.yaml": agent([call("echo", text="over http"), call("add_note", text="n")]),
        }
    )
    done = run_ca("run", "notebook", "go", "--json", cwd=root, env={"NOTES_AUTH": f"Bearer {HTTP_TOKEN}"})
    assert done.returncode == 0, done.stderr
    assert results(done.stdout) == [
        ("notes.echo", "echo: over http", False),
        ("notes.add_note", "noted (1 notes)", False),
    ]
    wrong = run_ca("run", "notebook", "go", cwd=root, env={"NOTES_AUTH": "Bearer wrong-token-0000"})
    assert wrong.returncode == 1 and "MCP server 'notes'" in wrong.stderr
    assert "wrong-token-0000" not in wrong.stderr + wrong.stdout
    unset = run_ca("run", "notebook", "go", cwd=root)
    assert unset.returncode == 1
    assert "header 'Authorization' needs variable NOTES_AUTH, which is not set" in unset.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_ca_serve_shares_one_server_and_leaves_none_when_stopped(
    make_project: ProjectFactory, env: dict[str, str], tmp_path: Path, sig: signal.Signals
) -> None:
    root = project(make_project, agent([call("echo", text="served")]))
    server = start_serve(root, logs=tmp_path, env=env)
    try:
        for _ in range(2):  # two tasks, each its own conversation: one MCP server for both
            answer = server.rpc("SendMessage", {"message": user_message("go")}, agent="notebook")
            task = result_of(answer)["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert len(started(env)) == 1
    finally:
        server.stop(sig)
    assert_no_servers_left(Path(env["MCP_PID_DIR"]))


SERVE_START = """
import asyncio, sys
from contextlib import AsyncExitStack
from pathlib import Path
from framework.protocols.a2a import open_remote
from framework.protocols.a2a.http import build_app
from framework.protocols.mcp import open_mcp
from framework.runtime.runtime import Runtime
from framework.spec import load_project

async def main():
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(
            load_project(Path(sys.argv[1])), source="a2a-http", stack=stack, remote=open_remote, mcp=open_mcp
        )
        build_app(runtime)
        print(sorted(m for m in sys.modules if m == "mcp" or m.startswith(("mcp.", "mcp_types"))))

asyncio.run(main())
"""


def test_starting_ca_serve_imports_nothing_of_the_mcp_sdk(make_project: ProjectFactory, env: dict[str, str]) -> None:
    root = project(make_project, agent([]))
    done = subprocess.run(
        [sys.executable, "-c", SERVE_START, str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert started(env) == []


def test_a_tool_that_changes_when_its_server_restarts_is_refused(
    make_project: ProjectFactory, env: dict[str, str], tmp_path: Path
) -> None:
    extra = '\n            env: {MCP_PID_DIR: "${MCP_PID_DIR:-}", MCP_VARIANT_FILE: "${MCP_VARIANT_FILE}"}'
    calls = [call("echo", text="before"), call("crash"), call("add_note", text="same"), call("echo", text="after")]
    root = make_project(
        {
            "ca.yaml": ca_yaml().replace(
                '            env: {MCP_PID_DIR: "${MCP_PID_DIR:-}", MCP_NOTES_FILE: "${MCP_NOTES_FILE:-}", '
                'ECHO_VARIANT: "${ECHO_VARIANT:-}"}',
                extra.strip("\n"),
            ),
            "agents/notebook.yaml": agent(calls),
        }
    )
    done = run_ca(
        "run", "notebook", "go", "--json", cwd=root, env={**env, "MCP_VARIANT_FILE": str(tmp_path / "crashed")}
    )
    assert done.returncode == 0, done.stderr
    [before, crashed, same, after] = results(done.stdout)
    assert before == ("notes.echo", "echo: before", False) and crashed[2]
    assert same == ("notes.add_note", "noted (1 notes)", False)  # unchanged tools still run
    assert after[2] and "changed when its server restarted; it is refused" in after[1]


def test_ca_serve_starts_no_mcp_server_before_an_agent_that_uses_it_runs(
    make_project: ProjectFactory, env: dict[str, str], tmp_path: Path
) -> None:
    """`ca serve` compiles its agents once it answers, but not one that uses an MCP server: that
    server starts when the agent first runs (docs/mcp.md)."""
    marked = '''
        from pathlib import Path

        Path("imported.log").write_text("yes")


        def mark(text: str) -> str:
            """Say the text back."""
            return text
    '''
    later = "name: zz\nmodel: offline\ntools: [{python: tools/marked.py:mark}]\n"  # compiled after 'notebook'
    root = project(make_project, agent([call("add_note", text="hello")]))
    write_project(root, {"agents/zz.yaml": later, "tools/marked.py": marked})
    server = start_serve(root, logs=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 30
        while not (root / "imported.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (root / "imported.log").exists(), server.output()
        time.sleep(0.5)
        assert started(env) == []
        answer = result_of(server.rpc("SendMessage", {"message": user_message("note it")}, agent="notebook"))
        assert answer["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer
        assert len(started(env)) == 1
    finally:
        server.stop()


def test_a_closed_runtime_starts_no_mcp_server(make_project: ProjectFactory, env: dict[str, str]) -> None:
    """A compile still running in a thread when its runtime closes (a reload's, a warm-up's) asks the
    MCP client side for a server's tools after it closed: refused, and no server starts (it used to
    start one, with nothing left to stop it)."""
    import asyncio

    from framework.errors import McpServerFailed
    from framework.protocols.mcp import open_mcp
    from framework.spec import load_project

    root = project(make_project, agent([call("read")]))
    hub = open_mcp(load_project(root), {**os.environ, **env})
    asyncio.run(hub.close())
    with pytest.raises(McpServerFailed, match="not started any more"):
        hub.tools("notes")
    with pytest.raises(McpServerFailed, match="not started any more"):
        asyncio.run(hub.call("notes", "read", {}))
    assert started(env) == []
