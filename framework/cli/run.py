"""``ca run AGENT [PROMPT]``: one turn of a conversation, streamed to the terminal (or as JSON lines).

Exit codes: 0 completed, 1 failed, 2 invalid project or usage, 3 paused waiting for a
decision (non-interactive), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from framework.errors import UsageError
from framework.runtime.events import (
    Paused,
    PlanUpdate,
    RunEvent,
    RunFinished,
    StepUpdate,
    TextChunk,
    ToolCallFinished,
    ToolCallStarted,
    UsageUpdate,
    event_to_json,
)

EXIT_OK, EXIT_FAILED, EXIT_PAUSED = 0, 1, 3
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass
class RunOptions:
    project: Path
    agent: str
    prompt: str | None
    session: str | None
    skill: str | None
    as_json: bool


def read_prompt(prompt: str | None, stdin: TextIO = sys.stdin) -> str:
    """The prompt argument, or all of stdin when none was given."""
    if prompt is not None:
        return prompt
    if stdin.isatty():
        sys.stderr.write("Type your message, then Ctrl-D:\n")
    text = stdin.read()
    if not text.strip():
        raise UsageError("no prompt: pass one as an argument or on standard input")
    return text


class TerminalView:
    """Human output: reply on stdout, activity on stderr, a spinner while waiting."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out, self.err = out, err
        self.interactive = err.isatty()
        self.spinning: asyncio.Task[None] | None = None
        self.wrote_text = False

    def start_waiting(self) -> None:
        if self.interactive and self.spinning is None:
            self.spinning = asyncio.ensure_future(self._spin())

    def stop_waiting(self) -> None:
        if self.spinning is not None:
            self.spinning.cancel()
            self.spinning = None
            self.err.write("\r\033[K")
            self.err.flush()

    async def _spin(self) -> None:
        i = 0
        while True:
            self.err.write(f"\r{SPINNER[i % len(SPINNER)]} working…")
            self.err.flush()
            i += 1
            await asyncio.sleep(0.1)

    def show(self, event: RunEvent) -> None:
        self.stop_waiting()
        if isinstance(event, TextChunk):
            if event.source:
                return  # a nested agent's words; its result shows up as a tool result or step
            self.out.write(event.text)
            self.out.flush()
            self.wrote_text = True
            return
        if isinstance(event, ToolCallStarted):
            self._line(f"→ {_who(event.source)}{event.tool} {json.dumps(event.args, ensure_ascii=False)}")
        elif isinstance(event, ToolCallFinished):
            mark = "✗" if event.is_error else "←"
            self._line(f"{mark} {_who(event.source)}{event.tool}: {_preview(event.result)}")
        elif isinstance(event, StepUpdate):
            self._line(
                f"▸ {_who(event.source)}step {event.step} {event.status}" + (f" ({event.title})" if event.title else "")
            )
        elif isinstance(event, PlanUpdate) and not event.source:
            self._line("plan: " + " → ".join(e.step for e in event.entries))
        elif isinstance(event, Paused):
            self._line(f"⏸ paused: {event.payload.get('message', event.payload)}")
        elif isinstance(event, UsageUpdate):
            return
        if not isinstance(event, RunFinished):
            self.start_waiting()

    def _line(self, text: str) -> None:
        if self.wrote_text:
            self.out.write("\n")
            self.out.flush()
            self.wrote_text = False
        self.err.write(text + "\n")
        self.err.flush()

    def finish(self, event: RunFinished, session: str) -> None:
        self.stop_waiting()
        if self.wrote_text:
            self.out.write("\n")
        elif event.state == "completed" and event.output:
            self.out.write(event.output + "\n")
        self.out.flush()
        usage = event.usage
        summary = (
            f"[{event.state}] {usage.total_tokens} tokens ({usage.input_tokens} in, {usage.output_tokens} out), "
            f"{_count(usage.model_calls, 'model call')}, {_count(usage.tool_calls, 'tool call')} · session {session}"
        )
        if event.state == "failed":
            self.err.write(f"error: {event.error}\n")
        self.err.write(summary + "\n")
        self.err.flush()


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _who(source: tuple[str, ...]) -> str:
    return f"[{'/'.join(source)}] " if source else ""


def _preview(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def ask_gate(payload: dict[str, Any]) -> dict[str, Any] | None:
    """Ask the person at the terminal; None when there is no terminal to ask."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    sys.stderr.write(f"\n{payload.get('message', 'Continue?')}\napprove? [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes"):
        return {"approved": True, "reason": None}
    sys.stderr.write("reason (optional): ")
    sys.stderr.flush()
    return {"approved": False, "reason": sys.stdin.readline().strip() or None}


async def run_command(options: RunOptions) -> int:
    """Load, compile, run one turn (answering gates at a terminal), print; the exit code."""
    from framework.compiler.bundle import build_bundle
    from framework.runtime.runner import Runner
    from framework.runtime.stores import open_checkpointer
    from framework.spec import load_project

    project = load_project(options.project)
    text = read_prompt(options.prompt)
    session = options.session or uuid.uuid4().hex[:12]
    view = TerminalView(sys.stdout, sys.stderr)
    async with open_checkpointer(project.root) as saver:
        bundle = build_bundle(project, checkpointer=saver)
        bundle.agent(options.agent)  # unknown agent: a clear error before anything runs
        runner = Runner(bundle)
        resume: Any = None
        while True:
            view.start_waiting() if not options.as_json else None
            finished: RunFinished | None = None
            pauses: list[Paused] = []
            stream = runner.run(options.agent, text, thread_id=session, skill=options.skill, resume=resume)
            async for event in stream:
                if options.as_json:
                    print(json.dumps(event_to_json(event), ensure_ascii=False), flush=True)
                if isinstance(event, RunFinished):
                    finished = event
                    continue
                if isinstance(event, Paused):
                    pauses.append(event)
                if not options.as_json:
                    view.show(event)
            assert finished is not None
            if finished.state == "input-required" and pauses and not options.as_json:
                decision = ask_gate(pauses[-1].payload)
                if decision is not None:
                    resume = decision
                    continue
                view.finish(finished, session)
                sys.stderr.write(f"waiting for a decision; no terminal to ask (session {session})\n")
                return EXIT_PAUSED
            if not options.as_json:
                view.finish(finished, session)
            return {"completed": EXIT_OK, "input-required": EXIT_PAUSED}.get(finished.state, EXIT_FAILED)
