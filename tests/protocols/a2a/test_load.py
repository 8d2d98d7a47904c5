"""Load on the SQLite default: a real `ca serve`, many SendMessage at concurrency 16.

The issue asks: 3000 SendMessage at concurrency 16 complete with 0 failed tasks (a peer's
SQLite store fails with "database is locked" here), each conversation keeps its own history,
and server memory stays flat after warm-up.

Size: the issue's 3000 after the warm-up, in the normal suite. `ca serve` answered 20-25
SendMessage per second on this 2-core machine when this was written (offline echo agent, every
request persisted: task store, conversation checkpoints, task record, audit), so the test takes
2-3 minutes. ``CA_LOAD_REQUESTS=N`` runs another size with the same checks (e.g. 300 while
working on the server).

What it does: WARMUP requests, then LOAD more, every one a new context, over raw JSON-RPC
(``A2A-Version: 1.0``) with httpx from CONCURRENCY workers. Every answer must be a completed
task of the context sent, with no JSON-RPC error and a reply echoing that request's own text;
"database is locked" must appear nowhere (answers and server log).

Histories: SAMPLE echo contexts of the load get a second message (the echo answers only that
message; GetTask shows each of the two tasks with its own text), and SAMPLE contexts started
during the load on a scripted agent whose second reply differs get a second message too: they
answer "second answer" only if their own history, and no other, was kept.

Memory: RSS after the load may exceed RSS after the warm-up by RSS_BOUND_MIB at most: 8 MiB
of slack plus 4 KiB per request. Measured here, RSS grows by about 3 MiB in the first 1000
requests after the warm-up (caches filling) and then by about 1 KiB per request (4000 requests:
+7.5 MiB), so a leak of a few KiB per request fails. Both figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

LOAD = int(os.environ.get("CA_LOAD_REQUESTS", "3000"))
"""The issue's 3000 (see the module docstring); ``CA_LOAD_REQUESTS=N`` runs another size."""
WARMUP = 300
CONCURRENCY = 16
SAMPLE = 20
RSS_BOUND_MIB = 8 + 4 * LOAD / 1024
"""Allowed RSS growth after the warm-up: 8 MiB of slack plus 4 KiB per request (see the docstring)."""

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120 + LOAD // 5)]

HEADERS = {"A2A-Version": "1.0"}
PROJECT = {
    "ca.yaml": "default_agent: echo\n",
    "agents/echo.yaml": "name: echo\n",  # the built-in offline model: echoes the last message
    "agents/twice.yaml": """
        name: twice
        model:
          provider: scripted
          replies: ["first answer", "second answer"]
    """,
}


# -- the server ---------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    root = write_project(tmp_path / "project", PROJECT)
    srv = start_serve(root, logs=tmp_path)
    try:
        yield srv
    finally:
        srv.stop()


# -- the client ---------------------------------------------------------------------------


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def send_message(text: str, context_id: str) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "contextId": context_id, "role": "ROLE_USER", "parts": [{"text": text}]}
    return rpc("SendMessage", {"message": message})


@dataclass
class Sent:
    """One SendMessage and what came back."""

    path: str  # "/" (echo, the default agent) or "/agents/twice/"
    text: str
    context_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    task: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


def reply_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a.get("parts", []))


def user_texts(task: dict[str, Any]) -> list[str]:
    return [
        p.get("text", "") for m in task.get("history", []) if m.get("role") == "ROLE_USER" for p in m.get("parts", [])
    ]


def judge(sent: Sent, answer: dict[str, Any], expected_reply: str) -> str | None:
    """None when ``answer`` is the completed task this request should get, else what is wrong."""
    if "database is locked" in str(answer):
        return f"database is locked: {answer}"
    if "error" in answer:
        return f"JSON-RPC error {answer['error']}"
    task = answer.get("result", {}).get("task")
    if not isinstance(task, dict):
        return f"no task in {answer}"
    sent.task = task
    state = task.get("status", {}).get("state")
    if state != "TASK_STATE_COMPLETED":
        return f"task {task.get('id')} ended {state}: {task.get('status')}"
    if task.get("contextId") != sent.context_id:
        return f"context {task.get('contextId')} instead of {sent.context_id}"
    if reply_text(task) != expected_reply:
        return f"reply {reply_text(task)!r} instead of {expected_reply!r}"
    return None


def expected(sent: Sent, turn: int = 1) -> str:
    if sent.path == "/":
        return f"[echo] You said: {sent.text}"
    return "first answer" if turn == 1 else "second answer"


