"""What an IDE waits for when it talks to `ca run --stdio` over the Agent Client Protocol.

    python bench/acp.py [--runs 15] [--first-runs 7] [--prompts 50]

The client is raw JSON lines over pipes (no SDK), so only the agent is measured.

1. spawn → initialize answered: a new `ca run --stdio` process, `initialize` written at once,
   time until its answer is read (median of --runs; the goal of issue 6 is ≤ 150 ms).
2. spawn → first agent_message_chunk on the offline model: initialize, session/new and a
   prompt, each sent when the previous answer arrived, as an editor does (median of --first-runs).
3. per-prompt overhead in a warm session: one process, one session, the offline model (which
   answers instantly), time from writing session/prompt to reading its answer (median of --prompts).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "framework", "run", "--stdio"]
INITIALIZE = {"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}


class Agent:
    """One `ca run --stdio` process; JSON lines in and out."""

    def __init__(self, project: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "CA_MODEL": "offline"}
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            COMMAND, cwd=project, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any]) -> int:
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        self.stdin.write(line.encode() + b"\n")
        self.stdin.flush()
        return self.next_id

    def read(self) -> dict[str, Any]:
        line = self.stdout.readline()
        if not line:
            sys.exit(f"the agent exited (code {self.proc.wait()}) before answering")
        return dict(json.loads(line))

    def answer(self, request_id: int) -> dict[str, Any]:
        while True:
            message = self.read()
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    sys.exit(f"the agent answered an error: {message['error']}")
                return message

    def session(self, project: Path) -> str:
        self.answer(self.request("initialize", INITIALIZE))
        result = self.answer(self.request("session/new", {"cwd": str(project), "mcpServers": []}))["result"]
        return str(result["sessionId"])

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=60)


def prompt_params(session: str, text: str) -> dict[str, Any]:
    return {"sessionId": session, "prompt": [{"type": "text", "text": text}]}


def spawn_to_initialize(project: Path) -> float:
    agent = Agent(project)
    agent.answer(agent.request("initialize", INITIALIZE))
    elapsed = time.perf_counter() - agent.start
    agent.close()  # lets the background load finish: runs do not overlap
    return elapsed


def spawn_to_first_chunk(project: Path) -> tuple[float, float, float]:
    """(initialize answered, session/new answered, first agent_message_chunk), from spawn."""
    agent = Agent(project)
    agent.answer(agent.request("initialize", INITIALIZE))
    initialized = time.perf_counter() - agent.start
    session = str(
        agent.answer(agent.request("session/new", {"cwd": str(project), "mcpServers": []}))["result"]["sessionId"]
    )
    created = time.perf_counter() - agent.start
    request_id = agent.request("session/prompt", prompt_params(session, "hello there"))
    first = None
    while True:
        message = agent.read()
        update = (message.get("params") or {}).get("update") or {}
        if first is None and update.get("sessionUpdate") == "agent_message_chunk":
            first = time.perf_counter() - agent.start
        if message.get("id") == request_id and "method" not in message:
            break
    agent.close()
    if first is None:
        sys.exit("the prompt answered without an agent_message_chunk")
    return initialized, created, first


def prompt_round_trips(project: Path, prompts: int) -> tuple[list[float], int]:
    """Seconds per prompt in one warm session, and session/update notifications per prompt."""
    agent = Agent(project)
    session = agent.session(project)
    for _ in range(5):  # warm-up: the graph, the stores, the first queries
        agent.answer(agent.request("session/prompt", prompt_params(session, "warm up")))
    times: list[float] = []
    updates = 0
    for i in range(prompts):
        started = time.perf_counter()
        request_id = agent.request("session/prompt", prompt_params(session, f"hello number {i}"))
        while True:
            message = agent.read()
            if message.get("method") == "session/update":
                updates += 1
            elif message.get("id") == request_id:
                break
        times.append(time.perf_counter() - started)
    agent.close()
    return times, updates // prompts


def line(values: list[float], unit: str = "ms") -> str:
    scale, digits = (1000, 1) if unit == "ms" else (1, 2)
    med, low, high = (v * scale for v in (statistics.median(values), min(values), max(values)))
    return f"  median {med:.{digits}f} {unit}   min {low:.{digits}f} {unit}   max {high:.{digits}f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15, help="spawn → initialize runs (at least 10)")
    parser.add_argument("--first-runs", type=int, default=7, help="spawn → first chunk runs (at least 5)")
    parser.add_argument("--prompts", type=int, default=50, help="prompts in the warm session (at least 20)")
    args = parser.parse_args()
    if args.runs < 10 or args.first_runs < 5 or args.prompts < 20:
        parser.error("use at least --runs 10, --first-runs 5 and --prompts 20")
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run(
            [sys.executable, "-m", "framework", "init", str(project)], env=env, check=True, capture_output=True
        )
        spawn_to_first_chunk(project)  # warm the OS file cache and create .ca/ once
        initializes = [spawn_to_initialize(project) for _ in range(args.runs)]
        firsts = [spawn_to_first_chunk(project) for _ in range(args.first_runs)]
        round_trips, updates = prompt_round_trips(project, args.prompts)
    print(f"spawn → initialize answered ({args.runs} runs; goal ≤ 150 ms)")
    print(line(initializes))
    print(f"spawn → first agent_message_chunk, offline model ({args.first_runs} runs)")
    print(line([f[2] for f in firsts], "s"))
    created = statistics.median(f[1] for f in firsts)
    print(
        f"  (median: initialize {statistics.median(f[0] for f in firsts) * 1000:.0f} ms, session/new {created:.2f} s)"
    )
    print(f"per-prompt round trip in a warm session, offline model ({args.prompts} prompts, {updates} updates each)")
    print(line(round_trips))


if __name__ == "__main__":
    main()
