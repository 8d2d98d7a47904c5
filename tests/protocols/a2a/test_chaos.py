"""Chaos: two `ca serve` replicas on one PostgreSQL database, one SIGKILLed and restarted every few seconds.

200 tasks go to both replicas in turn, a third of them to an agent that asks for approval, which
is then decided on the other replica. A request to a replica that is down (connection refused) is
sent to the other, as a load balancer would; one cut off by a kill is not sent again (it may have
run). Every tool call appends a line to its conversation's own counter file: its side effect.
Replica B runs all along, under another host name than A (as on two machines, when namespaces
allow: then B settles A's tasks by their leases, ``CA_TASK_LEASE=3s``; A, restarted, settles its own
by pid). At the end every task has a final state (those still waiting get their decision), in
the task records and in a2a-sdk's rows, no side effect ran twice, a completed task's ran once,
and ``ca audit --verify`` accepts the one chain. The counts are printed (``-s`` shows them).
"""

from __future__ import annotations

import json
import random
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from framework.runtime.task_record import FINAL_STATES
from framework.runtime.tasks import TaskStore
from tests.conftest import free_port, run_ca, write_project
from tests.postgres_db import fresh_database
from tests.serving import ServerProcess, launch_serve, why_no_hosts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TASKS = 200
LEASE_S = 3.0
CLIENTS = 6
"""Requests in flight at once."""
UP_S = (2.0, 4.0)
"""How long A serves between kills (after it answered /healthz again), at random in this range."""

COUNT = '''
    import asyncio
    from pathlib import Path

    from langgraph.config import get_config

    COUNTERS = Path({counters!r})


    async def count(seconds: float) -> str:
        """Count one run of this conversation's side effect, then take a moment (a kill may land in it)."""
        conversation = get_config()["configurable"]["thread_id"]
        with (COUNTERS / conversation).open("a") as counter:
            counter.write("ran\\n")
        await asyncio.sleep(seconds)
        return "counted"
'''


def agent(name: str, profile: str) -> str:
    return f"""
        name: {name}
        profile: {profile}
        model:
          provider: scripted
          replies:
            - tool_calls: [{{name: count, args: {{seconds: 0.3}}}}]
            - counted
        tools:
          - python: tools/count.py:count
    """