async def send_all(base: str, batch: list[Sent], *, turn: int = 1, budget: float | None = None) -> float:
    """Send every message of ``batch`` from CONCURRENCY workers; returns the seconds it took."""
    queue = iter(batch)
    deadline = time.monotonic() + (budget if budget is not None else 30 + len(batch) / 5)  # 5 req/s at worst
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(timeout=30, limits=limits, headers=HEADERS) as http:

        async def worker() -> None:
            for sent in queue:
                if time.monotonic() > deadline:
                    sent.problem = "not sent: out of time"
                    continue
                try:
                    response = await http.post(base + sent.path, json=send_message(sent.text, sent.context_id))
                    if response.status_code != 200:
                        sent.problem = f"HTTP {response.status_code}: {response.text[:200]}"
                    else:
                        sent.problem = judge(sent, response.json(), expected(sent, turn))
                except (httpx.HTTPError, ValueError) as exc:
                    sent.problem = f"{type(exc).__name__}: {exc}"

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return time.monotonic() - start


async def get_task(base: str, path: str, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30, headers=HEADERS) as http:
        answer = (await http.post(base + path, json=rpc("GetTask", {"id": task_id}))).json()
    assert "result" in answer, answer
    task: dict[str, Any] = answer["result"]
    return task


def failures(batch: list[Sent]) -> list[str]:
    return [f"{s.path} {s.text!r}: {s.problem}" for s in batch if s.problem is not None]


# -- the test -----------------------------------------------------------------------------


def test_load_completes_every_task_keeps_histories_apart_and_memory_flat(server: ServerProcess) -> None:
    base = server.url
    warmup = [Sent("/", f"warm-up {i} {uuid.uuid4().hex[:8]}") for i in range(WARMUP)]
    asyncio.run(send_all(base, warmup))
    assert not failures(warmup), failures(warmup)[:10]
    rss_warm = server.rss_mib()

    # The load: echo messages, with SAMPLE first messages to the scripted agent spread through it.
    load = [Sent("/", f"load {i} {uuid.uuid4().hex[:8]}") for i in range(LOAD - SAMPLE)]
    scripted = [Sent("/agents/twice/", f"twice {i} {uuid.uuid4().hex[:8]}") for i in range(SAMPLE)]
    step = len(load) // SAMPLE
    for i, sent in enumerate(scripted):
        load.insert(i * (step + 1), sent)
    seconds = asyncio.run(send_all(base, load))
    rss_after = server.rss_mib()
    print(
        f"\n{LOAD} SendMessage at concurrency {CONCURRENCY} in {seconds:.1f} s ({LOAD / seconds:.1f} req/s); "
        f"server RSS {rss_warm:.1f} MiB after {WARMUP} warm-up requests, {rss_after:.1f} MiB after the load "
        f"(+{rss_after - rss_warm:.1f} MiB, bound {RSS_BOUND_MIB:.1f} MiB)"
    )
    bad = failures(load)
    assert not bad, f"{len(bad)} of {LOAD} requests failed, e.g.:\n" + "\n".join(bad[:10])
    assert len({s.task["id"] for s in load}) == LOAD, "two requests were answered with the same task"

    # Each conversation keeps its own history: a second message in SAMPLE echo contexts and in
    # the SAMPLE scripted ones, all at once.
    firsts = [s for s in load if s.path == "/"][:: (LOAD - SAMPLE) // SAMPLE][:SAMPLE] + scripted
    follow_ups = [Sent(s.path, f"again {i} {uuid.uuid4().hex[:8]}", s.context_id) for i, s in enumerate(firsts)]
    asyncio.run(send_all(base, follow_ups, turn=2, budget=60))
    assert not failures(follow_ups), failures(follow_ups)
    for first, second in zip(firsts, follow_ups, strict=True):
        assert second.task["id"] != first.task["id"]
        before, after = (asyncio.run(get_task(base, s.path, s.task["id"])) for s in (first, second))
        assert before["contextId"] == after["contextId"] == first.context_id
        assert before["status"]["state"] == after["status"]["state"] == "TASK_STATE_COMPLETED"
        assert reply_text(before) == expected(first, 1) and reply_text(after) == expected(second, 2)
        assert user_texts(before) == [first.text] and user_texts(after) == [second.text]

    assert "database is locked" not in server.output()
    assert server.proc.poll() is None, f"the server died:\n{server.output()}"
    assert rss_after - rss_warm <= RSS_BOUND_MIB, (
        f"server memory grew by {rss_after - rss_warm:.1f} MiB over the load ({rss_warm:.1f} -> {rss_after:.1f} MiB)"
    )
