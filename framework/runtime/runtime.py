"""The Runtime: the task API every transport calls. It holds the current Bundle.

    send(agent, text, conversation)  -> events   a new task
    decide(task, decision)           -> events   answer a paused task (any process)
    cancel(task)                     -> Canceled end any task (paused, running here or elsewhere)

Both run in their conversation's turn (``Turns``): the messages of one conversation run one
after another, in order, never interleaved on its LangGraph thread.

Each task is recorded (``TaskStore``), its transitions and every governance decision
are audited (``AuditLog``), and a paused task keeps its pending decisions with their
expiry so ``ca approve`` in another terminal — or a server after a restart — can
answer them. The conversation itself is checkpointed by LangGraph.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from framework.compiler.agent import RunContext
from framework.compiler.bundle import Bundle
from framework.compiler.models import ModelHook
from framework.compiler.tools import ToolHook
from framework.errors import (
    ApprovalTimedOut,
    ConversationBusy,
    ConversationNotYours,
    ConversationTooLarge,
    Diagnostic,
    Failure,
    RunError,
    TaskTakenOver,
)
from framework.runtime import logs, telemetry
from framework.runtime.audit import AuditLog
from framework.runtime.cancel import Canceled, CancelWatch, cancel_task
from framework.runtime.database import Database
from framework.runtime.decisions import answers_of, check_decision, pending_of
from framework.runtime.events import Paused, RunEvent, RunFinished, Usage
from framework.runtime.fence import Fence
from framework.runtime.masked_stream import MaskedStream
from framework.runtime.metrics import Meter, Metrics
from framework.runtime.remote import RemoteFactory
from framework.runtime.resumes import why_not_resumed
from framework.runtime.runner import Runner
from framework.runtime.task_record import FINAL_STATES, Held, Task
from framework.runtime.tasks import TaskStore
from framework.runtime.turns import Turns
from framework.runtime.wiring import McpFactory, wire
from framework.spec.project import Project


class Runtime:
    """Runs tasks of one project; ``async with Runtime.open(project) as rt``."""

    def __init__(
        self,
        bundle: Bundle,
        tasks: TaskStore,
        audit: AuditLog,
        turns: Turns,
        *,
        source: str = "cli",
        meter: Meter | None = None,
    ) -> None:
        self.bundle = bundle
        self.tasks = tasks
        self.audit = audit
        self.turns = turns
        """Who runs in each conversation now; every run takes its conversation's turn first."""
        self.source = source
        self.listeners: list[Callable[[], None]] = []
        """Called after each successful reload (protocols rebuild what depends on the bundle)."""
        self.compile_project: Callable[[Project], Awaitable[Bundle]] | None = None
        self.serving: Callable[[Bundle], Awaitable[None]] | None = None
        """Told the bundle that serves after each reload (``wiring.wire``)."""
        self.abandoned: Callable[[Bundle], None] | None = None
        """Told of a bundle whose reload was cancelled (``wiring.wire``)."""
        self.settled: asyncio.Future[None] | None = None
        """The last reload's settling (``reload.apply``), to await where it matters (tests)."""
        self.profiles: dict[str, str] = {}
        """Conversation -> automation profile chosen for it (ACP session modes)."""
        self.diagnostics: list[Diagnostic] = []
        """Errors of the last reload that could not be applied (the bundle kept serving)."""
        self.started = bundle.project.config
        """The ``ca.yaml`` settings at start-up: reloads keep its settings read once (``RESTART_ONLY``)."""
        self.meter = meter or Meter()
        """Counts the model and tool calls of the agents: the one their bundle was compiled with (``wiring.wire``)."""
        self.restart_needed: list[str] = []
        """The start-up settings the files now change (``setting (before -> after)``): a restart applies them."""
        self.watch = CancelWatch(tasks)
        """The runs of this process, stopped when ``ca tasks cancel`` in another process asks."""
        self._fences: dict[str, Fence] = {}
        """The fence of each task this process runs (replicas: see :mod:`framework.runtime.fence`)."""
        self.settled_at_open: list[Task] = []
        """The tasks :meth:`open` settled as orphans (a server writes its protocol's rows of them)."""
        self.resumer: Callable[[Task, AsyncIterator[RunEvent]], None] | None = None
        """Given, an A2A server: the orphans it may resume (:meth:`settle_orphans`) are taken over and
        their runs handed to it (it drives them and writes their A2A rows)."""

    @classmethod
    async def open(
        cls,
        project: Project,
        *,
        source: str = "cli",
        stack: AsyncExitStack,
        governed: bool = True,
        base_url: str | None = None,
        remote: RemoteFactory | None = None,
        mcp: McpFactory | None = None,
        model_hook: ModelHook | None = None,
        tool_hook: ToolHook | None = None,
    ) -> Runtime:
        """Open the project's stores (closed by ``stack``) and build its bundle (``wiring.wire``).

        ``remote`` builds the client side for remote agents and registries (the protocol layer's
        A2A client); without it remote calls are refused and registries are not read. ``mcp``
        builds the MCP client side (one per runtime, its servers started on first use and
        stopped by ``stack``); without it an agent that uses an MCP server cannot run.
        ``model_hook`` wraps how each agent's model is built and ``tool_hook`` each tool (``ca test``
        records or replays through them).
        """
        wired = await wire(
            project,
            stack=stack,
            governed=governed,
            base_url=base_url,
            remote=remote,
            mcp=mcp,
            model_hook=model_hook,
            tool_hook=tool_hook,
        )
        runtime = cls(wired.bundle, wired.tasks, wired.audit, wired.turns, source=source, meter=wired.meter)
        runtime.compile_project = wired.compile_project
        runtime.serving = wired.serving
        runtime.abandoned = wired.abandoned
        runtime.settled_at_open = await runtime.settle_orphans()
        return runtime

    async def settle_orphans(self) -> list[Task]:
        """Settle the tasks left running by a process that died (a killed ``ca approve``, ``ca run`` or
        server); returns the tasks ended ``failed`` (each audited), as they are now.

        A task an A2A server was running whose run can have had no effect yet — an agent's (not a
        workflow's), never paused, no tool call started (each is audited before it runs) — is run again
        from its conversation's last checkpoint by the server that finds it (:attr:`resumer`, which this
        runtime's stores hand it to: of several replicas, one), at most :data:`~framework.runtime.resumes.RESUMES` times. Every other
        orphan ends ``failed`` with a reason that says why it was not resumed: running it again could
        repeat a tool's side effect. A runtime that is not a server leaves the resumable ones to one.
        Tasks waiting for a decision stay waiting; see :meth:`TaskStore.settle_orphans`."""
        settled = []
        for orphan in await self.tasks.aorphans():
            task = await self.tasks.afind(orphan.id)
            if task is None:
                continue
            why, asked = await why_not_resumed(task, self.bundle.project, self.audit)
            if not why:
                if self.resumer is None or (taken := await self.tasks.atake_over(orphan)) is None:
                    continue
                # Its audit again, now that it is ours: a tool call its owner (alive, but past its lease)
                # audited meanwhile was fenced after it was audited, so it is seen here or it did not run.
                why, asked = await why_not_resumed(taken, self.bundle.project, self.audit)
                if not why:
                    self.resumer(taken, self._resume(taken, asked, orphan.owner))
                    continue
                await self.tasks.agive_back_turn(taken)
                await self._failed_before_run(taken, Failure.of(RunError(orphan.reason(why))))
                settled.append(await self.tasks.aget(taken.id))
                continue
            if (ended := await self.tasks.asettle(orphan, why)) is not None:
                await self._audit_task(ended, "failed", error=ended.error, code=_code(ended))
                settled.append(ended)
        return settled

    async def _resume(self, task: Task, asked: Mapping[str, Any], owner: str) -> AsyncIterator[RunEvent]:
        """Run an orphan this process took over again, as :meth:`send` ran it, from its conversation's
        last checkpoint. A run checkpoints when it ends or pauses: a dead run that got there (and died
        before its record said so) goes on from its own checkpoint — paused again, or ended with the
        answer it had — instead of taking the message a second time (``Runner.run(again=True)``)."""
        _bind_logs(task)
        skill = asked.get("skill")
        context = dataclasses.replace(
            self._context(task, skill),
            caps=asked.get("caps") or None,
            depth=int(asked.get("depth", 0)),
            chain=tuple(asked.get("chain", ())),
        )
        async for event in self._drive(
            task,
            lambda callbacks: Runner(self.bundle).run(
                task.agent,
                task.input,
                thread_id=task.conversation,
                skill=skill,
                context=context,
                callbacks=callbacks,
                again=True,
                abandoned=lambda: self.tasks.apause_abandoned_in(task.conversation),
            ),
            taken_over=True,
            note={"resumed_from": owner},
        ):
            yield event

    @property
    def metrics(self) -> Metrics | None:
        """The server's metrics (``ca serve``'s ``/metrics``): the agents' model and tool calls feed them."""
        return self.meter.metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self.meter.metrics = metrics

    @property
    def root(self) -> Path:
        return self.bundle.project.root

    @property
    def database(self) -> Database:
        """The task database this runtime's stores share (and ACP's session rows): opened once, closed by the stack."""
        return self.tasks.db

    async def _audit_task(self, task: Task, state: str, **data: Any) -> None:
        await self.audit.aappend(
            "task.state",
            source=self.source,  # type: ignore[arg-type]  # checked by AuditLog.append
            task_id=task.id,
            conversation_id=task.conversation,
            agent=task.agent,
            data={"state": state, **data},
        )

    def _context(self, task: Task, skill: str | None, request: Mapping[str, Any] | None = None) -> RunContext:
        return RunContext(
            skill=skill,
            task_id=task.id,
            conversation_id=task.conversation,
            source=self.source,
            caller=task.caller,
            audit=self.audit,
            profile=self.profiles.get(task.conversation),
            request=request,
            fence=self._fence(task),
        )

    def _fence(self, task: Task) -> Fence | None:
        """Replicas: a process that missed its lease may have lost ``task`` to another (fence.py)."""
        if self.tasks.db.local:
            return None
        fence = self._fences[task.id] = Fence(lambda: self.tasks.aholds(task.id))
        return fence

    async def send(
        self,
        agent: str,
        text: str,
        *,
        conversation: str,
        skill: str | None = None,
        task_id: str | None = None,
        caps: Mapping[str, float] | None = None,
        depth: int = 0,
        parent: str = "",
        chain: tuple[str, ...] = (),
        request: Mapping[str, Any] | None = None,
        caller: str | None = None,
        tokens: bool = True,
    ) -> AsyncIterator[RunEvent]:
        """Start a task: one message to ``agent`` in ``conversation``; stream its events.

        ``task_id`` lets a transport use its own id (an A2A task id) for the task; ``request``
        is what workflows see of the message (``message_id``, ``metadata``). ``caller`` is who
        sends it (default :attr:`decider`); a conversation belongs to the caller who started it,
        so another caller's message into it is refused (ConversationNotYours) before anything runs.
        Without ``tokens`` each model turn's text comes in one chunk when the turn ends, not as it is
        generated (for a caller that waits for the whole answer; see :meth:`Runner.run`).
        """
        self.bundle.agent(agent)
        who = self.decider if caller is None else caller
        had = Held(frozenset(), 0)
        if caller is not None or not parent:  # a call's size is its caller's; its owner is checked when it names one
            had = await self.tasks.aconversation(conversation)
        if caller is not None and had.callers - {caller}:
            raise ConversationNotYours(
                f"conversation {conversation!r} was started by another caller: start a new one (send no contextId)"
            )
        limit = self.bundle.project.config.store.max_conversation_bytes
        held = had.bytes if not parent else 0
        if held + len(text.encode("utf-8", "surrogatepass")) > limit:
            raise ConversationTooLarge(
                f"conversation {conversation!r} would hold more than {limit} bytes (store.max_conversation_bytes):"
                " nothing of this message ran; start a new conversation (another contextId, session or --session)",
                data={"conversation": conversation, "bytes": held, "limit": limit},
            )
        task = await self.tasks.acreate(
            agent=agent,
            conversation=conversation,
            source=self.source,
            input=text,
            task_id=task_id,
            parent=parent,
            caller=who,
        )
        _bind_logs(task)
        asked = {"skill": skill, "caps": dict(caps) if caps else None, "depth": depth, "chain": list(chain)}
        asked["masked"] = task.input != text  # the record keeps the message with its secret values masked
        await self._audit_task(
            task, "submitted", input_chars=len(text), by=who, **{k: v for k, v in asked.items() if v}
        )
        context = dataclasses.replace(self._context(task, skill, request), caps=caps or None, depth=depth, chain=chain)
        async for event in self._drive(
            task,
            lambda callbacks: Runner(self.bundle).run(
                agent,
                text,
                thread_id=conversation,
                skill=skill,
                context=context,
                callbacks=callbacks,
                tokens=tokens,
                abandoned=lambda: self.tasks.apause_abandoned_in(conversation),
            ),
        ):
            yield event

    async def decide(
        self,
        task_id: str,
        decision: Mapping[str, Any],
        *,
        request: Mapping[str, Any] | None = None,
        by: str | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Answer every pending decision of a paused task with ``decision`` and resume it.

        ``decision``: ``{"decision": "approve" | "reject" | "edit" | "always", "reason": ..., "args": ...}``,
        or for a workflow's ``ask`` step ``{"decision": "answer", "text": ...}`` (a reject declines it).
        An expired approval is answered by its profile's ``on_timeout`` instead. ``by`` names who
        decides (default: this runtime's source, ``cli:<os user>`` at a terminal). The decision is
        taken exactly once: a second decider, in this process or another, gets a RunError saying
        who decided first.
        """
        task = await self.acheck_decision(task_id, decision)
        task = await self.tasks.aclaim(task.id, by or self.decider)
        _bind_logs(task)
        try:
            answers = await answers_of(task, decision, self.audit, self.source)
        except ApprovalTimedOut as exc:
            yield await self._failed_before_run(task, Failure.of(exc))
            return
        context = self._context(task, None, request)
        async for event in self._drive(
            task,
            lambda callbacks: Runner(self.bundle).run(
                task.agent, thread_id=task.conversation, context=context, resume=answers, callbacks=callbacks
            ),
            resumed=True,
        ):
            yield event

    async def afail(self, task_id: str, reason: str) -> None:
        """End a running task ``failed`` with ``reason`` (recorded, audited): its run could not end it."""
        task = await self.tasks.aget(task_id)
        if task.state not in FINAL_STATES:
            await self._failed_before_run(task, Failure.of(RunError(reason)))

    async def _failed_before_run(self, task: Task, failure: Failure) -> RunFinished:
        """End ``task`` failed before its run started (recorded, audited); the event that says so."""
        await self.tasks.aset(task.id, state="failed", error=failure.message, pending=(), failure=failure)
        await self._audit_task(task, "failed", error=failure.message, code=failure.code)
        usage = Usage(**{k: int(v) for k, v in task.usage.items() if k in _USAGE_FIELDS})
        return dataclasses.replace(RunFinished.failed(failure, usage), task_id=task.id)

    @property
    def decider(self) -> str:
        """Who sends or decides when a transport names no one: ``cli:<os user>`` at a terminal,
        ``local:<os user>`` for ``ca run --stdio``, else the source (``acp``)."""
        if self.source in ("cli", "a2a-stdio"):
            import getpass

            return f"{'cli' if self.source == 'cli' else 'local'}:{getpass.getuser()}"
        return self.source

    async def acheck_decision(self, task_id: str, decision: Mapping[str, Any]) -> Task:
        """The paused task ``decision`` can answer; a RunError saying what it waits for if it cannot."""
        task = await self.tasks.aget(task_id)
        check_decision(task, decision)
        return task

    async def cancel(self, task_id: str, *, by: str | None = None) -> Canceled:
        """End any task canceled — paused, running here, in another process, or orphaned; see
        :mod:`framework.runtime.cancel`. ``by`` names who asks (default :attr:`decider`)."""
        return await cancel_task(
            self.tasks,
            self.audit,
            task_id,
            by=by or self.decider,
            source=self.source,  # type: ignore[arg-type]  # checked by AuditLog.append
            here=self.watch.stop,
        )

    async def amark_canceled(self, task_id: str, reason: str = "", *, by: str = "") -> bool:
        """Record that a task was canceled (its run was stopped by the transport), with ``reason``
        when it was not the caller who asked (a server shutting down, ``ca tasks cancel``, ``by``
        whom): one compare-and-set on the record, so a task that ended meanwhile keeps its end.
        Whether this call canceled it."""
        try:
            task = await self.tasks.aget(task_id)
        except RunError:
            return False
        if task.state in FINAL_STATES or not await self.tasks.aend(task.id, state="canceled", error=reason or None):
            return False
        await self._audit_task(task, "canceled", **({"error": reason} if reason else {}), **({"by": by} if by else {}))
        return True

    async def _drive(
        self,
        task: Task,
        run: Callable[[list[Any] | None], AsyncIterator[RunEvent]],
        *,
        resumed: bool = False,
        taken_over: bool = False,
        note: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Run ``run(callbacks)`` (the events of a run) in the turn of ``task``'s conversation, recording it.

        A turn not had within the wait limit fails the task (ConversationBusy) before anything of it
        ran. With tracing on, the run is an ``invoke_agent`` span (``resumed``: linked to the run that
        paused the task). ``taken_over``: the task is an orphan this process took over (its turn with
        it); ``note``: what its ``working`` audit record adds.
        """
        self.watch.track(task.id)
        try:
            async with self.turns.take(task.conversation, task.id, taken_over=taken_over):
                tracing = telemetry.tracing()
                if tracing is None:
                    async for event in self._recorded(task, run(None), note):
                        yield event
                    return
                with tracing.run(
                    agent=task.agent,
                    task_id=task.id,
                    conversation=task.conversation,
                    source=self.source,
                    prices=self.bundle.project.config.prices,
                    paused_by=self._paused_by(task) if resumed else "",
                ) as spans:
                    async for event in self._recorded(task, run([spans]), note):
                        if isinstance(event, RunFinished):
                            tracing.finished(task.id, event)
                        yield event
        except ConversationBusy as exc:  # raised before the run started: nothing of it ran
            yield await self._failed_before_run(task, Failure.of(exc))
        except asyncio.CancelledError:
            reason = self.watch.reason(task.id)
            if reason is not None:  # stopped by `cancel` (here or from another process): recorded here
                await self.amark_canceled(task.id, reason, by=self.watch.requester(task.id))
            raise
        finally:
            self.watch.untrack(task.id)
            self._fences.pop(task.id, None)

    def _paused_by(self, task: Task) -> str:
        """The traceparent of the run that paused ``task`` (in its audit), or ""."""
        for record in reversed(self.audit.query(task_id=task.id, kind="task.state")):
            if record.data.get("state") == "input-required":
                return str(record.data.get("traceparent", ""))
        return ""

    async def _recorded(
        self, task: Task, events: AsyncIterator[RunEvent], note: Mapping[str, Any] | None = None
    ) -> AsyncIterator[RunEvent]:
        await self.tasks.aset(task.id, state="working")
        await self._audit_task(task, "working", **(note or {}))
        pauses: list[Paused] = []
        masked = MaskedStream()  # what any transport shows, stores or logs: never a secret, even split
        async for raw in events:
            for event in masked.feed(raw):
                if isinstance(event, Paused):
                    pauses.append(event)
                if isinstance(event, RunFinished) and await self._taken_over(task, event):
                    # The task is another process's now: its record and audit are that run's to write.
                    yield dataclasses.replace(RunFinished.failed(Failure.of(_taken_over(task))), task_id=task.id)
                    return
                if isinstance(event, RunFinished):
                    # A task resumed after a pause reports (and stores) its whole usage, not the last
                    # part (only its own run writes it: ``task`` was read, or made, just before the run).
                    before = task.usage
                    total = event.usage + Usage(**{k: int(v) for k, v in before.items() if k in _USAGE_FIELDS})
                    event = dataclasses.replace(event, task_id=task.id, usage=total)
                    self.watch.finishing(task.id)  # a cancel request that comes now is too late: the end stands
                    await self._finish(task, event, pauses)
                yield event
        for event in masked.end():
            yield event

    async def _taken_over(self, task: Task, event: RunFinished) -> bool:
        """Whether the run of ``task`` that ends with ``event`` lost the task to another process (fence.py)."""
        if event.failure is not None and event.failure.kind == "TaskTakenOver":
            return True
        fence = self._fences.get(task.id)
        return fence is not None and not await fence()

    async def _finish(self, task: Task, event: RunFinished, pauses: list[Paused]) -> None:
        usage = dataclasses.asdict(event.usage)
        if event.state == "input-required":
            pending = tuple(pending_of(self.bundle.project, task.agent, p) for p in pauses)
            await self.tasks.aset(task.id, state="input-required", pending=pending, usage=usage)
            tracing = telemetry.tracing()
            traced = {"traceparent": tracing.traceparent(task.id)} if tracing is not None else {}
            await self._audit_task(task, "input-required", waiting=[p.pause.kind for p in pauses], **traced)
        elif event.state == "completed":
            await self.tasks.aset(task.id, state="completed", output=event.output, pending=(), usage=usage)
            await self._audit_task(task, "completed", stop_reason=event.stop_reason, usage=usage)
        else:
            await self.tasks.aset(
                task.id, state=event.state, error=event.error, pending=(), usage=usage, failure=event.failure
            )
            code = event.failure.code if event.failure is not None else None
            await self._audit_task(task, event.state, error=event.error, code=code)


def _bind_logs(task: Task) -> None:
    """Every record made from here on in this asyncio task (the transport's, for this task) carries
    the task's ids: the audit's, a library's (``--log-format json``)."""
    logs.bind(task_id=task.id, context_id=task.conversation, agent=task.agent, caller=task.caller)


_USAGE_FIELDS = ("input_tokens", "output_tokens", "model_calls", "tool_calls")


def _taken_over(task: Task) -> TaskTakenOver:
    return TaskTakenOver(
        f"task {task.id[:12]} was taken over by another process after this one missed its lease"
        " (store.task_lease); GetTask shows how that run ends it"
    )


def _code(task: Task) -> str | None:
    return task.failure.code if task.failure else None
