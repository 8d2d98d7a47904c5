"""``ca run AGENT [PROMPT]``: one turn of a conversation, streamed to the terminal (or as JSON lines).

Exit codes (:func:`exit_code`, by how the run ended): 0 completed, 1 failed or rejected (whatever
the failure's kind: ``--json`` gives it in the finished event), 3 paused waiting for a decision
(non-interactive), 4 stopped by a budget (``on_exceed: stop``), 130 interrupted; errors before a run starts exit with their class's
``exit_code`` (2 for an invalid project or usage).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from framework.cli import terminal
from framework.errors import AgentNotFound, Cancelled, Failure, RunError, UsageError
from framework.runtime.events import (
    ArtifactOut,
    Paused,
    PlanUpdate,
    RunEvent,
    RunFinished,
    RunState,
    StepUpdate,
    TextChunk,
    ToolCallFinished,
    ToolCallStarted,
    Usage,
    UsageUpdate,
    event_to_json,
)
from framework.runtime.pauses import Pause, Question, ToolApproval, all_questions

EXIT_CODES: dict[RunState, int] = {"completed": 0, "failed": 1, "rejected": 1, "input-required": 3, "canceled": 130}
"""The exit code of ``ca run`` and ``ca approve`` for each way a run ends."""
BUDGET_STOPPED = 4
"""The exit code of a run a budget stopped (``on_exceed: stop``): it completed, with what it had so far."""
BUDGET_STOPS = frozenset({"max_tokens", "max_turn_requests"})
"""The stop reasons of a turn a budget ended."""


def exit_code(finished: RunFinished) -> int:
    """How ``ca run`` exits for a run's end: :data:`EXIT_CODES`, or :data:`BUDGET_STOPPED`."""
    if finished.state == "completed" and finished.stop_reason in BUDGET_STOPS:
        return BUDGET_STOPPED
    return EXIT_CODES[finished.state]


def label(finished: RunFinished) -> str:
    """The summary line's first word: the run's state, or ``stopped by budget`` for a budget stop."""
    if finished.state == "completed" and finished.stop_reason in BUDGET_STOPS:
        return f"stopped by budget: {finished.stop_reason}"
    return finished.state


INTERRUPTED_AT_PROMPT = 130
"""The exit code when Ctrl-C answers a prompt: the task stays waiting, to be decided with ``ca approve``."""
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


@dataclass
class RunOptions:
    project: Path
    agent: str | None
    """None: the project's default agent."""
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
        self.usage = Usage()
        """The run's usage so far (for the finished event of an interrupted run)."""

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
            ended = " — stopped at its max, its until never held" if event.ended_by == "max" else ""
            self._line(
                f"▸ {_who(event.source)}step {event.step} {event.status}"
                + (f" ({event.title})" if event.title else "")
                + ended
            )
        elif isinstance(event, PlanUpdate) and not event.source:
            self._line("plan: " + " → ".join(e.step for e in event.entries))
        elif isinstance(event, ArtifactOut):
            self._line(f"▣ {_who(event.source)}artifact {event.name}: {'; '.join(map(_describe_part, event.parts))}")
        elif isinstance(event, Paused):
            self._line(f"⏸ paused: {event.pause.message or event.payload}")
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
            f"[{label(event)}] {usage.total_tokens} tokens ({usage.input_tokens} in, {usage.output_tokens} out), "
            f"{_count(usage.model_calls, 'model call')}, {_count(usage.tool_calls, 'tool call')} · session {session}"
        )
        if event.state in ("failed", "rejected"):
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


def _describe_part(part: dict[str, Any]) -> str:
    if "text" in part:
        return _preview(str(part["text"]), 80)
    if "data" in part:
        return _preview(json.dumps(part["data"], ensure_ascii=False), 80)
    file = part.get("file") or {}
    where = file.get("url") or f"{len(str(file.get('content', '')).encode())} bytes"
    return f"file {file.get('name') or '(unnamed)'} ({file.get('media_type') or 'no type'}, {where})"


