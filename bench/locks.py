"""What `ca serve` answers while another process holds the project's SQLite write lock.

    python bench/locks.py [--hold 5] [--probes 40]

One `ca serve` on a new project (one offline agent) on a free loopback port. After a warm-up
message, a helper process takes ``BEGIN IMMEDIATE`` on every database under ``.ca/`` (tasks,
audit, conversations, A2A tasks) for --hold seconds. Meanwhile one SendMessage is sent and
``/healthz`` is probed --probes times, evenly over the hold. Printed: the probes' median and
maximum latency (goal: max < 100 ms), and how long the SendMessage took against the hold
(it waits for the lock, then completes).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
DATABASES = ("tasks.db", "audit.db", "conversations.db", "state.db")
HOLDER = """
import sqlite3, sys, time
conns = [sqlite3.connect(p, isolation_level=None) for p in sys.argv[2:]]
for conn in conns:
    conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[1]))
for conn in conns:
    conn.execute("COMMIT")
"""


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _send(client: httpx.Client, url: str, text: str) -> dict[str, object]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
    body["params"] = {"message": {"messageId": os.urandom(8).hex(), "role": "ROLE_USER", "parts": [{"text": text}]}}
    answer: dict[str, object] = client.post(url, json=body, headers={"A2A-Version": "1.0"}).json()
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hold", type=float, default=5.0)
    parser.add_argument("--probes", type=int, default=40)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ca-bench-locks-"))
    (root / "agents").mkdir()
    (root / "agents" / "echo.yaml").write_text("name: echo\nprofile: autonomous\n")
    port = _port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "framework", "serve", "--port", str(port)],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/agents/echo/"
    try:
        with httpx.Client(timeout=120) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get(base + "/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
            _send(client, url, "warm up")
            paths = [str(root / ".ca" / name) for name in DATABASES]
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, str(args.hold), *paths], stdout=subprocess.PIPE, text=True
            )
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            held = time.monotonic()
            sent: dict[str, object] = {}

            def send() -> None:
                started = time.monotonic()
                with httpx.Client(timeout=120) as own:
                    sent["answer"] = _send(own, url, "during the hold")
                sent["took"] = time.monotonic() - started

            sender = threading.Thread(target=send)
            sender.start()
            probes = []
            for _ in range(args.probes):
                started = time.monotonic()
                client.get(base + "/healthz")
                probes.append(time.monotonic() - started)
                time.sleep(max(0.0, args.hold / args.probes - probes[-1]))
            holder.wait(timeout=60)
            released = time.monotonic() - held
            sender.join(timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=30)
    answer = sent.get("answer")
    result = answer.get("result") if isinstance(answer, dict) else None
    state = result["task"]["status"]["state"] if isinstance(result, dict) else json.dumps(answer)
    print(f"lock held {released:.2f} s on {', '.join(DATABASES)}")
    print(
        f"/healthz during the hold: {len(probes)} probes, median {statistics.median(probes) * 1000:.1f} ms,"
        f" max {max(probes) * 1000:.1f} ms (goal < 100 ms)"
    )
    print(f"SendMessage sent during the hold: {state} after {float(str(sent.get('took', 0))):.2f} s")


if __name__ == "__main__":
    main()
