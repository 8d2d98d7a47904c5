"""A workflow agent compiled to a LangGraph StateGraph: sequence, parallel, router, loop and gate.

Every step becomes one node named ``step.ID``; composite steps add helper nodes named
``ID.join`` (parallel), ``ID.end`` (router, loop) and ``ID.check`` (loop). The graph runs
``plan`` first and ``output`` last, so a drawing reads ``plan --> step.draft --> ... --> output``.

Inside a parallel block each branch runs in its own *lane*: the "previous step's output" an
AgentStep without ``input`` receives is tracked per lane (``last`` for the top level, the
private ``lanes`` channel for branches), so concurrent branches never overwrite each other's.
A gate's output is ``approved``, but it passes its input on: the step after it sees what it saw.

Tool steps go through the same policy middleware as a model's tool calls (``wrap_tool_call``):
the runtime's governance checks, asks, audits and counts them exactly as it does for an llm
agent, and the keys it keeps in graph state are added to the workflow's state. A tool step
whose call is refused or fails fails the step, and with it the run.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any, Literal, Protocol, TypeVar, cast

from langchain.agents.middleware.types import AgentMiddleware, ToolCallRequest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.config import get_stream_writer
from langgraph.errors import GraphBubbleUp
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import get_runtime
from langgraph.types import Command, interrupt

from framework.compiler.conditions import Classify, LazyLabel, first_label_in, holds, label_or_other
from framework.compiler.templates import input_text, render_template
from framework.compiler.workflow_state import (
    RunState,
    Update,
    WorkflowState,
    as_text,
    read_lane,
    render,
    render_value,
    state_schema,
    tested_text,
    write_lane,
)
from framework.errors import ApprovalRejected, CAError, Failure, RunError, Signal, ToolError
from framework.spec.agent import WorkflowAgent
from framework.spec.workflow import (
    AgentStep,
    ArtifactStep,
    AskStep,
    GateStep,
    LoopStep,
    MessageStep,
    ParallelStep,
    RouterStep,
    Step,
    ToolStep,
    step_kind,
)

__all__ = ["AgentCall", "WorkflowState", "compile_workflow", "render_template"]

AgentCall = Callable[[str, str], Awaitable[str]]
"""(agent name, input text) -> the agent's final text. Called inside a graph node; may raise."""

StepKind = Literal["agent", "tool", "gate", "ask", "artifact", "message", "parallel", "router", "loop"]
_Leaf = AgentStep | ToolStep | GateStep | AskStep | ArtifactStep | MessageStep
_PASS_THROUGH = ("gate", "artifact")
"""Steps that leave their lane as it was: the next step sees what they saw."""
StepStatus = Literal["started", "completed", "failed"]
STEP_NODE = "step."
"""The prefix of a step's node in the workflow's graph (``step.ID``): traces and events find steps by it."""

_V = TypeVar("_V")
_PLAIN = re.compile(r"[\w .-]{1,40}")


def _wraps_tools(layer: AgentMiddleware[Any, Any]) -> bool:
    return type(layer).awrap_tool_call is not AgentMiddleware.awrap_tool_call


def _tool_chain(middleware: Sequence[AgentMiddleware[Any, Any]]) -> _ToolHandler:
    """The tool call handler with every middleware's ``awrap_tool_call`` around it, first outermost."""

    async def execute(request: ToolCallRequest) -> ToolMessage | Command[Any]:
        assert request.tool is not None
        result = await request.tool.ainvoke({**request.tool_call, "type": "tool_call"})
        return (
            result
            if isinstance(result, ToolMessage)
            else ToolMessage(as_text(result), tool_call_id=request.tool_call["id"])
        )

    handler: _ToolHandler = execute
    for layer in reversed([m for m in middleware if _wraps_tools(m)]):

        def wrapped(
            request: ToolCallRequest, layer: AgentMiddleware[Any, Any] = layer, inner: _ToolHandler = handler
        ) -> Awaitable[ToolMessage | Command[Any]]:
            return layer.awrap_tool_call(request, inner)

        handler = wrapped
    return handler


