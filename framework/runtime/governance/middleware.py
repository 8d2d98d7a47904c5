"""Governance as agent middleware: every rule a user declares, enforced around model and tool calls.

For each tool call, in the order of docs/governance.md, 'The order of checks for a tool call':

    capabilities ─deny─▶ error result    (audited)
    contract must_not ─deny─▶ error result
    profile ─deny─▶ error result │ ─ask─▶ interrupt: approve / reject / edit / always
    budget (tool calls) ─spent─▶ error result
    execute ─▶ audit

Before each model call the budgets are checked (``on_exceed``: stop / fail / ask for an
extension); after it, usage and cost are accounted and audited (``model.call``: model, tokens,
cost or null when its price is unknown — what ``ca usage`` sums; a turn that asks for tools is
held for its first call's ``tool.call`` to take along, see :meth:`AuditLog.hold`); a final answer is checked
against the contract (fail, or explain the violation and let the model retry). For an llm agent
these run inside the model call (in graph nodes around it for one without tools that has a contract
or a budget that asks), and a workflow's answer when its run ends: :mod:`.graphs` hooks these rules
into each kind of agent.

An agent with output rules holds its answer back: the custom stream carries ``hold`` before each
model call, then ``release`` once a final answer passed (or a budget stopped the task) or
``withhold`` when it broke the contract; the runner sends no text of a held answer until it is
released. A withheld answer stays in the conversation (the model sees what it said) marked
:data:`WITHHELD`, so a replay of the conversation skips it.

All of it lives in graph state (``ca_*`` keys), so it is checkpointed with the
conversation: a paused run resumes in another process with the same counters.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar, Token
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from langchain.agents.middleware.types import AgentMiddleware, ToolCallRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.config import get_stream_writer
from langgraph.runtime import Runtime
from langgraph.types import Command, Overwrite, interrupt

from framework.compiler.agent import CALL_CONTEXT, RunContext
from framework.errors import (
    ApprovalRejected,
    BudgetExceeded,
    CAError,
    ContractViolation,
    Failure,
    PolicyDenied,
    TaskTakenOver,
)
from framework.runtime.governance import budgets
from framework.runtime.governance.calls import Decision, ToolCall
from framework.runtime.governance.capabilities import check_agent, check_capabilities
from framework.runtime.governance.contracts import WITHHELD, check_call_contract, check_output_contract
from framework.runtime.governance.policy import DEFAULT_MAX_DEPTH, GovernanceState, Policy
from framework.runtime.governance.profiles import decide
from framework.spec.prices import call_cost

if TYPE_CHECKING:
    from framework.runtime.audit import AuditLog

APPROVAL_OPTIONS = ("approve", "reject", "edit", "always")
_T = TypeVar("_T")
_OUTBOX: ContextVar[list[tuple[Any, str, dict[str, Any]]] | None] = ContextVar("ca_audit_outbox", default=None)
"""The audit records an async hook's sync checks made, appended (awaited) when the checks end."""


def context_of(runtime: Any) -> RunContext:
    """The RunContext of a hook's Runtime or a tool call's ToolRuntime (a default one if absent)."""
    context = getattr(runtime, "context", None)
    return context if isinstance(context, RunContext) else RunContext()


def task_start(values: Mapping[str, Any], task_id: str) -> dict[str, Any] | None:
    """The state update that starts task ``task_id`` in a conversation whose state is ``values``: its id,
    start time and the conversation's usage so far (what its budgets count from), no stop yet and
    none of the earlier tasks' tool calls (the contract counts a task's own; kept, they would make
    every later checkpoint of the conversation larger); None when ``task_id`` is the current task
    already (a run resumed or taken over goes on counting)."""
    if (values.get("ca_task") or {}).get("id") == task_id:
        return None
    started: dict[str, Any] = {
        "ca_task": {"id": task_id, "started": time.time(), "base": dict(values.get("ca_usage") or {})},
        "ca_stop": None,
    }
    if values.get("ca_calls"):
        started["ca_calls"] = Overwrite([])
    return started