@dataclass
class Cluster:
    """A (killed and restarted) and B (always up), and what the clients and the killer saw."""

    roots: dict[str, Path]
    ports: dict[str, int]
    url: str
    hosts: dict[str, str | None]
    logs: Path
    servers: dict[str, ServerProcess] = field(default_factory=dict)
    kills: int = 0
    seen: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, name: str) -> ServerProcess:
        env = {"CA_TASK_LEASE": f"{LEASE_S:g}s", "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false"}
        server = launch_serve(
            self.roots[name],
            logs=self.logs,
            port=self.ports[name],
            name=f"{name}-{self.kills}",
            env=env,
            host=self.hosts[name],
        )
        self.servers[name] = server
        server.wait_ready(timeout=120)
        return server

    def count(self, what: str) -> None:
        with self.lock:
            self.seen[what] += 1

    def rpc(self, first: str, method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
        """One JSON-RPC call, to ``first`` or — refused there — to the other replica (a load balancer's
        retry: nothing reached the dead one). Which replica answered, and its answer; None when the
        replica died with the request in flight (it is not sent again: it may have run)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        order = [first, "b" if first == "a" else "a"]
        for attempt in range(20):
            name = order[attempt % 2]
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{self.ports[name]}/agents/{params.get('agent', '')}",
                    json=body,
                    headers={"A2A-Version": "1.0"},
                    timeout=120,
                )
            except httpx.ConnectError:
                self.count("refused, sent to the other replica")
                time.sleep(0.1)
                continue
            except httpx.TransportError:
                self.count("cut off by a kill")
                return name, None
            if response.status_code in (502, 503):  # draining or not ready: as refused
                time.sleep(0.1)
                continue
            return name, response.json()
        raise AssertionError(f"neither replica took {method} {params}")

    def chaos(self, stop: threading.Event) -> None:
        """Kill A every few seconds of its serving, and start it again, until ``stop``."""
        while not stop.wait(random.uniform(*UP_S)):
            victim = self.servers["a"]
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(timeout=30)
            victim.client.close()
            self.kills += 1
            self.start("a")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    counters = tmp_path / "counters"
    counters.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    hosts: dict[str, str | None] = (
        {"a": "replica-a", "b": "replica-b"} if not why_no_hosts() else {"a": None, "b": None}
    )
    with fresh_database("chaos") as url:
        roots = {
            name: write_project(
                tmp_path / name,
                {
                    "ca.yaml": f"store: {{url: {url!r}}}\n",
                    "agents/quick.yaml": agent("quick", "autonomous"),
                    "agents/gated.yaml": agent("gated", "manual"),
                    "tools/count.py": COUNT.format(counters=str(counters)),
                },
            )
            for name in ("a", "b")
        }
        made = Cluster(roots, {"a": free_port(), "b": free_port()}, url, hosts, logs)
        try:
            made.start("b")  # first alone: it creates the shared tables
            made.start("a")
            yield made
        finally:
            for server in made.servers.values():
                server.stop(sig=signal.SIGKILL, grace=10)


def _message(text: str, context: str, task_id: str = "") -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], "contextId": context}
    return {"message": message | ({"taskId": task_id} if task_id else {})}


def _one_task(cluster: Cluster, i: int) -> None:
    agent_name = "gated" if i % 3 == 2 else "quick"
    context = f"chaos-{i:03d}"
    first = "ab"[i % 2]
    answered_by, answer = cluster.rpc(first, "SendMessage", {"agent": agent_name, **_message("go", context)})
    if answer is None:
        return
    assert "result" in answer, answer
    task = answer["result"]["task"]
    cluster.count(f"{agent_name} answered {task['status']['state']}")
    if task["status"]["state"] != "TASK_STATE_INPUT_REQUIRED":
        return
    other = "b" if answered_by == "a" else "a"  # decided on the other replica
    params = {"agent": agent_name, **_message("approve", context, task["id"])}
    _, decided = cluster.rpc(other, "SendMessage", params)
    if decided is not None:
        state = decided["result"]["task"]["status"]["state"] if "result" in decided else "error"
        cluster.count(f"decision answered {state}")


def _unsettled_rows(url: str, timeout: float) -> dict[str, str]:
    """The a2a-sdk rows (id -> state) still submitted or working once ``timeout`` passed (none: at once)."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT id, status FROM public.tasks").fetchall()
        states = {task_id: (json.loads(s) if isinstance(s, str) else s)["state"] for task_id, s in rows}
        running = {i: s for i, s in states.items() if s in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")}
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.5)


def _logged(logs: Path, task_id: str) -> list[str]:
    """What the replicas logged about ``task_id`` (file: line), to tell which of them left its row behind."""
    return [
        f"{path.name}: {line}"
        for path in sorted(logs.iterdir())
        for line in path.read_text(errors="replace").splitlines()
        if task_id in line
    ]


def _audited(records: list[dict[str, Any]], task_id: str) -> list[str]:
    """The audit records of ``task_id``, one line each: what its runs did, to tell how it ended."""
    return [
        f"{r['ts']} {r['source']} {r['kind']} {json.dumps(r['data'])}" for r in records if r.get("task_id") == task_id
    ]


