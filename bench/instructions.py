"""What one request costs `ca serve`, counted in instructions: the same on a quiet or a busy machine.

    python bench/instructions.py [--requests 150] [--concurrency 16] [--no-context | --conversations]
                                 [--against CHECKOUT] [--echo] [--floor]

CPU time per request on this machine moves by ±10 % from one run of bench/serve.py to the next (the
host's other guests), so a change worth 2 % needs many interleaved rounds to show there. valgrind's
callgrind counts the instructions the server's process executes instead: Python, SQLite and the C
extensions, not the kernel. Two runs of the same code on the same load agree to about 0.2 %.

The server starts under callgrind with counting off; after 30 warm-up requests counting is switched on
(``callgrind_control -i on``) for --requests non-streaming SendMessage at --concurrency (bench/serve.py's
load: raw JSON-RPC, each message a new context), then off again, and the total is divided by the
requests. Everything runs about 50× slower than natively: 150 requests take about a minute per server.

``--no-context``: the messages name no ``contextId`` (what a2a-sdk's clients send to start a
conversation) instead of a new one each. ``--conversations``: each of the --concurrency clients keeps
one conversation, its messages one at a time, so each turn runs on the history of the ones before
(150 requests at concurrency 16: about 10 turns per conversation; a new set of conversations for the
warm-up). ``--against CHECKOUT``: also measure the ``ca serve`` of another
checkout of this repository (e.g. ``git worktree add /tmp/base main``) under the same load, and print
the difference. ``--echo``: also count bench/serve.py's bare a2a-sdk echo with its in-memory task store
under the same load, and print how many times its instructions ``ca serve`` executes (bench/serve.py's
headline ratio, as a count that does not depend on the machine). Needs valgrind (Debian: ``apt-get
install valgrind``). ``--floor``: also count bench/serve.py's floor of the required stack (a2a-sdk
serving LangGraph's prebuilt agent on an echo model, its checkpoints committed to SQLite; no ca code)
under the same load, and print its ratio to ``ca serve`` (and to the echo, with ``--echo``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench.*
from bench import serve
from bench.servers import REPO, free_port, server_env, spawn, stop, wait_ready, write_project

WARMUP = 30
READY_TIMEOUT = 600.0  # seconds a server under valgrind may take to answer its card


def without_context(text: str, method: str = "SendMessage") -> dict[str, Any]:
    body = serve.send_body(text, method)
    del body["params"]["message"]["contextId"]
    return body


def total_instructions(profile: Path) -> int:
    """The total of a callgrind output file (one file: nothing asks for dumps). Its header's ``summary:``
    may say 0 (counting was off when the file began); the ``totals:`` at its end says what was counted."""
    text = profile.read_text(errors="replace") if profile.is_file() else ""
    return max(
        (int(line.split()[1]) for line in text.splitlines() if line.startswith(("summary:", "totals:"))), default=0
    )


def measure(checkout: Path | None, args: argparse.Namespace, work: Path, store: str = "memory") -> float:
    """Millions of instructions per request of the ``ca serve`` of ``checkout``, or (None) of
    bench/serve.py's bare server on ``store`` (``memory``: the echo; ``graph-sqlite:PATH``: the floor)."""
    project = Path(tempfile.mkdtemp(dir=work))
    write_project(project)
    port = free_port()
    profile = work / f"callgrind.{port}.out"
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={profile}"]
    if checkout is None:
        command += [sys.executable, serve.__file__, "--bare-server", str(port), "--store-url", store]
        server = spawn(f"bench/serve.py's bare server ({store})", command, REPO, port)
    else:
        command += [sys.executable, "-m", "framework", "serve", "--port", str(port)]
        env = {**server_env(), "PYTHONPATH": str(checkout)}
        server = spawn(f"ca serve of {checkout}", command, project, port, env)
    try:
        wait_ready(server, timeout=READY_TIMEOUT)
        body = without_context if args.no_context else serve.send_body
        asyncio.run(serve.run_load([server.url], WARMUP, args.concurrency, body, conversations=args.conversations))
        subprocess.run(["callgrind_control", "-i", "on", str(server.proc.pid)], check=True, capture_output=True)
        load = asyncio.run(
            serve.run_load([server.url], args.requests, args.concurrency, body, conversations=args.conversations)
        )
        subprocess.run(["callgrind_control", "-i", "off", str(server.proc.pid)], check=True, capture_output=True)
    finally:
        output = stop(server)
    if load.failures:
        sys.exit(f"{len(load.failures)} of {args.requests} requests failed, e.g. {load.failures[0]}:\n{output}")
    total = total_instructions(profile)
    if not total:
        sys.exit(f"callgrind wrote no totals to {profile}:\n{output}")
    return total / args.requests / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--concurrency", type=int, default=16)
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument("--no-context", action="store_true", help="messages name no contextId")
    shapes.add_argument("--conversations", action="store_true", help="each client keeps one conversation")
    parser.add_argument("--against", type=Path, metavar="CHECKOUT", help="another checkout to compare with")
    parser.add_argument("--echo", action="store_true", help="also count the bare a2a-sdk echo (in memory)")
    parser.add_argument(
        "--floor", action="store_true", help="also count the required stack's floor (a2a-sdk + LangGraph agent)"
    )
    args = parser.parse_args()
    if not (1 <= args.requests <= 10_000 and 1 <= args.concurrency <= 256):
        sys.exit("--requests must be 1..10000, --concurrency 1..256")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("this bench needs valgrind and its callgrind_control (Debian: apt-get install valgrind)")
    if args.against is not None and not (args.against / "framework" / "__main__.py").is_file():
        sys.exit(f"--against {args.against}: not a checkout of this repository (no framework/__main__.py)")
    shape = "no contextId" if args.no_context else "a new contextId each"
    if args.conversations:
        shape = f"one conversation per client ({args.concurrency} conversations)"
    print(f"{args.requests} SendMessage at concurrency {args.concurrency}, {shape}, after {WARMUP} warm-up requests")
    with tempfile.TemporaryDirectory() as tmp:
        here = measure(REPO, args, Path(tmp))
        print(f"{REPO}: {here:.3f} M instructions per request", flush=True)
        if args.against is not None:
            there = measure(args.against.resolve(), args, Path(tmp))
            print(f"{args.against}: {there:.3f} M instructions per request")
            print(f"this checkout: {here - there:+.3f} M ({(here / there - 1) * 100:+.1f} %)")
        if args.echo:
            echo = measure(None, args, Path(tmp))
            print(f"the bare a2a-sdk echo, in memory: {echo:.3f} M instructions per request")
            print(f"{REPO} executes {here / echo:.2f}× the echo's instructions per request")
        if args.floor:
            floor = measure(None, args, Path(tmp), f"graph-sqlite:{Path(tmp) / 'floor.db'}")
            print(f"the required stack's floor, checkpoints in SQLite: {floor:.3f} M instructions per request")
            print(f"{REPO} executes {here / floor:.2f}× the floor's instructions per request")
            if args.echo:
                print(f"the floor executes {floor / echo:.2f}× the echo's instructions per request")
    print(f"machine: load average {os.getloadavg()[0]:.2f} (does not change the counts)")


if __name__ == "__main__":
    main()
