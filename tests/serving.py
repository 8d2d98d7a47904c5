"""`ca serve` as a real process on a loopback port, for the end-to-end tests.

:func:`start_serve` starts it with its stdout and stderr in files and returns once
``/healthz`` answers; :meth:`ServeProcess.stop` stops it (SIGTERM, then SIGKILL after a
grace period). Test modules subclass :class:`ServeProcess` for their own client methods.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from tests.conftest import CA, REPO, free_port

READY_TIMEOUT = 60.0
"""Seconds `ca serve` may take to answer /healthz."""

S = TypeVar("S", bound="ServeProcess")


@dataclass
class ServeProcess:
    root: Path
    port: int
    proc: subprocess.Popen[bytes]
    out: Path
    """The file that gets the server's stdout."""
    err: Path
    """The file that gets the server's stderr."""

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

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"the server died:\n{self.output()}"
        assert httpx.get(f"{self.url}/healthz", timeout=10).json()["status"] == "ok"

    def stop(self, sig: signal.Signals = signal.SIGTERM, grace: float = 20) -> None:
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


def start_serve(
    root: Path,
    logs: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    kind: type[S] = ServeProcess,  # type: ignore[assignment]
    drop_env: Sequence[str] = (),
) -> S:
    """``ca serve --port PORT ARGS`` in ``root``, output in ``logs/serve-PORT.{out,err}``; once /healthz answers."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if k not in drop_env}
    environ |= {"PYTHONPATH": str(REPO), **(env or {})}
    out, err = logs / f"serve-{port}.out", logs / f"serve-{port}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*CA, "serve", "--port", str(port), *args],
            cwd=root,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        )
    server = kind(root, port, proc, out, err)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if proc.poll() is not None:
            pytest.fail(f"ca serve exited with {proc.returncode}:\n{server.output()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            pytest.fail(f"ca serve did not answer /healthz in {READY_TIMEOUT:.0f} s:\n{server.output()}")
        time.sleep(0.1)
