"""Run one eval case: a scratch copy of the project, its conversation, its pauses answered.

Everything a case is judged on comes from the two ways a run is observed anyway: the run
events of every turn (:mod:`framework.runtime.events`, through :func:`drive_turn`) and the
audit of the scratch project (:class:`framework.runtime.audit.AuditLog`). Each case has its own
copy of the project and so its own ``.ca/`` state: no case sees another's files, tasks or
conversations. The scratch copy is removed afterwards unless asked to keep it.

A case runs with the scratch copy as the working directory (python tools open relative paths
there), so a process runs one case at a time: ``ca test`` runs cases in parallel in worker
processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from framework.compiler.cassette import Cassette, Mode
from framework.errors import CAError
from framework.runtime.audit import AuditRecord
from framework.runtime.events import Paused, RunEvent, RunFinished, Usage
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.pauses import BudgetExtension, Gate, Question, ToolApproval
from framework.runtime.remote import RemoteFactory
from framework.spec.agent import LlmAgent
from framework.spec.eval_loader import EvalSuite
from framework.spec.evals import Answer, EvalCase
from framework.spec.project import Project, StoreConfig

NOT_COPIED = (
    ".ca",
    ".git",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".tox",
)
"""Folders never copied into a case's scratch project (state, VCS, environments, caches)."""
CASSETTES_DIR = "cassettes"

RunMode = Literal["replay", "record"]


@dataclass(frozen=True)
class Verdict:
    """What the judge model said of one criterion: ``passed`` None when its answer was no verdict."""

    criterion: str
    passed: bool | None
    reason: str


@dataclass
class CaseRun:
    """What happened in one case: every event of every turn, the audit, what it cost."""

    suite: EvalSuite
    case: EvalCase
    events: list[RunEvent] = field(default_factory=list)
    finished: list[RunFinished] = field(default_factory=list)
    """The end of each run (a resumed task ends again), in order."""
    audit: list[AuditRecord] = field(default_factory=list)
    answered: list[dict[str, Any]] = field(default_factory=list)
    """The decisions taken from the eval file, in order."""
    cost_usd: Decimal = Decimal(0)
    seconds: float = 0.0
    error: str = ""
    """Why the case could not run to its end (a timeout, a project error), or ''."""
    mismatch: str | None = None
    """The cassette's first difference, when a replayed request missed it."""
    recorded: bool = False
    scratch: Path | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    """The judge model's verdict on each ``expect.judged`` criterion, in order."""

    @property
    def id(self) -> str:
        return f"{self.suite.name}::{self.case.name}"

    @property
    def last(self) -> RunFinished | None:
        return self.finished[-1] if self.finished else None

    @property
    def usage(self) -> Usage:
        """Usage summed over the case's tasks (a resumed task's last end holds its whole usage)."""
        by_task: dict[str, Usage] = {}
        for end in self.finished:
            by_task[end.task_id] = end.usage
        total = Usage()
        for usage in by_task.values():
            total = total + usage
        return total


SCRATCH_ENV = "CA_TEST_TMPDIR"


def scratch_base() -> str | None:
    """Where scratch copies go: ``$CA_TEST_TMPDIR``, else ``/dev/shm`` (memory: a case's SQLite
    state costs no disk syncs) when it is a writable folder, else the system's temporary folder."""
    chosen = os.environ.get(SCRATCH_ENV)
    if chosen:
        return chosen
    shm = Path("/dev/shm")  # noqa: S108 - mkdtemp makes a private (0700), unguessable folder there
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def cassette_path(suite: EvalSuite, case: EvalCase) -> Path:
    """``evals/cassettes/<file>/<case>.yaml``, beside the eval file."""
    return suite.path.parent / CASSETTES_DIR / suite.name / f"{case.name}.yaml"


