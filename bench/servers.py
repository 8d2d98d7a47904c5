"""The server processes bench/serve.py loads: spawn, wait for the card, stop, and what they cost.

Each server is a process of its own on a free loopback port, its output in a file. CPU and RSS
come from /proc: a server's process and its live descendants. For a PostgreSQL store, each
measurement gets a database of its own (:func:`fresh_database`), and the CPU of the PostgreSQL
backends serving it is read from /proc too when the server is on this machine.

Nothing here imports ca but :func:`shown`, when it runs: the bare a2a-sdk server of bench/serve.py
imports this module as well.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CARD = "/.well-known/agent-card.json"
OTEL_ENV = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"
READY_TIMEOUT = 60.0  # seconds a server may take to answer its card
LOOPBACK = {"127.0.0.1", "localhost", "::1"}

PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",  # no model: the built-in offline model, which echoes
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def server_env() -> dict[str, str]:
    """This environment for a server, without CA_STORE_URL: each server's store is the bench's choice."""
    env = {k: v for k, v in os.environ.items() if k != "CA_STORE_URL"}
    return {**env, "PYTHONPATH": str(REPO), OTEL_ENV: "false"}


def write_project(root: Path, store_url: str | None = None) -> None:
    """The echo project in ``root``; with ``store_url``, its ``store.url`` (e.g. PostgreSQL)."""
    for name, text in PROJECT.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if store_url is not None:
        with (root / "ca.yaml").open("a") as config:
            config.write(f"store:\n  url: {json.dumps(store_url)}\n")  # a YAML string, whatever the URL holds


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    started: float
    output: IO[bytes]
    ready: float | None = None  # seconds from spawn to card ready, once wait_ready saw it

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"


def spawn(name: str, command: list[str], cwd: Path, port: int, env: dict[str, str] | None = None) -> Server:
    # A file, not a pipe, so a chatty server never blocks on it; stop() reads and closes it.
    err = tempfile.TemporaryFile()  # noqa: SIM115
    start = time.perf_counter()
    environ = server_env() if env is None else env
    proc = subprocess.Popen(command, cwd=cwd, env=environ, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    return Server(name, port, proc, start, err)


def spawn_ca(project: Path, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "framework", "serve", "--port", str(port)]
    return spawn("ca serve", command, project, port, env)


def wait_ready(server: Server, timeout: float = READY_TIMEOUT) -> float:
    """Seconds from spawn until the agent card answers 200 (polled every 5 ms; once, then remembered)."""
    import httpx

    if server.ready is not None:
        return server.ready
    deadline = server.started + timeout
    with httpx.Client(timeout=2) as http:
        while time.perf_counter() < deadline:
            if server.proc.poll() is not None:
                sys.exit(f"{server.name} exited with {server.proc.returncode}:\n{stop(server)}")
            try:
                if http.get(server.url + CARD).status_code == 200:
                    server.ready = time.perf_counter() - server.started
                    return server.ready
            except httpx.TransportError:
                pass
            time.sleep(0.005)
    sys.exit(f"{server.name} did not answer its card within {timeout:.0f} s:\n{stop(server)}")


def stop(server: Server) -> str:
    """SIGTERM, then SIGKILL after 15 s; returns what the process wrote (once: '' after that)."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=10)
    if server.output.closed:
        return ""
    server.output.seek(0)
    text = server.output.read().decode(errors="replace")
    server.output.close()
    return text


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and its live descendants (a tool's or worker's process counts too)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += cpu_seconds(current)
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return total


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


# -- PostgreSQL ----------------------------------------------------------------------------


def is_postgres(url: str) -> bool:
    """Whether ``url`` is a PostgreSQL store URL as ``store.url`` takes it (any driver spelling)."""
    return urlsplit(url).scheme.split("+")[0] == "postgresql"


def _libpq(url: str, database: str) -> str:
    """``url`` as psycopg takes it (no ``+driver``), naming ``database``."""
    parts = urlsplit(url)
    return parts._replace(scheme="postgresql", path=f"/{database}").geturl()


@dataclass
class Database:
    """A database made for one measurement: ``url`` is the ``store.url`` its servers get."""

    url: str
    name: str
    admin: str  # conninfo of the server's maintenance database, which the bench itself uses

    def activity(self) -> tuple[int, int]:
        """Connections opened to this database so far, and transactions ended (pg_stat_database).

        PostgreSQL publishes a backend's counts when it goes idle, at most once a second: read
        them a second or more after the load.
        """
        import psycopg

        with psycopg.connect(self.admin, autocommit=True, connect_timeout=5) as conn:
            query = "SELECT sessions, xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s"
            row = conn.execute(query, (self.name,)).fetchone()
        if row is None:
            sys.exit(f"the bench's database {self.name!r} is gone from its server")
        return int(row[0]), int(row[1])

    def backends_cpu(self) -> dict[int, float] | None:
        """CPU so far of each PostgreSQL backend connected to this database; None for a remote server."""
        import psycopg

        if urlsplit(self.url).hostname not in LOOPBACK:
            return None
        with psycopg.connect(self.admin, autocommit=True, connect_timeout=5) as conn:
            query = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            pids = [int(row[0]) for row in conn.execute(query, (self.name,))]
        times = {}
        for pid in pids:
            try:
                times[pid] = cpu_seconds(pid)
            except OSError:  # the connection closed while we looked, or /proc is not the server's
                continue
        return times or None


def backend_cpu_between(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """CPU the backends used between two readings; a backend that both opened and closed in between is missed."""
    if before is None or after is None:
        return None
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def shown(url: str) -> str:
    """``url`` with its passwords (the user part's, ``?password=`` …) as ``***``: ca's own function,
    imported only here, when a URL is printed (never by the bare server)."""
    from framework.spec.urls import hidden

    return hidden(url)


def check_postgres(url: str) -> None:
    """Exit with one line when the PostgreSQL server of ``url`` does not answer."""
    try:
        import psycopg
    except ImportError:
        sys.exit("--store postgresql://… needs psycopg (the 'postgres' extra)")
    try:
        with psycopg.connect(_libpq(url, "postgres"), connect_timeout=5):
            return
    except psycopg.Error as exc:
        sys.exit(f"--store {shown(url)}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}")


@contextmanager
def fresh_database(url: str, label: str) -> Iterator[Database]:
    """A new, empty database on the server of ``url``, named after its database and ``label``; dropped on exit."""
    import psycopg
    from psycopg import sql

    base = urlsplit(url).path.strip("/") or "bench"
    name = f"{base[:40]}_{uuid.uuid4().hex[:8]}_{label[:12]}"  # within PostgreSQL's 63 bytes
    admin = _libpq(url, "postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield Database(urlsplit(url)._replace(path=f"/{name}").geturl(), name, admin)
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