_ToolHandler = Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]


class _Node(Protocol):
    """A graph node: reads the run state, returns an update or a Command."""

    def __call__(self, state: RunState) -> Awaitable[Any]: ...


@dataclass(frozen=True, slots=True)
class _Fragment:
    """A compiled step: where control enters and the one node it leaves from."""

    step: str
    title: str
    entry: str
    exit: str


@dataclass(frozen=True, slots=True)
class _Reporter:
    step: str
    kind: StepKind
    title: str

    def __call__(self, status: StepStatus, *, ended_by: str = "") -> None:
        event = {"ca_event": "step", "step": self.step, "kind": self.kind, "status": status, "title": self.title}
        if ended_by:
            event["ended_by"] = ended_by
        get_stream_writer()(event)

    async def guard(self, work: Awaitable[_V]) -> _V:
        """Await ``work``; report ``failed`` if it raises (interrupts pass through unreported)."""
        try:
            return await work
        except GraphBubbleUp:
            raise
        except Exception:
            self("failed")
            raise


def _step_failure(message: str, artifact: Any) -> CAError:
    """The error a tool step fails with: the refusal's own kind when governance refused the call
    (its result carries the typed failure), a ToolError when the tool itself failed."""
    refused = artifact.get("failure") if isinstance(artifact, Mapping) else None
    if isinstance(refused, Mapping):
        return replace(Failure.from_json(refused), message=message).error()
    return ToolError(message)


def _gate_decision(step_id: str, value: Any) -> tuple[bool, str | None]:
    """Read a resume value: ``{"approved": bool, "reason": str | None}``, a bool, or approve/reject."""
    if isinstance(value, bool):
        return value, None
    if isinstance(value, str) and value.strip().lower() in ("approve", "approved", "reject", "rejected"):
        return value.strip().lower().startswith("approve"), None
    if isinstance(value, Mapping) and isinstance(value.get("approved"), bool):
        reason = value.get("reason")
        return value["approved"], str(reason) if reason else None
    raise RunError(f"gate {step_id!r} cannot read the decision {value!r}; resume with {{'approved': true or false}}")


def _title(step: Step, step_id: str) -> str:
    """Short human text for progress: ``agent summarizer``, ``gate: Publish these notes?``."""
    if isinstance(step, AgentStep):
        return f"agent {step.agent}"
    if isinstance(step, ToolStep):
        return f"tool {step.tool}"
    if isinstance(step, GateStep | AskStep):
        kind, text = ("gate", step.gate.message) if isinstance(step, GateStep) else ("ask", step.ask.message)
        first = text.strip().splitlines()[0] if text.strip() else step_id
        return f"{kind}: {first if len(first) <= 60 else first[:59] + '…'}"
    if isinstance(step, ArtifactStep):
        return f"artifact {step.artifact.name or step.id}"
    if isinstance(step, MessageStep):
        return "message"
    if isinstance(step, ParallelStep):
        return f"parallel: {', '.join(b.id or 'parallel' for b in step.parallel)}"
    if isinstance(step, RouterStep):
        return f"router on {step.router.on}"
    return f"loop: {', '.join(s.id or 'parallel' for s in step.loop.steps)} (max {step.loop.max})"


def _edge_label(label: str | None, fallback: str) -> str:
    # Mermaid has no escaping for edge labels: only plain words are safe to draw.
    return label if label and _PLAIN.fullmatch(label) else fallback


def _supersteps(steps: list[Step]) -> int:
    """An upper bound on the supersteps ``steps`` take, for the graph's recursion limit."""
    total = 0
    for step in steps:
        if isinstance(step, ParallelStep):
            total += 2 + max(_supersteps([b]) for b in step.parallel)
        elif isinstance(step, RouterStep):
            routes = [r.steps for r in step.router.routes] + [step.router.default]
            total += 2 + max(_supersteps(r) for r in routes)
        elif isinstance(step, LoopStep):
            total += 2 + step.loop.max * (_supersteps(step.loop.steps) + 1)
        else:
            total += 1
    return total