class _Answers:
    """The eval file's answers to pauses: in order (a list), or by tool / step / 'budget' / '*'."""

    def __init__(self, approvals: Sequence[Answer] | Mapping[str, Answer]) -> None:
        self.queue = list(approvals) if isinstance(approvals, Sequence) else None
        self.by_key = dict(approvals) if isinstance(approvals, Mapping) else {}

    def pick(self, pause: Any) -> Answer | None:
        if self.queue is not None:
            return self.queue.pop(0) if self.queue else None
        if isinstance(pause, ToolApproval):
            key = pause.tool
        elif isinstance(pause, Gate | Question):
            key = pause.step
        elif isinstance(pause, BudgetExtension):
            key = "budget"
        else:
            key = ""
        for pattern, answer in self.by_key.items():
            if pattern != "*" and fnmatch.fnmatchcase(key, pattern):
                return answer
        return self.by_key.get("*")


class _CaseView:
    """The turn view of a case (:class:`framework.runtime.turn.TurnView`): keeps every event and
    answers pauses from the eval file; no answer leaves the task waiting."""

    def __init__(self, run: CaseRun, answers: _Answers) -> None:
        self.run = run
        self.answers = answers

    async def show(self, event: RunEvent) -> None:
        self.run.events.append(event)
        if isinstance(event, RunFinished):
            self.run.finished.append(event)

    async def decide(self, finished: RunFinished, pauses: list[Paused]) -> Mapping[str, Any] | None:
        answer = self.answers.pick(pauses[0].pause)
        if answer is None:
            return None
        decision = answer.to_decision()
        self.run.answered.append(decision)
        return decision


def scratch_copy(root: Path, exclude: Sequence[str], into: Path) -> Path:
    """A copy of the project at ``root`` under ``into`` (without state, VCS, caches, evals or ``exclude``;
    nor the scratch folder ``into`` is in, when that lies inside the project: ``CA_TEST_TMPDIR`` there)."""
    target = into / "project"
    real_root, scratch = root.resolve(), into.resolve()
    inside = scratch.relative_to(real_root).parts[0] if scratch.is_relative_to(real_root) else None

    def ignored(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).relative_to(root)
        out = {n for n in names if n in NOT_COPIED}
        if here == Path():
            out.add("evals")
            if inside is not None:  # the entry that leads to the scratch: the copy would hold itself, without end
                out.add(inside)
        for name in names:
            rel = (here / name).as_posix()
            if any(fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel + "/", pattern) for pattern in exclude):
                out.add(name)
        return out

    shutil.copytree(root, target, ignore=ignored, symlinks=True)
    return target


def _case_project(project: Project, case: EvalCase, root: Path) -> Project:
    """The project as the case runs it: rooted in its scratch copy, the case's model put in, its
    state in the scratch copy's ``.ca/`` even when ``store.url`` names a shared database (a case
    leaves nothing behind in the deployment's conversations and audit)."""
    agents = dict(project.agents)
    name = case.agent or project.default_agent or ""
    spec = agents.get(name)
    if case.model is not None and isinstance(spec, LlmAgent):
        agents[name] = spec.model_copy(update={"model": case.model})
    store = project.config.store.model_copy(update={"url": StoreConfig.model_fields["url"].default})
    config = project.config.model_copy(update={"store": store})
    return dataclasses.replace(project, root=root, agents=agents, config=config)