class TaskStart(AgentMiddleware[GovernanceState, RunContext]):
    """Starts the task in a graph that no Runner starts: an agent another agent calls as a tool.

    The Runner puts a top-level run's start in the graph's input (:func:`task_start`); a hook here
    is a graph node, one superstep more per run, so only nested graphs have it (a workflow runs it
    in its ``plan`` step)."""

    state_schema = GovernanceState

    def before_agent(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return task_start(state, context_of(runtime).task_id or uuid.uuid4().hex)

    async def abefore_agent(self, state: GovernanceState, runtime: Runtime[RunContext]) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)


class GovernanceMiddleware(AgentMiddleware[GovernanceState, RunContext]):
    """Enforces one agent's capabilities, contract, profile and budget; writes the audit."""

    state_schema = GovernanceState

    def __init__(self, policy: Policy) -> None:
        super().__init__()
        self.policy = policy

    # -- audit -----------------------------------------------------------------

    def audit(self, context: RunContext, kind: str, **data: Any) -> None:
        """Record ``kind``, naming the task's caller: at once from a sync hook; from an async one when
        the hook's checks end (before the tool runs), waiting for another process's write lock off
        the event loop."""
        log = context.audit
        if log is None:
            return
        record = {
            "source": context.source
            if context.source in ("cli", "a2a-http", "a2a-stdio", "acp", "agent-call", "mcp")
            else "cli",
            "task_id": context.task_id,
            "conversation_id": context.conversation_id,
            "agent": self.policy.agent.name,
            "data": {**data, "caller": context.caller},  # usage by caller reads it (runtime/usage.py)
        }
        outbox = _OUTBOX.get()
        if outbox is None:
            log.append(kind, **record)
        else:
            outbox.append((log, kind, record))

    async def _audited(self, hook: Callable[[], _T], *, hold: bool = False, log: AuditLog | None = None) -> _T:
        """``hook()`` (sync checks), then its audit records, appended in order — also when the hook
        raised (a pause for a decision is an exception too), and all of them even if the task is
        canceled while they are written (they are handed to the log together). ``hold``: the records
        of a hook that returned are held (:meth:`AuditLog.hold`) for the next record to take along.
        ``log``: the run's log, whose held records are written now even if the hook audits nothing
        (a pause asks a person): a tool call's checks never end with its turn's records held."""
        outbox: list[tuple[Any, str, dict[str, Any]]] = []
        token = _OUTBOX.set(outbox)
        try:
            result = hook()
        except BaseException:
            hold = False
            raise
        finally:
            _OUTBOX.reset(token)
            if not outbox and log is not None:
                await log.aappend_all([])
            for audit, entries in itertools.groupby(
                outbox, key=lambda entry: entry[0]
            ):  # one log per hook, in practice
                records = [(kind, record) for _, kind, record in entries]
                if not (hold and audit.hold(records)):
                    await audit.aappend_all(records)
        return result

    def _usage(self, state: GovernanceState) -> tuple[dict[str, float], dict[str, float], float, str]:
        total = dict(state.get("ca_usage") or {})
        task = state.get("ca_task") or {}
        used = budgets.subtract(total, task.get("base") or {})
        return total, used, time.time() - float(task.get("started", time.time())), str(task.get("id", ""))

    def _caps(self, state: GovernanceState, context: RunContext) -> dict[str, float]:
        """This task's caps: its budget with approved extensions, lowered to what its caller has left."""
        task_id = str((state.get("ca_task") or {}).get("id", ""))
        extensions = (state.get("ca_counts") or {}).get(f"ext:{task_id}", 0)
        return budgets.task_caps(self.policy.budget, context.caps, extensions)

    def _overrun(
        self,
        state: GovernanceState,
        context: RunContext,
        *,
        only: frozenset[str] | None = None,
        pending: Mapping[str, float] | None = None,
    ) -> budgets.Overrun | None:
        """The first spent cap, counting ``pending`` usage (calls of this model turn not yet accounted) as used."""
        budget = self.policy.budget
        total, used, elapsed, _ = self._usage(state)
        if pending:
            total, used = budgets.add_usage(total, pending), budgets.add_usage(used, pending)
        caps = self._caps(state, context)
        found = budgets.first_overrun(caps, used, elapsed, scope="task", only=only)
        if found is None and budget is not None and budget.conversation is not None:
            conversation = budgets.caps_of(budget.conversation)
            found = budgets.first_overrun(conversation, total, 0.0, scope="conversation", only=only)
        return found

    # -- each model call: budgets before it; usage, cost and the contract after it --

    def _signal(self, event: str) -> None:
        """Tell the runner about the held answer: ``hold``, ``release`` or ``withhold``."""
        if self.policy.holds_output:
            get_stream_writer()({"ca_event": event})

    def _gate(self, state: GovernanceState, context: RunContext) -> dict[str, Any] | None:
        """Before a model call: the budgets. None to call the model; ``ca_counts`` when a person allowed
        more; a stop (``jump_to: end`` with the message saying why, and ``ca_stop``) when a cap is spent."""
        self._signal("hold")
        overrun = self._overrun(state, context)
        if overrun is None:
            return None
        budget = self.policy.budget
        action = budget.on_exceed if budget is not None else "stop"
        self.audit(context, "budget", limit=overrun.limit, used=overrun.used, cap=overrun.cap, action=action)
        if action == "ask" and overrun.scope == "task":
            answer = interrupt(
                {
                    "kind": "budget",
                    "agent": self.policy.agent.name,
                    "message": f"{overrun.describe()}. Allow {budget.extend_by:.0%} more?",
                    "limit": overrun.limit,
                    "used": overrun.used,
                    "cap": overrun.cap,
                    "options": ["approve", "reject"],
                }
            )
            if _decision(answer)[0] in ("approve", "always"):
                _, _, _, task_id = self._usage(state)
                self.audit(context, "decision", about="budget", decision="approve", limit=overrun.limit)
                return {"ca_counts": {f"ext:{task_id}": 1}}
            self.audit(context, "decision", about="budget", decision="reject", limit=overrun.limit)
        elif action == "fail":
            raise BudgetExceeded(
                f"{overrun.describe()} (on_exceed: fail)",
                data={"limit": overrun.limit, "used": overrun.used, "cap": overrun.cap, "scope": overrun.scope},
            )
        self._signal("release")  # what came before is shown with the stop, as for any answer
        return {
            "jump_to": "end",
            "messages": [AIMessage(f"Stopped: {overrun.describe()}.")],
            "ca_stop": {"reason": overrun.stop_reason, "limit": overrun.limit},
        }

    def _account(self, state: GovernanceState, context: RunContext, message: AIMessage) -> dict[str, Any]:
        """After a model call: its usage and cost (audited), and a final answer against the contract —
        withheld (it keeps its id: it replaces the model's message), then retried or failed."""
        meta: Mapping[str, Any] = message.usage_metadata or {}
        inp, out = int(meta.get("input_tokens", 0)), int(meta.get("output_tokens", 0))
        model = self.policy.model_label
        price = call_cost(model, self.policy.project.config.prices, inp, out)
        # Budgets count an unknown price as 0 (the cap cannot bind); the audit, ``ca usage``'s one
        # source, records it as unknown (null).
        dollars = float(price) if price is not None else None
        self.audit(context, "model.call", model=model, input_tokens=inp, output_tokens=out, cost_usd=dollars)
        delta = {"input_tokens": inp, "output_tokens": out, "model_calls": 1, "cost_usd": dollars or 0.0}
        update: dict[str, Any] = {"ca_usage": delta}
        if message.tool_calls:
            return update
        _, _, _, task_id = self._usage(state)
        calls = [
            ToolCall(c["tool"], c["capability"], c.get("args", {}))
            for c in state.get("ca_calls") or []
            if c.get("task") == task_id
        ]
        problems = check_output_contract(self.policy.agent.contract, message.text, calls)
        if not problems:
            self._signal("release")
            return update
        self._signal("withhold")
        rules = self.policy.agent.contract.on_violation
        retries = (state.get("ca_counts") or {}).get(f"retry:{task_id}", 0)
        self.audit(context, "contract", severity="high", violations=problems, retry=retries)
        withheld = message.model_copy(update={"response_metadata": {**message.response_metadata, WITHHELD: True}})
        if rules.action == "retry" and retries < rules.max_retries:
            explanation = "Your answer breaks the agent's contract:\n" + "\n".join(f"- {p}" for p in problems)
            feedback = HumanMessage(
                explanation + "\nPlease answer again, fixing this.", response_metadata={WITHHELD: True}
            )
            return {
                **update,
                "ca_counts": {f"retry:{task_id}": 1},
                "messages": [withheld, feedback],
                "jump_to": "model",
            }
        # Not raised: the update marks the answer withheld in the conversation; the runner fails the task.
        failure = ContractViolation("contract violated: " + "; ".join(problems), data={"violations": problems})
        return {**update, "messages": [withheld], "ca_stop": stopped_by(failure), "jump_to": "end"}

    # -- each tool call ----------------------------------------------------------

    def _check(self, call: ToolCall, state: GovernanceState, context: RunContext, call_id: str = "") -> Decision:
        policy = self.policy
        if call.capability == "agent":
            decision = check_agent(call.tool, policy.capabilities)
            # The caller's cap binds its callees too; without one, a default stops runaway recursion.
            depth_cap = self._caps(state, context).get("max_depth", DEFAULT_MAX_DEPTH)
            chain = (*context.chain, self.policy.agent.name)
            if decision.allowed and call.tool in chain:
                cycle = " -> ".join((*chain, call.tool))
                decision = Decision("deny", f"agent call cycle at run time: {cycle}", "agents.cycle")
            elif decision.allowed and context.depth + 1 > depth_cap:
                decision = Decision("deny", f"agent calls may nest {depth_cap:g} deep", "budget.max_depth")
        else:
            decision = check_capabilities(call, policy.capabilities, root=policy.real_root, root_is_real=True)
        if decision.denied:
            return decision
        decision = check_call_contract(policy.agent.contract, call)
        if decision.denied:
            return decision
        # A conversation may run under another profile (an ACP session mode) than the agent's own.
        profile = policy.project.profiles.get(context.profile) if context.profile else policy.profile
        if profile is None:
            decision = Decision("allow", "no automation profile", "")
        else:
            _, used, _, _ = self._usage(state)
            decision = decide(profile, call, cost_usd=_decimal(used.get("cost_usd", 0)))
        if decision.action == "ask" and call.tool in (state.get("ca_allowed") or []):
            decision = Decision("allow", "always allowed in this conversation", "session")
        # Calls of one model turn run side by side on the same state: count the ones before this call.
        ahead = _calls_ahead(state, call_id)
        if decision.action != "deny" and self._overrun(
            state, context, only=frozenset({"max_tool_calls"}), pending={"tool_calls": ahead}
        ):
            decision = Decision("deny", "the task's budget of tool calls is spent", "budget.max_tool_calls")
        return decision

    def _prepare(self, request: ToolCallRequest) -> tuple[ToolCallRequest | None, ToolMessage | None, dict[str, Any]]:
        """Decide on a call; ask a person if needed. (request to run, or an error result, and state updates)."""
        context = context_of(request.runtime)
        state: GovernanceState = request.state
        call = _tool_call(request)
        call_id = str(request.tool_call.get("id") or "")
        extra: dict[str, Any] = {}
        if request.tool is None:  # a name the model made up: nothing to run, nothing allowed
            unknown = f"the agent has no tool {call.tool!r}"
            self.audit(context, "denial", tool=call.tool, args=dict(call.args), reason=unknown, rule="tool.unknown")
            return None, _refused(request, PolicyDenied(f"denied: {unknown}", data={"tool": call.tool})), extra
        decision = self._check(call, state, context, call_id)
        if decision.action == "ask":
            answer = interrupt(
                {
                    "kind": "approval",
                    "call_id": request.tool_call.get("id") or "",
                    "agent": self.policy.agent.name,
                    "tool": call.tool,
                    "args": dict(call.args),
                    "message": f"{self.policy.agent.name} wants to run {call.tool} {_args_text(call.args)}",
                    "reason": decision.reason,
                    "rule": decision.rule,
                    "options": list(APPROVAL_OPTIONS),
                }
            )
            choice, reason, args = _decision(answer)
            self.audit(context, "decision", tool=call.tool, decision=choice, reason=reason, by="person")
            if choice == "reject":
                rejected = ApprovalRejected(
                    f"rejected by the user{': ' + reason if reason else ''}", data={"tool": call.tool}
                )
                return None, _refused(request, rejected), extra
            if choice == "edit" and isinstance(args, dict):
                request = request.override(tool_call={**request.tool_call, "args": args})
                call = _tool_call(request)
                recheck = self._check(call, state, context, call_id)
                if recheck.denied:
                    decision = recheck
            if choice == "always":
                extra["ca_allowed"] = [call.tool]
        if decision.denied:
            self.audit(
                context, "denial", tool=call.tool, args=dict(call.args), reason=decision.reason, rule=decision.rule
            )
            # A spent cap of tool calls or depth is the budget's refusal; every other one is policy's.
            kind = BudgetExceeded if decision.rule.startswith("budget.") else PolicyDenied
            denied = kind(f"denied: {decision.reason}", data={"tool": call.tool, "rule": decision.rule})
            return None, _refused(request, denied), extra
        self.audit(
            context, "tool.call", tool=call.tool, args=dict(call.args), rule=decision.rule, caller=context.caller
        )
        _, _, _, task_id = self._usage(state)
        extra["ca_calls"] = [
            {"task": task_id, "tool": call.tool, "capability": call.capability, "args": dict(call.args)}
        ]
        return request, None, extra

    def _finish(
        self, request: ToolCallRequest, result: ToolMessage | Command[Any], extra: dict[str, Any]
    ) -> ToolMessage | Command[Any]:
        context = context_of(request.runtime)
        delta: dict[str, float] = {"tool_calls": 1}
        if isinstance(result, ToolMessage):
            artifact = result.artifact if isinstance(result.artifact, dict) else {}
            callee = artifact.get("usage") if isinstance(artifact.get("usage"), dict) else {}
            delta = budgets.add_usage(delta, callee)  # the caller pays for its callee
            self.audit(
                context, "tool.result", tool=_spec_name(request), error=result.status == "error", size=len(result.text)
            )
            return Command(update={"messages": [result], "ca_usage": delta, **extra})
        return result

    def _enter_callee(self, request: ToolCallRequest) -> Token[RunContext | None] | None:
        """Set :data:`CALL_CONTEXT` for a tool that runs an agent (capability ``agent``, local or
        remote: the only tools that read it); None for any other tool, which runs without it."""
        if _capability(request) != "agent":
            return None
        return CALL_CONTEXT.set(self._callee_context(request))

    def _callee_context(self, request: ToolCallRequest) -> RunContext:
        """What an agent called by this tool gets: depth + 1 and at most what this task and conversation have left."""
        context = context_of(request.runtime)
        state: GovernanceState = request.state
        total, used, elapsed, _ = self._usage(state)
        left = budgets.remaining(self._caps(state, context), used, elapsed)
        budget = self.policy.budget
        if budget is not None and budget.conversation is not None:
            conversation = budgets.caps_of(budget.conversation)
            conversation.pop("max_duration", None)  # wall time is not measured over a conversation
            for name, amount in budgets.remaining(conversation, total, 0.0).items():
                left[name] = min(left.get(name, amount), amount)
        return replace(
            context.child(),
            caps=left or None,
            call_id=str(request.tool_call.get("id") or ""),
            chain=(*context.chain, self.policy.agent.name),
        )

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]]
    ) -> ToolMessage | Command[Any]:
        runnable, refused, extra = self._prepare(request)
        if runnable is None:
            assert refused is not None
            return Command(update={"messages": [refused], **extra})
        token = self._enter_callee(runnable)
        try:
            result = handler(runnable)
        finally:
            if token is not None:
                CALL_CONTEXT.reset(token)
        return self._finish(runnable, result, extra)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        log = context_of(request.runtime).audit
        runnable, refused, extra = await self._audited(lambda: self._prepare(request), log=log)
        if runnable is None:
            assert refused is not None
            return Command(update={"messages": [refused], **extra})
        await self._fenced(runnable)
        token = self._enter_callee(runnable)
        try:
            result = await handler(runnable)
        finally:
            if token is not None:
                CALL_CONTEXT.reset(token)
        return await self._audited(lambda: self._finish(runnable, result, extra))

    async def _fenced(self, request: ToolCallRequest) -> None:
        """Raise TaskTakenOver, the tool not run, when another process took this run's task over: its
        ``tool.call`` is audited already, so the taker knows of it (see ``framework.runtime.fence``)."""
        context = context_of(request.runtime)
        if context.fence is None or await context.fence():
            return
        await self._audited(  # the async append: a round trip to PostgreSQL (fences are replicas') off the loop
            lambda: self.audit(
                context, "denial", tool=_spec_name(request), reason="another process took the task over", rule="lease"
            )
        )
        raise TaskTakenOver(
            f"task {context.task_id[:12]} was taken over by another process after this one missed its lease"
            f" (store.task_lease); its tool {_spec_name(request)} did not run here"
        )