def _step_ids(steps: list[Step]) -> set[str]:
    ids: set[str] = set()
    for step in steps:
        if step.id is not None:
            ids.add(step.id)
        if isinstance(step, ParallelStep):
            ids |= _step_ids(step.parallel)
        elif isinstance(step, RouterStep):
            for route in step.router.routes:
                ids |= _step_ids(route.steps)
            ids |= _step_ids(step.router.default)
        elif isinstance(step, LoopStep):
            ids |= _step_ids(step.loop.steps)
    return ids


class _Builder:
    """Adds the nodes and edges of each step to one StateGraph."""

    def __init__(
        self,
        agent: WorkflowAgent,
        call_agent: AgentCall,
        tools: Mapping[str, BaseTool],
        classify: Classify | None,
        middleware: Sequence[AgentMiddleware[Any, Any]] = (),
    ) -> None:
        self.schema = state_schema(middleware)
        self.graph: StateGraph[RunState, None, WorkflowState, WorkflowState] = StateGraph(
            self.schema, input_schema=WorkflowState, output_schema=WorkflowState
        )
        self.call_agent = call_agent
        self.tools = tools
        self.run_call = _tool_chain(middleware)
        self.classify = classify or first_label_in
        self.label_or_other = classify or label_or_other
        self.taken = _step_ids(agent.steps)
        self.generated = 0

    def add(self, name: str, node: _Node, destinations: dict[str, str] | None = None) -> str:
        # Every node reads the whole state (the middleware's keys too), not just what its hints name.
        self.graph.add_node(name, node, destinations=destinations, input_schema=self.schema)
        return name

    def step_id(self, step: Step) -> str:
        if step.id is not None:
            return step.id
        while True:  # a generated id must not shadow a step the author named "parallel-N"
            self.generated += 1
            candidate = f"parallel-{self.generated}"
            if candidate not in self.taken:
                self.taken.add(candidate)
                return candidate

    def chain(self, steps: list[Step], lane: str) -> list[_Fragment]:
        """Compile steps that run one after another in ``lane``."""
        fragments = [self.step(step, lane) for step in steps]
        for before, after in pairwise(fragments):
            self.graph.add_edge(before.exit, after.entry)
        return fragments

    def step(self, step: Step, lane: str) -> _Fragment:
        step_id = self.step_id(step)
        title = _title(step, step_id)
        if isinstance(step, ParallelStep):
            return self.parallel(step, step_id, title, lane)
        if isinstance(step, RouterStep):
            return self.router(step, title, lane)
        if isinstance(step, LoopStep):
            return self.loop(step, title, lane)
        node = f"{STEP_NODE}{step_id}"
        self.add(node, self.leaf(step, step_id, title, lane))
        return _Fragment(step_id, title, node, node)

    def leaf(self, step: _Leaf, step_id: str, title: str, lane: str) -> _Node:
        """An agent, tool, gate, ask, artifact or message node."""
        kind = cast(StepKind, step_kind(step))
        report = _Reporter(step_id, kind, title)

        async def work(state: RunState) -> tuple[str, Update]:
            """The step's output and what else it adds to the state."""
            if isinstance(step, AgentStep):
                text = render(step.input, state) if step.input is not None else read_lane(state, lane)
                return await self.call_agent(step.agent, text), {}
            if isinstance(step, ToolStep):
                return await self.run_tool(step, state)
            if isinstance(step, GateStep):
                return self.gate(step, state), {}
            if isinstance(step, AskStep):
                return self.ask(step, state), {}
            if isinstance(step, ArtifactStep):
                return self.artifact(step, state), {}
            text = render(step.message, state)
            get_stream_writer()({"ca_event": "message", "step": step.id, "text": text})
            return text, {}

        async def node(state: RunState) -> Update:
            report("started")
            output, extra = await report.guard(work(state))
            report("completed")
            update: Update = {**extra, "outputs": {step_id: output}}
            return update if kind in _PASS_THROUGH else update | write_lane(lane, output)

        return node

    async def run_tool(self, step: ToolStep, state: RunState) -> tuple[str, Update]:
        """Run the step's tool call through the middleware: its result, and the middleware's state update.

        A refused, rejected or failed call (an error result) fails the step: with the refusal's
        kind when governance refused it (the result carries it), else as a ToolError.
        """
        tool = self.tools.get(step.tool)
        if tool is None:
            raise RunError(f"step {step.id!r}: tool {step.tool!r} is not available")
        args = {key: render(value, state) if isinstance(value, str) else value for key, value in step.args.items()}
        call = {"name": tool.name, "args": args, "id": f"step.{step.id}", "type": "tool_call"}
        request = ToolCallRequest(tool_call=call, tool=tool, state=state, runtime=get_runtime())  # type: ignore[arg-type]
        try:
            result = await self.run_call(request)
        except (GraphBubbleUp, Signal):  # an approval asked for by governance; a cancel
            raise
        except Exception as exc:
            raise ToolError(f"step {step.id!r}: tool {step.tool!r} failed: {exc}") from exc
        update: Update = {}
        if isinstance(result, Command):
            update = dict(result.update) if isinstance(result.update, Mapping) else {}
            messages = update.pop("messages", [])
            result = messages[-1] if messages else ToolMessage("", tool_call_id=call["id"])
        if result.status == "error":
            raise _step_failure(f"step {step.id!r}: tool {step.tool!r} failed: {result.text}", result.artifact)
        return result.text, update

    @staticmethod
    def gate(step: GateStep, state: RunState) -> str:
        # No side effects before interrupt(): a resume runs this node again from the top.
        payload: dict[str, Any] = {"kind": "gate", "step": step.id, "message": render(step.gate.message, state)}
        if step.gate.timeout is not None:
            payload["timeout"] = step.gate.timeout
        approved, reason = _gate_decision(step.id, interrupt(payload))
        if not approved:
            raise ApprovalRejected(f"gate {step.id!r} rejected" + (f": {reason}" if reason else ""))
        return "approved"

    @staticmethod
    def ask(step: AskStep, state: RunState) -> str:
        """Pause for a person's answer, as text: the step's output."""
        payload: dict[str, Any] = {"kind": "ask", "step": step.id, "message": render(step.ask.message, state)}
        if step.ask.timeout is not None:
            payload["timeout"] = step.ask.timeout
        answer = interrupt(payload)
        if isinstance(answer, Mapping):
            if answer.get("declined"):
                reason = answer.get("reason")
                raise ApprovalRejected(f"ask {step.id!r} was declined" + (f": {reason}" if reason else ""))
            answer = answer.get("text", "")
        return str(answer)

    @staticmethod
    def artifact(step: ArtifactStep, state: RunState) -> str:
        """Send the artifact (rendered) to the custom stream; the step's output is its name."""
        name = step.artifact.name or step.id
        parts: list[dict[str, Any]] = []
        for part in step.artifact.parts:
            if part.text is not None:
                parts.append({"text": render(part.text, state)})
            elif part.file is not None:
                file = part.file.model_dump(exclude_none=True)
                parts.append({"file": {k: render(v, state) if k in ("content", "url") else v for k, v in file.items()}})
            else:
                parts.append({"data": render_value(part.data, state)})
        event = {"ca_event": "artifact", "step": step.id, "name": name, "parts": parts}
        if step.artifact.description:
            event["description"] = step.artifact.description
        get_stream_writer()(event)
        return name

    def parallel(self, step: ParallelStep, step_id: str, title: str, lane: str) -> _Fragment:
        """``step.ID`` fans out to every branch in one superstep; ``ID.join`` waits for all of them."""
        report = _Reporter(step_id, "parallel", title)
        lanes = [f"{step_id}.{i}" for i in range(len(step.parallel))]

        async def fork(state: RunState) -> Update:
            report("started")
            before = read_lane(state, lane)
            return {"lanes": dict.fromkeys(lanes, before)}

        async def join(state: RunState) -> Update:
            text = "\n\n".join(read_lane(state, branch) for branch in lanes)
            report("completed")
            update = write_lane(lane, text)
            return (update | {"outputs": {step.id: text}}) if step.id is not None else update

        entry = self.add(f"{STEP_NODE}{step_id}", fork)
        exits = []
        for branch, branch_lane in zip(step.parallel, lanes, strict=True):
            (fragment,) = self.chain([branch], branch_lane)
            self.graph.add_edge(entry, fragment.entry)
            exits.append(fragment.exit)
        exit_ = self.add(f"{step_id}.join", join)
        # A waiting edge: the join runs once every branch's last node has run. Branch exits are
        # nodes that run exactly once per block (never a loop's check), or the join would fire early.
        self.graph.add_edge(exits, exit_)
        return _Fragment(step_id, title, entry, exit_)

    def router(self, step: RouterStep, title: str, lane: str) -> _Fragment:
        """``step.ID`` picks a route and jumps to it; every route ends in ``ID.end``."""
        router, report = step.router, _Reporter(step.id, "router", title)
        end = f"{step.id}.end"
        labels = router.classify.labels if router.classify else [r.when.label for r in router.routes if r.when.label]
        routes = [self.chain(route.steps, lane) for route in router.routes]
        default = self.chain(router.default, lane)
        targets = [chain[0].entry for chain in routes]
        fallback = default[0].entry if default else end

        async def choose(state: RunState) -> str:
            text = tested_text(router.on, state)
            label = LazyLabel(self.classify, text, labels)
            for route, target in zip(router.routes, targets, strict=True):
                if await holds(route.when, text, label):
                    return target
            return fallback

        async def pick(state: RunState) -> Command[str]:
            report("started")
            return Command(goto=await report.guard(choose(state)))

        async def finish(state: RunState) -> Update:
            report("completed")
            return {"outputs": {step.id: read_lane(state, lane)}}

        destinations = {
            target: _edge_label(route.when.label, f"route {i}")
            for i, (route, target) in enumerate(zip(router.routes, targets, strict=True), 1)
        }
        self.add(f"step.{step.id}", pick, destinations | {fallback: "default"})
        self.add(end, finish)
        for chain in [*routes, default]:
            if chain:
                self.graph.add_edge(chain[-1].exit, end)
        return _Fragment(step.id, title, f"step.{step.id}", end)

    def loop(self, step: LoopStep, title: str, lane: str) -> _Fragment:
        """``step.ID`` starts the count, the body runs, ``ID.check`` repeats it or goes to ``ID.end``."""
        loop, report = step.loop, _Reporter(step.id, "loop", title)
        check, end = f"{step.id}.check", f"{step.id}.end"
        body = self.chain(loop.steps, lane)
        until = loop.until.label

        async def start(state: RunState) -> Update:
            report("started")
            return {"loops": {step.id: 0}}

        async def finished(state: RunState, iterations: int) -> str:
            """How the loop ends after ``iterations`` runs: ``until`` (it held), ``max`` or not yet ('')."""
            text = tested_text(loop.on, state) if loop.on else read_lane(state, lane)
            label = LazyLabel(self.label_or_other, text, [until, "other"] if until else [])
            if await holds(loop.until, text, label):
                return "until"
            return "max" if iterations >= loop.max else ""

        async def again(state: RunState) -> Command[str]:
            iterations = state.get("loops", {}).get(step.id, 0) + 1
            ended_by = await report.guard(finished(state, iterations))
            if ended_by:  # a loop that ran out of iterations says so: its until never held
                report("completed", ended_by=ended_by)
            return Command(update={"loops": {step.id: iterations}}, goto=end if ended_by else body[0].entry)

        async def finish(state: RunState) -> Update:
            return {"outputs": {step.id: read_lane(state, lane)}}

        self.add(f"step.{step.id}", start)
        self.graph.add_edge(f"step.{step.id}", body[0].entry)
        self.graph.add_edge(body[-1].exit, self.add(check, again, {body[0].entry: "again", end: "done"}))
        self.add(end, finish)
        return _Fragment(step.id, title, f"step.{step.id}", end)


