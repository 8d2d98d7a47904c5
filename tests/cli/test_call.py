"""`ca call URL_OR_NAME [MESSAGE]` against a real `ca serve` and against an agent served by the plain a2a-sdk."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from a2a.types import StreamResponse, TaskState
from google.protobuf.json_format import ParseDict

from tests.a2a_peers import PLAIN_ECHO
from tests.conftest import (
    CA,
    SIDE_EFFECT,
    ProjectFactory,
    free_ports,
    read_rest,
    run_ca,
    write_project,
    writer_agent,
)
from tests.serving import SERVER_ENV, ServerProcess, launch_script, launch_serve, start_serve

pytestmark = pytest.mark.e2e


@dataclass
class Servers:
    ca: ServerProcess
    """`ca serve` of a project with `echo` and `writer` (manual profile: it asks before its tool)."""
    plain: ServerProcess
    """The plain a2a-sdk echo agent."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    logs = tmp_path_factory.mktemp("logs")
    port, plain_port = free_ports(2)
    root = write_project(
        tmp_path_factory.mktemp("served"),
        {
            "agents/echo.yaml": "name: echo\ndescription: Says it back\n",
            "agents/writer.yaml": writer_agent(
                "writer", "writer.log", reply="written", description="Writes a note, with a person's approval"
            ),
            "tools/side.py": SIDE_EFFECT,
        },
    )
    procs = [
        launch_serve(root, logs=logs, port=port, name="serve", env=SERVER_ENV),
        launch_script("plain_echo", PLAIN_ECHO, tmp_path_factory.mktemp("plain"), logs, plain_port),
    ]
    try:
        for proc in procs:
            proc.wait_ready()
        yield Servers(ca=procs[0], plain=procs[1])
    finally:
        for proc in procs:
            proc.stop()


def agent(servers: Servers, name: str) -> str:
    return f"{servers.ca.url}/agents/{name}/"


def stream(stdout: str) -> list[StreamResponse]:
    """Every stdout line as an A2A StreamResponse (strict: an unknown field fails)."""
    return [ParseDict(json.loads(line), StreamResponse()) for line in stdout.splitlines()]