def stopped_by(failure: CAError) -> dict[str, Any]:
    """``ca_stop`` for a task that ends failed with ``failure``: the typed failure, as JSON (it is
    checkpointed with the conversation), for the runner to end the run with."""
    return {"reason": "refusal", "failure": Failure.of(failure).to_json()}


def _calls_ahead(state: GovernanceState, call_id: str) -> int:
    """How many tool calls of the last model turn come before ``call_id`` (0 if it is not there)."""
    messages = state.get("messages") or []
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            ids = [c.get("id") for c in message.tool_calls]
            return ids.index(call_id) if call_id in ids else 0
    return 0


def _spec_name(request: ToolCallRequest) -> str:
    tool = request.tool
    if tool is not None:
        return str((tool.metadata or {}).get("ca_name", tool.name))
    return str(request.tool_call["name"])


def _capability(request: ToolCallRequest) -> str:
    """What the requested tool touches, as its builder declared (a tool that declares nothing is ``python``)."""
    tool = request.tool
    return str(((tool.metadata or {}) if tool is not None else {}).get("capability", "python"))


def _tool_call(request: ToolCallRequest) -> ToolCall:
    tool = request.tool
    meta = (tool.metadata or {}) if tool is not None else {}
    capability = _capability(request)
    args = request.tool_call.get("args") or {}
    hints = meta.get("annotations")
    annotations: dict[str, Any] = hints if isinstance(hints, dict) else {}
    return ToolCall(
        _spec_name(request),
        capability,  # type: ignore[arg-type]
        dict(args),
        annotations=annotations,
        pin=str(meta.get("mcp_pin", "")),
    )


