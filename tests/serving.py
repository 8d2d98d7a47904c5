"""Servers as real processes on loopback ports, for the end-to-end tests: `ca serve` above all.

:class:`ServerProcess` is the one shape: a process on ``127.0.0.1:port`` with its stdout and
stderr in files, a ready path it answers once up, an HTTP client for JSON-RPC requests, and a
graceful stop. :func:`start_serve` starts `ca serve` and returns once ``/healthz`` answers;
:func:`launch_serve` and :func:`launch_script` start a process without waiting, so a module
can start several at once and then :meth:`~ServerProcess.wait_ready` for each. Test modules
subclass :class:`ServerProcess` for client methods of their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.a2a_peers import Json, is_v1
from tests.conftest import CA, REPO, free_port

READY_TIMEOUT = 60.0
"""Seconds a server may take to answer its ready path."""

SERVER_ENV = {
    "PYTHONPATH": str(REPO),
    "ANTHROPIC_API_KEY": "",
    "OPENAI_API_KEY": "",
    "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false",
}
"""The environment of servers started with :func:`launch_script` and of processes that talk to them:
the repository importable, no provider key (the offline and scripted models only), no tracing."""

S = TypeVar("S", bound="ServerProcess")


@dataclass
class ServerProcess:
    root: Path
    """The folder it runs in (the project of a `ca serve`)."""
    port: int
    proc: subprocess.Popen[bytes]
    out: Path
    """The file that gets the server's stdout."""
    err: Path
    """The file that gets the server's stderr."""
    ready_path: str = "/healthz"
    client: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=60))
    """Keeps connections open across the requests of :meth:`post` and :meth:`rpc`."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def output(self) -> str:
        """Both streams, for failure messages."""
        return f"--- stdout\n{self.out.read_text(errors='replace')}--- stderr\n{self.stderr()}"

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS for the server process")

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Return once the ready path answers 200; fail the test if the process exits or stays silent."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.out.stem} exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + self.ready_path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"{self.out.stem} did not answer {self.ready_path} in {timeout:.0f} s:\n{self.output()}")
            time.sleep(0.1)

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"the server died:\n{self.output()}"
        assert httpx.get(f"{self.url}/healthz", timeout=10).json()["status"] == "ok"

    def post(
        self, body: Json | bytes, *, path: str = "/agents/echo/", headers: Mapping[str, str] | None = None
    ) -> httpx.Response:
        """POST a JSON body (or raw bytes); a v1.0 method (PascalCase) gets ``A2A-Version: 1.0``."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"content-type": "application/json", **(headers or {})}
        if isinstance(body, dict) and is_v1(str(body.get("method", ""))):
            sent.setdefault("A2A-Version", "1.0")
        return self.client.post(self.url + path, content=content, headers=sent)

    def rpc(
        self,
        method: str,
        params: Json | None = None,
        *,
        agent: str = "echo",
        request_id: Any = 1,
        headers: Mapping[str, str] | None = None,
        status: int = 200,
    ) -> Json:
        """One JSON-RPC call on an agent's endpoint; the decoded answer, which must come with HTTP ``status``."""
        body: Json = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        response = self.post(body, path=f"/agents/{agent}/", headers=headers)
        assert response.status_code == status, (response.status_code, response.text)
        answer: Json = response.json()
        return answer

    def stop(self, sig: signal.Signals = signal.SIGTERM, grace: float = 20) -> None:
        """Send ``sig`` and wait ``grace`` seconds for the process to end, then kill it."""
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def assert_clean_exit(self) -> None:
        """SIGTERM shut it down gracefully (uvicorn re-raises the signal after its shutdown), and no
        traceback reached its log, not even for the malformed requests a test sent."""
        assert self.proc.returncode in (0, -signal.SIGTERM), self.output()
        assert "Traceback" not in self.stderr(), self.output()


def _launch(
    cmd: Sequence[str],
    cwd: Path,
    logs: Path,
    name: str,
    port: int,
    *,
    environ: Mapping[str, str],
    ready_path: str,
    kind: type[S],
) -> S:
    out, err = logs / f"{name}.out", logs / f"{name}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, env=dict(environ), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
        )
    LAUNCHED.append(proc)
    return kind(cwd, port, proc, out, err, ready_path)


LAUNCHED: list[subprocess.Popen[bytes]] = []
"""Every server process this session started: one still running when the session ends (a fixture
that failed halfway through starting its servers) is killed then, so none outlives the tests."""


def kill_launched() -> list[int]:
    """Kill the servers this session started that still run; their pids."""
    alive = [proc for proc in LAUNCHED if proc.poll() is None]
    for proc in alive:
        proc.kill()
        proc.wait(timeout=10)
    return [proc.pid for proc in alive]


