"""`ca serve` guards its project folder: a second server of the same folder is refused, and the
first one's running task is left alone (the second used to mark it failed, as a dead server's)."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.conftest import NAP, NAPPER, ProjectFactory, free_port, run_ca
from tests.serving import start_serve


def _rpc(url: str, method: str, params: dict[str, object]) -> dict[str, object]:
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer: dict[str, object] = httpx.post(url, json=request, headers={"A2A-Version": "1.0"}, timeout=30).json()
    return answer


def test_a_second_server_of_one_folder_is_refused_and_the_first_keeps_its_tasks(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    logs = tmp_path / "logs"
    logs.mkdir()
    first = start_serve(root, logs=logs)
    try:
        url = f"{first.url}/agents/napper/"
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "nap"}]}
        sent = _rpc(url, "SendMessage", {"message": message, "configuration": {"returnImmediately": True}})
        task = sent["result"]["task"]  # type: ignore[index]
        time.sleep(1)  # the nap has started
        second = run_ca("serve", "--port", str(free_port()), cwd=root, timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"another ca serve (pid {first.proc.pid}) already serves" in second.stderr
        assert "Traceback" not in second.stderr
        state = _rpc(url, "GetTask", {"id": task["id"]})["result"]["status"]["state"]  # type: ignore[index]
        assert state == "TASK_STATE_WORKING"
    finally:
        first.stop()


def test_the_folder_is_free_again_once_the_server_stopped(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = make_project({"agents/napper.yaml": NAPPER, "tools/nap.py": NAP})
    logs = tmp_path / "logs"
    logs.mkdir()
    start_serve(root, logs=logs).stop()
    again = start_serve(root, logs=logs)
    again.stop()
    again.assert_clean_exit()


def test_connections_to_ca_serve_have_nagle_off() -> None:
    """Each small SSE event goes out at once: asyncio sets TCP_NODELAY only on sockets that say they
    are TCP, and an accepted connection inherits the listening socket's protocol (a 0 there cost each
    streamed event the client's delayed ACK, ~40 ms)."""
    import asyncio
    import socket

    from framework.cli.serve import listen_on

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listening = listen_on("127.0.0.1", 0)
        server = await asyncio.start_server(connected, sock=listening)
        async with server:
            port = listening.getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(main()) != 0


MARKED = '''
    from pathlib import Path

    with Path("imported.log").open("a") as log:
        log.write("tools/marked.py\\n")


    def mark(text: str) -> str:
        """Say the text back."""
        return text
'''

BROKEN = '''
    import no_such_module_for_ca_tests


    def shout(text: str) -> str:
        """Shout."""
        return text.upper()
'''


def _agent(name: str, tool: str) -> str:
    return f"""
        name: {name}
        profile: autonomous
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: {tool.rsplit(":", 1)[1]}, args: {{text: hi}}}}]
            - done
        tools:
          - python: {tool}
    """


def _marked_and_broken(make_project: ProjectFactory) -> Path:
    """Two agents: one whose python tool logs its import, one whose tool does not import."""
    return make_project(
        {
            "agents/marked.yaml": _agent("marked", "tools/marked.py:mark"),
            "tools/marked.py": MARKED,
            "agents/broken.yaml": _agent("broken", "tools/broken.py:shout"),
            "tools/broken.py": BROKEN,
        }
    )


def test_the_agents_are_compiled_once_the_server_answers(make_project: ProjectFactory, tmp_path: Path) -> None:
    """Once it answers, `ca serve` compiles its agents: a python tool is imported before any request,
    so the first one does not wait for it, and only once; a tool that does not import is a warning
    naming the agent, the file and the line, and only that agent fails."""
    root = _marked_and_broken(make_project)
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (
            "no_such_module_for_ca_tests" in server.stderr() and (root / "imported.log").exists()
        ):
            time.sleep(0.05)
        assert (root / "imported.log").read_text() == "tools/marked.py\n", server.output()
        warning = (
            "agent 'broken' fails when called until this is fixed: tools/broken.py:1: importing python tool "
            "'tools/broken.py:shout' failed: ModuleNotFoundError: No module named 'no_such_module_for_ca_tests'"
        )
        assert warning in server.stderr(), server.output()
        message = {"role": "ROLE_USER", "parts": [{"text": "go"}]}
        for name, state in (("marked", "TASK_STATE_COMPLETED"), ("broken", "TASK_STATE_FAILED")):
            sent = _rpc(
                f"{server.url}/agents/{name}/", "SendMessage", {"message": {**message, "messageId": uuid.uuid4().hex}}
            )
            assert sent["result"]["task"]["status"]["state"] == state, sent  # type: ignore[index]
        assert (root / "imported.log").read_text() == "tools/marked.py\n"  # compiled once, at start
        assert "Traceback" not in server.stderr()
    finally:
        server.stop()


SLOW_IMPORT = '''
    import time
    from pathlib import Path

    with Path("imported.log").open("a") as log:
        log.write("tools/slow.py\\n")
    time.sleep(4)  # an import that takes a while (a big library, a model loaded at import)


    def slow(text: str) -> str:
        """Say the text back."""
        return text
'''