def _refused(request: ToolCallRequest, refusal: CAError) -> ToolMessage:
    """The error result of a refused call: the model reads the message; the typed failure rides in
    the artifact (never sent to the model), so a workflow's tool step fails with its kind."""
    return ToolMessage(
        str(refusal),
        tool_call_id=request.tool_call["id"],
        name=request.tool_call["name"],
        status="error",
        artifact={"failure": Failure.of(refusal).to_json()},
    )


def _args_text(args: Mapping[str, Any]) -> str:
    import json

    text = json.dumps(dict(args), ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"


def _decision(answer: Any) -> tuple[str, str | None, Any]:
    """(approve | reject | edit | always, reason, edited args) from a resume value."""
    if isinstance(answer, str):
        choice = answer.strip().lower()
        return (choice if choice in APPROVAL_OPTIONS else "reject"), None, None
    if isinstance(answer, Mapping):
        choice = str(answer.get("decision", "")).lower()
        if choice not in APPROVAL_OPTIONS:
            choice = "approve" if answer.get("approved") is True else "reject"
        reason = answer.get("reason")
        return choice, str(reason) if reason else None, answer.get("args")
    return ("approve" if answer is True else "reject"), None, None


def _decimal(value: float) -> Any:
    from decimal import Decimal

    return Decimal(str(value))


__all__ = ["WITHHELD", "GovernanceMiddleware", "context_of", "stopped_by"]