def ask(pause: Pause) -> dict[str, Any] | None:
    """Ask the person at the terminal about a pause; None when there is no terminal to ask.

    Tool approvals offer approve / reject (with a reason the model sees) / edit the
    arguments / always allow this tool in the conversation; gates and budget
    extensions offer approve / reject; a workflow's ask step takes a line of text.
    """
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    err = sys.stderr
    err.write(f"\n{pause.message or 'Continue?'}\n")
    if isinstance(pause, Question):
        err.write("your answer: ")
        err.flush()
        typed = terminal.line()
        return {"decision": "answer", "text": typed.rstrip("\n")} if typed else None
    full = isinstance(pause, ToolApproval)
    if isinstance(pause, ToolApproval) and pause.reason:
        err.write(f"  ({pause.reason})\n")
    choices = "[a]pprove, [r]eject, [e]dit arguments, a[l]ways allow" if full else "[a]pprove, [r]eject"
    while True:
        err.write(f"{choices}? ")
        err.flush()
        answer = terminal.line()
        if not answer:
            return None
        key = answer.strip().lower()[:1]
        if key in ("a", "y"):
            return {"decision": "approve"}
        if key == "l" and full:
            return {"decision": "always"}
        if key in ("r", "n"):
            err.write("reason (the agent sees it): ")
            err.flush()
            return {"decision": "reject", "reason": terminal.line().strip() or None}
        if key == "e" and isinstance(pause, ToolApproval):
            err.write(f"new arguments as JSON [{json.dumps(dict(pause.args))}]: ")
            err.flush()
            text = terminal.line().strip()
            try:
                args = json.loads(text) if text else dict(pause.args)
            except json.JSONDecodeError as exc:
                err.write(f"not JSON ({exc.msg}); try again\n")
                continue
            if isinstance(args, dict):
                return {"decision": "edit", "args": args}
            err.write("the arguments must be a JSON object; try again\n")