def test_a_compile_stops_neither_the_server_nor_its_other_agents_and_is_done_once(
    make_project: ProjectFactory, tmp_path: Path
) -> None:
    """While an agent's python tool takes 4 s to import, twelve requests to it await that one compile
    (no second import), and the probes and another agent, whose tool call runs in a worker thread,
    answer at once (a compile on the event loop, or in the loop's few worker threads, stopped them)."""
    from concurrent.futures import ThreadPoolExecutor

    slow_agent = """
        name: slow
        profile: autonomous
        model: {provider: scripted, replies: [{tool_calls: [{name: slow, args: {text: hi}}]}, done]}
        tools: [{python: tools/slow.py:slow}]
    """
    fast_agent = """
        name: fast
        profile: autonomous
        model: {provider: scripted, replies: [{tool_calls: [{name: fs.list, args: {path: .}}]}, listed]}
        tools: [fs.list]
        capabilities: {fs: {read: ["**"]}}
    """
    root = make_project({"agents/slow.yaml": slow_agent, "tools/slow.py": SLOW_IMPORT, "agents/fast.yaml": fast_agent})
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, logs=logs)
    try:

        def send(name: str) -> str:
            message = {"role": "ROLE_USER", "parts": [{"text": "go"}], "messageId": uuid.uuid4().hex}
            answer = _rpc(f"{server.url}/agents/{name}/", "SendMessage", {"message": message})
            return str(answer["result"]["task"]["status"]["state"])  # type: ignore[index]

        deadline = time.monotonic() + 30
        while not (root / "imported.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the slow import has begun
        with ThreadPoolExecutor(12) as pool:
            slow = [pool.submit(send, "slow") for _ in range(12)]
            time.sleep(0.5)
            started = time.monotonic()
            assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
            assert send("fast") == "TASK_STATE_COMPLETED"
            waited = time.monotonic() - started
            assert waited < 2.5, f"the server stood still {waited:.1f} s while another agent compiled"
            assert [f.result(timeout=60) for f in slow] == ["TASK_STATE_COMPLETED"] * 12
        assert (root / "imported.log").read_text() == "tools/slow.py\n", server.output()
    finally:
        server.stop()


HANGING_IMPORT = '''
    import time
    from pathlib import Path

    Path("imported.log").write_text("tools/hang.py\\n")
    time.sleep(60)  # an import that hangs (a network share, a lock held elsewhere)


    def hang(text: str) -> str:
        """Say the text back."""
        return text
'''


@pytest.mark.parametrize("reload", [False, True], ids=["serve", "serve --reload"])
def test_a_tool_whose_import_hangs_does_not_delay_a_shutdown(
    make_project: ProjectFactory, tmp_path: Path, reload: bool
) -> None:
    """Ctrl-C (SIGINT, after which the interpreter joins the threads it knows) while an agent's
    python tool hangs at import — compiled ahead by `ca serve`, or by `--reload`'s watcher, which
    compiles every agent of the start-up bundle — ends the server at once: nothing waits for the
    compile's thread."""
    agent = """
        name: hang
        profile: autonomous
        model: {provider: scripted, replies: [done]}
        tools: [{python: tools/hang.py:hang}]
    """
    root = make_project({"agents/hang.yaml": agent, "tools/hang.py": HANGING_IMPORT})
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, *(["--reload"] if reload else []), logs=logs)
    try:
        deadline = time.monotonic() + 30
        while not (root / "imported.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (root / "imported.log").exists(), server.output()
        started = time.monotonic()
        server.stop(signal.SIGINT, grace=30)
        took = time.monotonic() - started
        assert took < 8, f"the server took {took:.1f} s to stop, waiting for a hung import\n{server.output()}"
        assert server.proc.returncode == 130, server.output()
        assert "Traceback" not in server.stderr(), server.output()
    finally:
        server.stop()


def test_with_reload_a_tool_that_does_not_import_at_start_is_said(make_project: ProjectFactory, tmp_path: Path) -> None:
    """`--reload` compiles the start-up bundle itself: a tool that does not import is said on stderr
    (it used to go unsaid until the agent was called), and the server serves the other agents."""
    root = _marked_and_broken(make_project)
    logs = tmp_path / "logs"
    logs.mkdir()
    server = start_serve(root, "--reload", logs=logs)
    try:
        said = "warning: the agents using it fail when called until this is fixed"
        deadline = time.monotonic() + 30
        while said not in server.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (
            "tools/broken.py:1:1: error: importing python tool 'tools/broken.py:shout' failed: "
            "ModuleNotFoundError: No module named 'no_such_module_for_ca_tests'\n"
        ) in server.stderr(), server.output()
        assert said in server.stderr(), server.output()
        message = {"role": "ROLE_USER", "parts": [{"text": "go"}], "messageId": uuid.uuid4().hex}
        sent = _rpc(f"{server.url}/agents/marked/", "SendMessage", {"message": message})
        assert sent["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", sent  # type: ignore[index]
    finally:
        server.stop()