async def run_case(
    project: Project,
    suite: EvalSuite,
    case: EvalCase,
    *,
    mode: RunMode = "replay",
    remote: RemoteFactory | None = None,
    keep: bool = False,
    scratch_in: Path | str | None = None,
) -> CaseRun:
    """Run ``case`` in a fresh scratch copy of ``project``; what happened (never raises for the case's own failures).

    The working directory is the scratch copy while the case runs: one case at a time per process.
    The copy is made in ``scratch_in`` (default: :func:`scratch_base`) and removed afterwards
    unless ``keep``.
    """
    from framework.runtime.runtime import Runtime
    from framework.runtime.turn import drive_turn

    run = CaseRun(suite, case)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix=f"ca-test-{case.name}-", dir=scratch_in or scratch_base()))
    cassette_mode: Mode = mode
    cassette: Cassette | None = None
    home = Path.cwd()
    try:
        cassette = Cassette(cassette_path(suite, case), cassette_mode, mask=KNOWN.value)
        root = await asyncio.to_thread(scratch_copy, project.root, suite.spec.exclude, scratch)
        for rel, content in case.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content, encoding="utf-8")
        os.chdir(root)
        scoped = _case_project(project, case, root)
        agent = case.agent or scoped.default_agent or ""
        conversation = f"eval-{case.name}-{uuid.uuid4().hex[:8]}"
        view = _CaseView(run, _Answers(case.approvals))
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(
                scoped, stack=stack, remote=remote, model_hook=cassette.hook, tool_hook=cassette.tool_hook
            )
            try:
                async with asyncio.timeout(case.timeout):
                    for text in case.messages:
                        events = runtime.send(agent, text, conversation=conversation, task_id=uuid.uuid4().hex)
                        finished, _ = await drive_turn(runtime, events, view)
                        if finished.state == "input-required":
                            break
            except TimeoutError:
                run.error = f"the case ran longer than its timeout ({case.timeout:g}s)"
            run.audit = await runtime.audit.aquery(conversation_id=conversation, limit=100_000)
            run.cost_usd = await _cost(runtime, agent, conversation)
        if case.expect.judged and run.last is not None and not run.error:
            run.verdicts = await _judge(scoped, case, run.last.output, cassette)
    except CAError as exc:
        run.error = KNOWN.text(str(exc))
    finally:
        os.chdir(home)
        run.seconds = time.monotonic() - started
        if cassette is not None:
            run.mismatch = cassette.mismatch
            if mode == "record" and not run.error:
                run.recorded = cassette.save()
        if keep:
            run.scratch = scratch / "project"
        else:
            shutil.rmtree(scratch, ignore_errors=True)  # not awaited: a cancelled case still removes it
    return run


JUDGE = "ca-test-judge"
"""The judge model's name in cassettes."""
JUDGE_PROMPT = (
    "You judge the answer of an AI agent against one criterion. Reply with only a JSON object: "
    '{"pass": true or false, "reason": "one sentence saying why"}.'
)


async def _judge(project: Project, case: EvalCase, output: str, cassette: Cassette) -> list[Verdict]:
    """Ask the project's judge model about each criterion (through the cassette: recorded, replayed)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    from framework.compiler.model_http import loop_clients
    from framework.compiler.models import build_model
    from framework.spec.interpolate import load_dotenv

    config = project.config.evals.judge
    environ = {**load_dotenv(project.root), **os.environ}
    model = build_model(config, agent=JUDGE, environ=environ, hook=cassette.hook)
    asked = "\n\n".join(case.messages)
    verdicts = []
    async with loop_clients():  # the judge runs after the case's runtime closed
        for criterion in case.expect.judged:
            question = f"Criterion: {criterion}\n\nThe user said:\n{asked}\n\nThe agent answered:\n{output}"
            reply = await model.ainvoke([SystemMessage(JUDGE_PROMPT), HumanMessage(question)])
            verdicts.append(read_verdict(criterion, str(reply.text)))
    return verdicts


def read_verdict(criterion: str, text: str) -> Verdict:
    """The verdict in a judge's reply: the JSON object it holds, ``{"pass": bool, "reason": str}``."""
    start, end = text.find("{"), text.rfind("}")
    try:
        data = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("pass"), bool):
        return Verdict(criterion, None, f"the judge gave no verdict: {' '.join(text.split())[:200]!r}")
    return Verdict(criterion, data["pass"], str(data.get("reason", "")))


async def _cost(runtime: Any, agent: str, conversation: str) -> Decimal:
    """The conversation's cost in US dollars, as governance accounted it in the graph's state."""
    try:
        graph = await runtime.bundle.agraph(agent)
        state = await graph.aget_state({"configurable": {"thread_id": conversation}})
    except CAError:
        return Decimal(0)
    usage = (state.values or {}).get("ca_usage") or {}
    return Decimal(str(usage.get("cost_usd", 0) or 0))