def _host_prefix(hostname: str) -> list[str]:
    return ["unshare", "--user", "--map-root-user", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname]


def why_no_hosts() -> str:
    """Why processes cannot run under host names of their own here (:func:`on_host`), or '' when they can."""
    try:
        probe = subprocess.run(
            [*_host_prefix("ca-probe"), "hostname"], capture_output=True, text=True, timeout=10, check=False
        )
    except FileNotFoundError:
        return "`unshare` is not installed"
    if probe.returncode != 0 or probe.stdout.strip() != "ca-probe":
        return f"no UTS namespace for a second host name: {probe.stderr.strip() or probe.stdout.strip()}"
    return ""


def on_host(hostname: str) -> list[str]:
    """The command prefix that runs a process as on another machine named ``hostname``: in a UTS
    namespace of its own (``unshare``), so ``socket.gethostname()`` differs while pids and loopback are
    shared. Skips the test, saying why, where namespaces cannot be made."""
    why = why_no_hosts()
    if why:
        pytest.skip(f"replicas on separate hosts cannot be simulated here: {why}")
    return _host_prefix(hostname)


def launch_serve(
    root: Path,
    *args: str,
    logs: Path | None = None,
    port: int | None = None,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    drop_env: Sequence[str] = (),
    host: str | None = None,
    kind: type[S] = ServerProcess,  # type: ignore[assignment]
) -> S:
    """``ca serve --port PORT ARGS`` in ``root``, not waited for; output in ``logs/NAME.{out,err}``.

    ``logs`` defaults to a new temporary folder, ``port`` to a free one, ``name`` to ``serve-PORT``.
    The environment is this process's without ``drop_env``, with the repository importable, and ``env``.
    ``host``: the host name it runs under, as a replica on another machine (:func:`on_host`).
    """
    port = free_port() if port is None else port
    environ = {k: v for k, v in os.environ.items() if k not in drop_env}
    environ |= {"PYTHONPATH": str(REPO), **(env or {})}
    folder = Path(tempfile.mkdtemp(prefix="ca-serve-")) if logs is None else logs
    command = [*(on_host(host) if host else []), *CA, "serve", "--port", str(port), *args]
    return _launch(
        command, root, folder, name or f"serve-{port}", port, environ=environ, ready_path="/healthz", kind=kind
    )


def start_serve(
    root: Path,
    *args: str,
    logs: Path | None = None,
    env: Mapping[str, str] | None = None,
    drop_env: Sequence[str] = (),
    host: str | None = None,
    kind: type[S] = ServerProcess,  # type: ignore[assignment]
) -> S:
    """:func:`launch_serve`, returning once ``/healthz`` answers."""
    server = launch_serve(root, *args, logs=logs, env=env, drop_env=drop_env, host=host, kind=kind)
    server.wait_ready()
    return server


@contextmanager
def serving(*roots: Path) -> Iterator[list[ServerProcess]]:
    """One `ca serve` per project folder (as replicas on separate hosts), started in turn; all of them
    stopped on exit, and the ones already up when a later one fails to start."""
    started: list[ServerProcess] = []
    try:
        for root in roots:
            started.append(start_serve(root))
        yield started
    finally:
        for served in started:
            served.stop()


def launch_script(name: str, script: str, folder: Path, logs: Path, port: int) -> ServerProcess:
    """A server written as a Python script (saved as ``folder/NAME.py``, run as ``python SCRIPT PORT``
    with :data:`SERVER_ENV`), not waited for; it must answer ``/ready`` once up."""
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(script).lstrip("\n"), encoding="utf-8")
    command = [sys.executable, str(path), str(port)]
    environ = {**os.environ, **SERVER_ENV}
    return _launch(command, folder, logs, name, port, environ=environ, ready_path="/ready", kind=ServerProcess)


def sleeping_child(parent: int, output: Callable[[], str], timeout: float = 30) -> int:
    """The pid of the ``sleep`` a shell tool of process ``parent`` started (it leads its own process
    group); the test fails with ``output()`` when none runs within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-P", str(parent), "-x", "sleep"], capture_output=True, text=True)
        if found.stdout.strip():
            return int(found.stdout.split()[0])
        time.sleep(0.05)
    pytest.fail(f"the shell tool never started sleep:\n{output()}")


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting for its parent has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:  # reaped meanwhile
        return False


def still_running(marks: Path) -> set[int]:
    """Of the processes that each left a file named by its pid in ``marks``, those still running."""
    return {int(mark.name) for mark in marks.iterdir() if running(int(mark.name))}


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is still alive."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