class CliTurn:
    """The CLI's view of a turn (:class:`framework.runtime.turn.TurnView`): events printed — JSON
    lines with ``--json``, else the terminal view — and pauses asked at the terminal, if there is one."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.interrupted = False
        """Ctrl-C answered the prompt: the turn ended with the task still waiting."""
        self.view = TerminalView(sys.stdout, sys.stderr)
        if not as_json:
            self.view.start_waiting()

    async def show(self, event: RunEvent) -> None:
        if isinstance(event, UsageUpdate):
            self.view.usage = event.usage
        if self.as_json:
            print(json.dumps(event_to_json(event), ensure_ascii=False), flush=True)
        elif not isinstance(event, RunFinished):
            self.view.show(event)

    async def decide(self, finished: RunFinished, pauses: list[Paused]) -> dict[str, Any] | None:
        if self.as_json:
            return None
        self.view.stop_waiting()
        try:
            with terminal.ctrl_c_interrupts_reads():
                decision = ask(pauses[-1].pause)
        except KeyboardInterrupt:
            # Nothing was decided: the task stays input-required (recorded when the run paused).
            sys.stderr.write("\n")
            self.interrupted = True
            return None
        if decision is not None:
            self.view.start_waiting()
        return decision


async def drive(runtime: Any, events: Any, *, as_json: bool, session: str, task_id: str) -> int:
    """Show a task's events, answering pauses at the terminal until it ends or no one can answer.

    Interrupted (Ctrl-C) while it runs, the task is recorded canceled and ``--json`` ends with its
    finished event; Ctrl-C at a prompt leaves the task waiting (exit 130) for ``ca approve``.
    """
    from framework.runtime.turn import drive_turn

    turn = CliTurn(as_json)
    view = turn.view
    try:
        finished, pauses = await drive_turn(runtime, events, turn)
    except asyncio.CancelledError:
        view.stop_waiting()
        elsewhere = runtime.watch.reason(task_id)  # `ca tasks cancel` from another terminal, not Ctrl-C
        await runtime.amark_canceled(task_id, elsewhere or "")
        if as_json:
            why = elsewhere or "interrupted by the user (Ctrl-C)"
            stopped = RunFinished.failed(Failure.of(Cancelled(why)), view.usage)
            print(json.dumps(event_to_json(replace(stopped, task_id=task_id)), ensure_ascii=False), flush=True)
        if elsewhere is None:
            raise
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()  # handled: this process goes on to exit with the code of a canceled run
        sys.stderr.write(f"task {task_id[:12]} was {elsewhere}\n")
        return INTERRUPTED_AT_PROMPT
    if not as_json:
        view.finish(finished, session)
    if finished.state == "input-required":
        short = finished.task_id[:12]
        if all_questions([p.pause for p in pauses]):
            sys.stderr.write(f"task {short} is waiting for an answer: ca approve {short} --answer TEXT\n")
        else:
            sys.stderr.write(f"task {short} is waiting for a decision: ca approve {short} [--reject --reason TEXT]\n")
    return INTERRUPTED_AT_PROMPT if turn.interrupted else exit_code(finished)


async def run_command(options: RunOptions) -> int:
    """Load, compile, run one turn (answering pauses at a terminal), print; the exit code."""
    from contextlib import AsyncExitStack

    from framework.runtime.heap import starting_up

    async with AsyncExitStack() as stack:
        with starting_up():
            from framework.protocols.a2a import open_remote
            from framework.protocols.mcp import open_mcp
            from framework.runtime.runtime import Runtime
            from framework.spec import load_project

            project = load_project(options.project)
            agent = options.agent or project.default_agent
            if agent is None:  # pragma: no cover - a project without agents does not load
                raise UsageError("name the agent to run (see `ca agents list`)")
            if agent not in project.agents:  # before stdin is read: the one argument may be the prompt
                raise AgentNotFound.among(agent, project.agents, _as_prompt(options, project))
            text = read_prompt(options.prompt)
            session = options.session or uuid.uuid4().hex[:12]
            runtime = await Runtime.open(project, stack=stack, remote=open_remote, mcp=open_mcp)
            runtime.bundle.agent(agent)  # unknown agent or skill: a clear error (exit 2) before anything runs
            if options.skill is not None:
                runtime.bundle.check_skill(agent, options.skill)
        task_id = uuid.uuid4().hex
        events = runtime.send(agent, text, conversation=session, skill=options.skill, task_id=task_id)
        return await drive(runtime, events, as_json=options.as_json, session=session, task_id=task_id)


def _as_prompt(options: RunOptions, project: Any) -> str:
    """How to send the one argument given as the prompt (`ca run "hello there"` took it for the
    agent's name), or '' when a prompt argument came too."""
    if options.prompt is not None or options.agent is None:
        return ""
    agent = project.default_agent or "AGENT"
    return (
        f"; to send {options.agent!r} as the prompt, name the agent first: ca run {agent} {shlex.quote(options.agent)}"
    )


async def approve_command(project_dir: Path, task_id: str, decision: dict[str, Any], as_json: bool) -> int:
    """``ca approve``: answer a paused task from any process and run it on from there."""
    from contextlib import AsyncExitStack

    from framework.protocols.a2a import open_remote
    from framework.protocols.mcp import open_mcp
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    project = load_project(project_dir)
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(project, stack=stack, remote=open_remote, mcp=open_mcp)
        try:
            task = await runtime.tasks.aget(task_id)
        except RunError as exc:  # unknown or ambiguous: the argument is to change (exit 2, as `ca tasks cancel`)
            raise UsageError(str(exc)) from exc
        events = runtime.decide(task.id, decision)
        return await drive(runtime, events, as_json=as_json, session=task.conversation, task_id=task.id)