def replies_with_message(agent: WorkflowAgent) -> bool:
    """Whether a run of ``agent`` may answer with a message step (A2A: a Message instead of a task)."""

    def walk(steps: list[Step]) -> bool:
        for step in steps:
            if isinstance(step, MessageStep):
                return True
            if isinstance(step, ParallelStep) and walk(step.parallel):
                return True
            if isinstance(step, RouterStep) and (
                any(walk(r.steps) for r in step.router.routes) or walk(step.router.default)
            ):
                return True
            if isinstance(step, LoopStep) and walk(step.loop.steps):
                return True
        return False

    return walk(agent.steps)


def compile_workflow(
    agent: WorkflowAgent,
    *,
    call_agent: AgentCall,
    tools: Mapping[str, BaseTool],
    classify: Classify | None = None,
    checkpointer: Any = None,
    middleware: Sequence[AgentMiddleware[Any, Any]] = (),
) -> CompiledStateGraph[Any, None, WorkflowState, WorkflowState]:
    """Compile a workflow agent into a graph whose input is ``{"messages": [HumanMessage(text)]}``.

    ``call_agent`` runs the agent steps; ``tools`` holds the builtin tools by spec name for tool
    steps; ``classify`` picks a label for routers with ``classify`` (default: the first label found
    in the text). Gates pause with ``interrupt()``, so resuming one needs a ``checkpointer``.
    Progress goes to the custom stream: one ``plan`` event, then ``step`` events. ``middleware``
    (the runtime's policies) wraps every tool step's call and starts each run (``before_agent``).
    """
    builder = _Builder(agent, call_agent, tools, classify, middleware)
    top = builder.chain(agent.steps, "")
    starts = [m for m in middleware if type(m).abefore_agent is not AgentMiddleware.abefore_agent]

    async def plan(state: RunState) -> Update:
        # A fresh dict each run: a consumer may update the statuses in place.
        entries = [{"step": f.step, "title": f.title, "status": "pending"} for f in top]
        get_stream_writer()({"ca_event": "plan", "entries": entries})
        # A new turn on the same thread starts clean: no outputs or counts from the last one.
        update: Update = {"outputs": None, "loops": None, "lanes": None, "last": input_text(state["messages"])}
        for layer in starts:
            update |= await layer.abefore_agent(state, get_runtime()) or {}
        return update

    ends = [m for m in middleware if type(m).aafter_agent is not AgentMiddleware.aafter_agent]

    async def output(state: RunState) -> Update:
        text = render(agent.output, state) if agent.output is not None else state.get("last", "")
        answer = AIMessage(content=text)
        update: Update = {"messages": [answer]}
        for layer in ends:  # e.g. the contract's output rules; a violation raises
            update |= await layer.aafter_agent({**state, "messages": [*state["messages"], answer]}, get_runtime()) or {}
        return update

    graph = builder.graph
    builder.add("plan", plan)
    builder.add("output", output)
    graph.add_edge(START, "plan")
    graph.add_edge("plan", top[0].entry)
    graph.add_edge(top[-1].exit, "output")
    graph.add_edge("output", END)
    compiled = graph.compile(checkpointer=checkpointer, name=agent.name)
    # LangGraph stops a run after 25 supersteps by default; a loop can legitimately take more.
    return compiled.with_config(recursion_limit=max(25, _supersteps(agent.steps) + 10))