def test_call_prints_the_reply_of_a_cleveragents_agent(servers: Servers, tmp_path: Path) -> None:
    result = run_ca("call", agent(servers, "echo"), "hello there", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[echo] You said: hello there\n"
    assert result.stderr.splitlines() == ["→ echo: Says it back", "[completed]"]


def test_call_json_prints_a2a_stream_responses(servers: Servers, tmp_path: Path) -> None:
    result = run_ca("call", agent(servers, "echo"), "hello there", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    responses = stream(result.stdout)
    assert responses[0].HasField("task") and responses[0].task.history[0].parts[0].text == "hello there"
    [whole] = [r.artifact_update for r in responses if r.HasField("artifact_update") and r.artifact_update.last_chunk]
    assert whole.artifact.parts[0].text == "[echo] You said: hello there"
    assert responses[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert {r.status_update.task_id for r in responses if r.HasField("status_update")} == {responses[0].task.id}


def test_call_works_against_the_plain_a2a_sdk_server(servers: Servers, tmp_path: Path) -> None:
    result = run_ca("call", f"{servers.plain.url}/", "ping", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "plain echo: ping\n"
    assert result.stderr.startswith("→ plain-echo: An echo agent written with the bare a2a-sdk")
    as_json = run_ca("call", servers.plain.url, "ping", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    [reply] = stream(as_json.stdout)
    assert reply.HasField("message") and reply.message.parts[0].text == "plain echo: ping"


def test_call_of_a_url_goes_on_from_a_project_that_does_not_load(
    servers: Servers, make_project: ProjectFactory
) -> None:
    """The project is needed only for its registries' credentials: YAML caught mid-edit stops nothing."""
    root = make_project({"agents/echo.yaml": "name: echo\nprofile: [not, a, name]\n"})
    result = run_ca("call", agent(servers, "echo"), "hello there", cwd=root / "agents")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[echo] You said: hello there\n"
    assert result.stderr.splitlines()[0] == (
        f"warning: the project in {root} does not load (1 error: run `ca validate`);"
        " calling without its registries' credentials"
    )


def test_call_of_something_that_is_neither_a_url_nor_an_agent_is_a_usage_error(make_project: ProjectFactory) -> None:
    root = make_project({"agents/echo.yaml": "name: echo\n", "agents/scout.yaml": "name: scout\n"})
    result = run_ca("call", "nowhere", "hello", cwd=root)
    assert result.returncode == 2
    assert result.stderr == (
        "error: 'nowhere' is neither a URL nor an agent of this project or its registries; agents: echo, scout\n"
    )
    assert result.stdout == ""


def test_call_of_an_unreachable_url_fails_with_one_clear_line(tmp_path: Path) -> None:
    [port] = free_ports(1)  # nothing listens there
    url = f"http://127.0.0.1:{port}/agents/echo/"
    result = run_ca("call", url, "hello", cwd=tmp_path)
    assert result.returncode == 1
    assert (
        result.stderr
        == f"error: nothing is listening at http://127.0.0.1:{port} (is `ca serve` running, on that port?)\n"
    )
    assert result.stdout == ""


def test_call_of_a_server_that_wants_credentials_says_how_to_give_them(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = make_project(
        {"ca.yaml": "server: {auth: {bearer_tokens_env: CALL_TOKENS}}\n", "agents/echo.yaml": "name: echo\n"}
    )
    server = start_serve(root, env={**SERVER_ENV, "CALL_TOKENS": "sekret"})
    try:
        url, origin = f"{server.url}/agents/echo/", server.url
        bare = run_ca("call", url, "hello", cwd=tmp_path)
        wrong = run_ca("call", url, "hello", "--token", "wrong", cwd=tmp_path)
        right = run_ca("call", url, "hello", cwd=tmp_path, env={"CA_CALL_TOKEN": "sekret"})
    finally:
        server.stop()
    assert bare.returncode == 1
    assert bare.stderr.splitlines()[-1] == (
        f"error: {origin} wants credentials (HTTP 401): pass --token TOKEN (or set CA_CALL_TOKEN),"
        " or --header 'X-API-Key: KEY' for an API key"
    )
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines()[-1].startswith(f"error: {origin} refused the credentials sent (HTTP 401): ")
    assert "wrong" not in wrong.stderr
    assert (right.returncode, right.stdout) == (0, "[echo] You said: hello\n"), right.stderr


def test_call_stops_at_input_required_without_a_terminal_and_names_the_task(servers: Servers, tmp_path: Path) -> None:
    result = run_ca("call", agent(servers, "writer"), "write it", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert 'writer wants to run append {"file": "writer.log", "text": "hello"}' in result.stderr
    waiting, how = result.stderr.splitlines()[-2:]
    assert waiting.startswith("task ") and waiting.endswith(" is waiting for input; answer it with:")
    task_id = waiting.split()[1]
    context_id = how.split("--context ")[1]
    assert how.strip() == f"ca call {agent(servers, 'writer')} approve --task {task_id} --context {context_id}"
    listed = run_ca("tasks", "list", "--pending", "--json", cwd=servers.ca.root)
    assert task_id in [t["id"] for t in json.loads(listed.stdout)]  # the server's task that waits
    assert not (servers.ca.root / "writer.log").exists()

    # The printed command answers it, without a terminal.
    answered = run_ca(
        "call", agent(servers, "writer"), "approve", "--task", task_id, "--context", context_id, cwd=tmp_path
    )
    assert answered.returncode == 0, answered.stderr
    assert (servers.ca.root / "writer.log").read_text() == "hello\n"
    (servers.ca.root / "writer.log").unlink()

    as_json = run_ca("call", agent(servers, "writer"), "write it", "--json", cwd=tmp_path)
    assert as_json.returncode == 3
    assert stream(as_json.stdout)[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert "is waiting for input" in as_json.stderr


@dataclass
class Terminal:
    """`ca call` on a pseudo-terminal, at its approval prompt: its process, the terminal's keyboard
    end and what it wrote there so far."""

    proc: subprocess.Popen[bytes]
    master: int
    seen: bytes = b""


@contextmanager
def at_the_prompt(servers: Servers, cwd: Path) -> Iterator[Terminal]:
    """`ca call` asking writer to write, on a terminal, once it shows its approval prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CA, "call", agent(servers, "writer"), "write it"],
        cwd=cwd,
        env={**os.environ, **SERVER_ENV},
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
    )
    os.close(slave)
    terminal = Terminal(proc, master)
    try:
        deadline = time.monotonic() + 60
        while b"[a]pprove or [r]eject?" not in terminal.seen:
            assert time.monotonic() < deadline, f"no prompt; saw {terminal.seen!r}"
            if select.select([master], [], [], 0.5)[0]:
                terminal.seen += os.read(master, 4096)
        yield terminal
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_call_answers_input_required_at_a_terminal(servers: Servers, tmp_path: Path) -> None:
    with at_the_prompt(servers, tmp_path) as terminal:
        os.write(terminal.master, b"a\n")
        out, _ = terminal.proc.communicate(timeout=60)
    assert terminal.proc.returncode == 0, terminal.seen
    assert b"writer wants to run append" in terminal.seen
    assert out.decode() == "written\n"
    assert (servers.ca.root / "writer.log").read_text() == "hello\n"


@pytest.mark.parametrize("key", ["ctrl-c", "ctrl-d"])
def test_ctrl_c_or_d_at_the_call_prompt_leaves_the_task_waiting_and_says_how_to_answer(
    servers: Servers, tmp_path: Path, key: str
) -> None:
    """Neither decides anything (a Ctrl-D used to ask for a reason, then reject)."""
    log = servers.ca.root / "writer.log"  # shared with the other tests of the module
    before = log.read_text() if log.exists() else ""
    with at_the_prompt(servers, tmp_path) as terminal:
        if key == "ctrl-c":
            terminal.proc.send_signal(signal.SIGINT)
        else:
            os.write(terminal.master, b"\x04")  # the end of input, typed
        terminal.proc.wait(timeout=10)  # at once: nothing else typed, no Enter
        terminal.seen += read_rest(terminal.master)
    shown = terminal.seen.decode(errors="replace")
    assert terminal.proc.returncode == 3, shown
    assert "Traceback" not in shown
    assert "is waiting for input; answer it with:" in shown
    assert (log.read_text() if log.exists() else "") == before  # the tool did not run