def _settle(cluster: Cluster, store: TaskStore, timeout: float) -> None:
    """Decide, on B, every task still waiting, until every task has a final state."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = [t for t in store.list(limit=100_000) if not t.parent]
        if all(t.state in FINAL_STATES for t in tasks):
            return
        assert time.monotonic() < deadline, Counter(t.state for t in tasks)
        for task in tasks:
            if task.state == "input-required":
                asked = time.monotonic()
                cluster.rpc(
                    "b", "SendMessage", {"agent": task.agent, **_message("approve", task.conversation, task.id)}
                )
                cluster.count(f"decided at the end (answered in {time.monotonic() - asked:.0f} s)")
        time.sleep(0.5)


def test_two_replicas_one_killed_again_and_again_lose_no_task_and_repeat_no_side_effect(
    cluster: Cluster, tmp_path: Path
) -> None:
    started = time.monotonic()
    stop = threading.Event()
    killer = threading.Thread(target=cluster.chaos, args=(stop,))
    killer.start()
    try:
        with ThreadPoolExecutor(CLIENTS) as clients:
            for done in [clients.submit(_one_task, cluster, i) for i in range(TASKS)]:
                done.result()
    finally:
        stop.set()
        killer.join(timeout=180)
    load_s = time.monotonic() - started
    store = TaskStore.open(cluster.roots["b"], url=cluster.url)
    try:
        _settle(cluster, store, timeout=LEASE_S * 4 / 3 + 120)
        tasks = [t for t in store.list(limit=100_000) if not t.parent]
    finally:
        store.close()
    settled_s = time.monotonic() - started - load_s
    counters = {p.name: p.read_text().count("ran\n") for p in (tmp_path / "counters").iterdir()}
    audit = run_ca("audit", "--json", "--limit", "1000000", cwd=cluster.roots["b"], timeout=120)
    assert audit.returncode == 0, audit.stderr
    records = json.loads(audit.stdout)
    verified = run_ca("audit", "--verify", cwd=cluster.roots["b"], timeout=120)

    states = Counter(t.state for t in tasks)
    lease = sum(1 for t in tasks if t.state == "failed" and "stopped renewing its lease" in t.error)
    print(f"\nchaos: {TASKS} tasks in {load_s:.0f} s, replica A SIGKILLed {cluster.kills} times")
    print(
        f"  every task final {settled_s:.0f} s later; checks took {time.monotonic() - started - load_s - settled_s:.0f} s"
    )
    print(f"  hosts: {cluster.hosts}")
    print(
        f"  task records: {dict(states)}; failed by an expired lease: {lease}, by a dead pid: {states['failed'] - lease}"
    )
    print(f"  decisions audited: {sum(1 for r in records if r['kind'] == 'approval')}")
    resumed = sum(1 for r in records if r["kind"] == "task.state" and "resumed_from" in r["data"])
    print(f"  runs resumed after their replica died (no tool call had started): {resumed}")
    print(f"  side effects: {sum(counters.values())} in {len(counters)} conversations")
    for what, n in sorted(cluster.seen.items()):
        print(f"  {what}: {n}")
    for error, n in Counter(re.sub(r"pid \d+", "pid N", t.error) for t in tasks if t.state == "failed").most_common():
        print(f"  failed, {n}: {error}")

    assert cluster.kills >= 3, cluster.kills
    assert all(t.state in FINAL_STATES for t in tasks), states
    by_id = {t.id: t for t in tasks}
    unsettled = _unsettled_rows(cluster.url, timeout=LEASE_S * 4 / 3 + 30)
    # a2a-sdk's rows show the end too, not only the records (also of a task that ended just before its replica died)
    assert not unsettled, {i: (state, by_id.get(i), _logged(cluster.logs, i)) for i, state in unsettled.items()}
    assert all(n <= 1 for n in counters.values()), {c: n for c, n in counters.items() if n > 1}
    for task in tasks:
        if task.state == "completed":
            # a completed task's side effect ran, once
            assert counters.get(task.conversation) == 1, (
                task,
                _audited(records, task.id),
                _logged(cluster.logs, task.id),
            )
    # a replica killed mid-turn does not hold its conversation: no decision waits out the turn limit
    busy = [t for t in tasks if t.failure is not None and t.failure.code == "conversation_busy"]
    assert not busy, busy
    assert states["completed"] >= TASKS // 2, states  # the load went through, not just failures
    assert verified.returncode == 0 and verified.stdout.startswith("audit log ok: "), verified.stdout + verified.stderr
    cluster.servers["b"].assert_alive()
