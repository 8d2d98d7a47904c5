"""Runs a compiled graph for one request and turns LangGraph's stream into run events."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt, StreamMode

from framework.compiler.agent import RunContext
from framework.compiler.bundle import Bundle, final_text
from framework.errors import CAError, Failure, ProviderError, RunError, Signal, TaskNotWaiting
from framework.runtime import fence
from framework.runtime.events import (
    ArtifactOut,
    MessageOut,
    Paused,
    PlanEntry,
    PlanUpdate,
    RunEvent,
    RunFinished,
    StepUpdate,
    TextChunk,
    ThoughtChunk,
    ToolCallFinished,
    ToolCallStarted,
    Usage,
    UsageUpdate,
)
from framework.runtime.governance.contracts import WITHHELD, holds_output
from framework.runtime.governance.middleware import task_start
from framework.runtime.held_reads import HeldReads
from framework.runtime.pauses import read_pause

_PROVIDER_PACKAGES = {"openai", "anthropic", "httpx", "httpcore", "ollama", "langchain_openai", "langchain_anthropic"}
STREAM_MODES: list[StreamMode] = ["messages", "updates", "custom", "values"]
"""``messages``: the models' text as it is generated. ``values``: the root graph's state after each
step, so the end of a run is read from its stream instead of from the checkpoint it just wrote (a
read and a decode of the whole conversation)."""
WHOLE_MODES: list[StreamMode] = [mode for mode in STREAM_MODES if mode != "messages"]
"""A run whose caller waits for the whole answer: each model turn's text comes once, with the turn's
update. Without ``messages`` LangGraph adds no callback handler to every step and model call."""


_Namespace = tuple[str, ...]
_HOLD_SIGNALS = frozenset({"hold", "release", "withhold"})


class _Translator:
    """State kept while translating one run's stream parts into events.

    Answers of agents with output rules are *held*: governance signals ``hold`` for a graph
    namespace (and the runner holds the asked agent's from the start), and the text and thought
    chunks of that namespace and every namespace below it (its callees) are kept back until
    ``release`` (sent then, joined) or ``withhold`` (dropped). Whatever is still held when the
    run ends was never released and is never sent.
    """

    def __init__(self, *, hold: bool = False, names: Mapping[str, str] | None = None, tokens: bool = True) -> None:
        self.names = names
        """Model-facing tool names -> the YAML's (the bundle's ``tool_names``)."""
        self.tokens = tokens
        """Whether text comes as it is generated (``messages``); else with each model turn's update."""
        self.usage = Usage()
        self.tool_names: dict[str, str] = {}
        self.streamed_ids: set[str] = set()
        self.turn_ids: set[str] = set()
        """Model turns already counted: a message updated in place (marked withheld) comes by again."""
        self.holds: set[_Namespace] = {()} if hold else set()
        self.held: list[tuple[_Namespace, TextChunk | ThoughtChunk]] = []
        self.callees: dict[_Namespace, str] = {}
        """The namespace of a tool task that calls an agent -> that agent's name (the events' source)."""
        self.values: dict[str, Any] | None = None
        """The root graph's state after its last step; None until one has come."""
        self.interrupted = False
        """Whether the root graph stopped at an interrupt (a pause waiting for a decision)."""

    def source(self, ns: _Namespace) -> tuple[str, ...]:
        """Who an event of namespace ``ns`` comes from: the callee's name for an agent call's
        namespace, else the graph node's (a workflow step's id)."""
        return tuple(self.callees.get(ns[: i + 1], segment.rsplit(":", 1)[0]) for i, segment in enumerate(ns))

    def part(self, part: Mapping[str, Any]) -> list[RunEvent]:
        kind, data = part["type"], part["data"]
        ns: _Namespace = tuple(part.get("ns", ()))
        if kind == "values":
            if not ns and isinstance(data, dict):
                self.interrupted = self.interrupted or "__interrupt__" in data
                self.values = data
            return []
        if kind == "custom" and isinstance(data, dict) and data.get("ca_event") in _HOLD_SIGNALS:
            return self.signal(str(data["ca_event"]), ns)
        if kind == "custom" and isinstance(data, dict) and data.get("ca_event") == "callee":
            # The tool task's own namespace: where the callee's events will come from.
            where = tuple(str(data.get("ns") or "").split("|"))
            if where != ("",):
                self.callees.setdefault(where, str(data.get("agent")))
            return []
        source = self.source(ns)
        events: list[RunEvent] = []
        if kind == "updates" and not ns and "__interrupt__" in data:
            self.interrupted = True
        if kind == "messages":
            events = self.message(data[0], source)
        elif kind == "updates":
            events = [e for node, update in data.items() for e in self.update(node, update, source)]
        elif kind == "custom" and isinstance(data, dict):
            events = self.custom(data, source)
        if self.holds and any(isinstance(e, TextChunk | ThoughtChunk) for e in events):
            return self.keep_back(events, ns)
        return events

    def _held(self, ns: _Namespace) -> bool:
        return any(ns[: len(root)] == root for root in self.holds)

    def keep_back(self, events: list[RunEvent], ns: _Namespace) -> list[RunEvent]:
        if not self._held(ns):
            return events
        shown: list[RunEvent] = []
        for event in events:
            if isinstance(event, TextChunk | ThoughtChunk):
                self.held.append((ns, event))
            else:
                shown.append(event)
        return shown

    def signal(self, signal: str, ns: _Namespace) -> list[RunEvent]:
        """Apply a hold signal of namespace ``ns``; the chunks it lets go."""
        if signal == "hold":
            self.holds.add(ns)
            return []
        below = [item for item in self.held if item[0][: len(ns)] == ns]
        if signal == "release":
            self.holds.discard(ns)
            below = [item for item in below if not self._held(item[0])]  # an outer hold still keeps them
        self.held = [item for item in self.held if item not in below]
        if signal == "withhold":
            return []
        return _joined([event for _, event in below])

    def message(self, message: BaseMessage, source: tuple[str, ...]) -> list[RunEvent]:
        if isinstance(message, AIMessageChunk):
            if message.id:
                self.streamed_ids.add(message.id)
            return self._text_of(message, source)
        if isinstance(message, AIMessage) and message.id not in self.streamed_ids and message.text:
            return [TextChunk(message.text, source)]
        return []

    def update(self, node: str, update: Any, source: tuple[str, ...]) -> list[RunEvent]:
        if node == "__interrupt__":
            return [self.interrupt(i, source) for i in update]
        # A node that wrote a key twice (a model call's answer, then governance's update of it) comes as a list.
        parts = update if isinstance(update, list) else [update]
        found = [part.get("messages", []) for part in parts if isinstance(part, dict)]
        messages = [m for some in found for m in (some if isinstance(some, list) else [some])]
        # An answer that broke the contract comes again in the same update, marked withheld (a model
        # turn checked inside its model call): without tokens, its text must not come from either.
        withheld = {m.id for m in messages if isinstance(m, AIMessage) and m.response_metadata.get(WITHHELD)}
        events: list[RunEvent] = []
        for message in messages:
            if isinstance(message, AIMessage):
                events.extend(self.model_turn(message, source, shown=message.id not in withheld))
            elif isinstance(message, ToolMessage):
                name = self.tool_names.get(message.tool_call_id) or spec_tool_name(message.name or "tool", self.names)
                events.append(
                    ToolCallFinished(message.tool_call_id, name, message.text, message.status == "error", source)
                )
                artifact = message.artifact if isinstance(message.artifact, dict) else {}
                if artifact.get("remote") and isinstance(artifact.get("usage"), dict):
                    # A remote callee's usage does not stream through this graph: count it here
                    # (a local callee's model turns already came through as nested updates).
                    remote = artifact["usage"]
                    self.usage = self.usage + Usage(
                        int(remote.get("input_tokens", 0)),
                        int(remote.get("output_tokens", 0)),
                        int(remote.get("model_calls", 0)),
                        int(remote.get("tool_calls", 0)),
                    )
                    events.append(UsageUpdate(self.usage))
        return events

    def model_turn(self, message: AIMessage, source: tuple[str, ...], *, shown: bool = True) -> list[RunEvent]:
        if message.id:
            if message.id in self.turn_ids:
                return []
            self.turn_ids.add(message.id)
        events: list[RunEvent] = [] if self.tokens or not shown else self._text_of(message, source)
        for call in message.tool_calls:
            name = spec_tool_name(call["name"], self.names)
            call_id = call.get("id") or ""
            self.tool_names[call_id] = name
            events.append(ToolCallStarted(call_id, name, dict(call.get("args", {})), source))
        meta = message.usage_metadata
        if meta is not None:
            self.usage = self.usage + Usage(
                meta.get("input_tokens", 0), meta.get("output_tokens", 0), 1, len(message.tool_calls)
            )
            events.append(UsageUpdate(self.usage))
        return events

    @staticmethod
    def _text_of(message: AIMessage, source: tuple[str, ...]) -> list[RunEvent]:
        """A model turn's (or a streamed chunk's) reasoning and text, as thought and text chunks."""
        events: list[RunEvent] = []
        if isinstance(message.content, list):  # only block content can hold reasoning
            events.extend(ThoughtChunk(thought, source) for thought in _reasoning(message))
        if message.text:
            events.append(TextChunk(message.text, source))
        return events

    @staticmethod
    def interrupt(item: Interrupt, source: tuple[str, ...]) -> Paused:
        payload = item.value if isinstance(item.value, dict) else {"message": str(item.value)}
        return Paused(item.id, payload, read_pause(payload), source)

    @staticmethod
    def custom(data: dict[str, Any], source: tuple[str, ...]) -> list[RunEvent]:
        kind = data.get("ca_event")
        if kind == "step":
            return [
                StepUpdate(
                    str(data.get("step", "")),
                    data.get("status", "started"),
                    str(data.get("title", "")),
                    str(data.get("kind", "")),
                    source,
                    ended_by=data.get("ended_by", ""),
                )
            ]
        if kind == "plan":
            entries = tuple(
                PlanEntry(str(e.get("step", "")), str(e.get("title", "")), e.get("status", "pending"))
                for e in data.get("entries", [])
            )
            return [PlanUpdate(entries, source)]
        if kind == "artifact":
            parts = tuple(p for p in data.get("parts", []) if isinstance(p, dict))
            step = str(data.get("step", ""))
            artifact_id = "/".join((*source, step)) if source else step
            return [
                ArtifactOut(artifact_id, str(data.get("name", step)), parts, str(data.get("description", "")), source)
            ]
        if kind == "message":
            return [MessageOut(str(data.get("text", "")), source)]
        if kind == "child":  # a remote callee's progress: nested under the tool that called it
            return _child_event(data.get("event"), (*source, str(data.get("agent") or "remote")))
        return []


def _joined(chunks: list[TextChunk | ThoughtChunk]) -> list[RunEvent]:
    """Consecutive chunks of one kind and source as one chunk."""
    out: list[RunEvent] = []
    for chunk in chunks:
        last = out[-1] if out else None
        if isinstance(last, type(chunk)) and last.source == chunk.source:
            out[-1] = replace(chunk, text=last.text + chunk.text)
        else:
            out.append(chunk)
    return out


def _child_event(event: Any, source: tuple[str, ...]) -> list[RunEvent]:
    """A remote callee's event (as ``event_to_json`` wrote it) rebuilt, with a nested source."""
    if not isinstance(event, dict):
        return []
    kind = event.get("kind")
    where = (*source, *[str(s) for s in event.get("source", [])])
    if kind == "text" and event.get("text"):
        return [TextChunk(str(event["text"]), where)]
    if kind == "tool_call":
        return [
            ToolCallStarted(
                str(event.get("call_id", "")), str(event.get("tool", "")), dict(event.get("args") or {}), where
            )
        ]
    if kind == "tool_result":
        return [
            ToolCallFinished(
                str(event.get("call_id", "")),
                str(event.get("tool", "")),
                str(event.get("result", "")),
                bool(event.get("is_error")),
                where,
            )
        ]
    if kind == "step":
        return [
            StepUpdate(
                str(event.get("step", "")),
                event.get("status", "started"),
                str(event.get("title", "")),
                str(event.get("step_kind", "")),
                where,
                ended_by=event.get("ended_by", ""),
            )
        ]
    return []


def _reasoning(message: AIMessage) -> list[str]:
    """Reasoning text of a message or chunk: standard reasoning blocks, and Anthropic's thinking blocks."""
    found = []
    for raw in message.content_blocks:
        block: dict[str, Any] = dict(raw)
        if block.get("type") == "reasoning" and block.get("reasoning"):
            found.append(str(block["reasoning"]))
        elif block.get("type") == "non_standard":
            value = block.get("value") or {}
            if isinstance(value, dict) and value.get("type") == "thinking" and value.get("thinking"):
                found.append(str(value["thinking"]))
    return found


def spec_tool_name(model_name: str, known: Mapping[str, str] | None = None) -> str:
    """``fs_read`` -> ``fs.read``: a builtin's, or one of ``known`` (a bundle's ``tool_names``: MCP
    tools' ``SERVER.TOOL``); other names are already spec names."""
    from framework.spec.tools import BUILTIN_TOOLS

    if known and model_name in known:
        return known[model_name]
    for name in BUILTIN_TOOLS:
        if name.replace(".", "_") == model_name:
            return name
    return model_name


TASK_KEY = "ca_task"
"""The key of a checkpoint's metadata that names the task whose run wrote it."""


class Runner:
    """Runs agents of one Bundle. A conversation is a LangGraph thread (``thread_id``)."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle

    async def run(
        self,
        agent: str,
        text: str | None = None,
        *,
        thread_id: str,
        skill: str | None = None,
        context: RunContext | None = None,
        resume: Any = None,
        callbacks: list[Any] | None = None,
        tokens: bool = True,
        again: bool = False,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[RunEvent]:
        """Stream the events of one turn: a new message (``text``) or decisions for a pause (``resume``).

        ``callbacks``: LangChain callback handlers for the run (its trace spans, when tracing is on).
        ``tokens``: the models' text as it is generated; else each model turn's text in one chunk,
        when the turn ends (for a caller that waits for the whole answer: cheaper).
        ``again``: the task's run (``context.task_id``) was cut off in a process that died. When the
        conversation's last checkpoint is that run's — it got to its end or pause, and was stopped
        before its record said so — the run goes on from there (a pause pauses again, an end is the
        answer) instead of sending ``text`` a second time.
        ``abandoned``: asked when a new message finds its conversation paused, whether a task that
        ended (canceled, failed) left that pause (the task store knows); if so, the tool calls it held
        are answered "cancelled by the user" (:func:`_answer_held_calls`) and the message goes on, else
        the conversation waits for its decision."""
        translator = _Translator()
        context = replace(context or RunContext(), skill=skill, conversation_id=thread_id)
        try:
            await self.bundle.prepare(agent)  # MCP servers start here, not on the event loop's thread
            graph = await self.bundle.agraph(agent)
            # A resumed run starts its stream again: the asked agent's answer is held from the start.
            translator = _Translator(
                hold=holds_output(self.bundle.agent(agent).contract), names=self.bundle.tool_names, tokens=tokens
            )
            config: RunnableConfig = {
                "configurable": {"thread_id": thread_id, **({fence.KEY: context.fence} if context.fence else {})},
                # Each checkpoint names the agent whose conversation it is and the task that wrote it.
                "metadata": {"agent": agent, **({TASK_KEY: context.task_id} if context.task_id else {})},
            }
            if callbacks:
                config["callbacks"] = callbacks
            held = getattr(self.bundle.checkpointer, "held", None)
            # The conversation's checkpoint is read once for the checks here and the graph's start.
            with held.holding(thread_id) if isinstance(held, HeldReads) else nullcontext():
                state = await graph.aget_state(config)
                goes_on = again and bool(context.task_id) and (state.metadata or {}).get(TASK_KEY) == context.task_id
                if (
                    state.interrupts
                    and resume is None
                    and not goes_on
                    and _owner(state) in (None, agent)
                    and abandoned is not None
                    and await abandoned()
                ):
                    await _answer_held_calls(graph, thread_id, agent, state)
                    state = await graph.aget_state(config)
                self._check_thread(state, agent, thread_id, resuming=resume is not None, goes_on=goes_on)
                if skill is not None:
                    self.bundle.check_skill(agent, skill)
                payload: Any = None  # goes on: the graph continues from its checkpoint
                if resume is not None:
                    payload = Command(resume=resume)
                elif not goes_on:
                    payload = _message(graph, state.values, text or "", context)
                async for part in graph.astream(
                    payload,
                    config,
                    context=context,
                    stream_mode=STREAM_MODES if tokens else WHOLE_MODES,
                    subgraphs=True,
                    version="v2",
                    durability="exit",
                ):
                    for event in translator.part(part):
                        yield event
            values, interrupted = translator.values, translator.interrupted
            if values is None:  # no step of the root graph ran: what the checkpoint holds
                state = await graph.aget_state(config)
                values, interrupted = state.values, bool(state.interrupts)
        except Signal:
            raise
        except CAError as exc:
            yield RunFinished.failed(Failure.of(exc), translator.usage)
            return
        except Exception as exc:  # the model, a provider, or a step failed: the run fails, the process goes on
            yield RunFinished.failed(Failure.of(self._translate(agent, exc)), translator.usage)
            return
        if interrupted:
            yield RunFinished("input-required", usage=translator.usage)
            return
        stop = values.get("ca_stop") or {}
        if stop.get("failure"):  # governance ended the task failed (a contract violation), typed in the state
            yield RunFinished.failed(Failure.from_json(stop["failure"]), translator.usage)
            return
        yield RunFinished(
            "completed",
            output=final_text(values),
            usage=translator.usage,
            stop_reason=str(stop.get("reason", "end_turn")),
        )

    @staticmethod
    def _check_thread(state: Any, agent: str, thread_id: str, *, resuming: bool, goes_on: bool) -> None:
        """That the conversation (its ``state``) is ``agent``'s and waiting (or not) as it should:
        waiting for the decision a run resumes with, and for none when a new message comes (a run that
        ``goes_on`` from its own checkpoint may find its own pause there)."""
        owner = _owner(state)
        if owner and owner != agent:
            raise RunError(f"conversation {thread_id!r} belongs to agent {owner!r}, not {agent!r}")
        if resuming and not state.interrupts:
            raise TaskNotWaiting(f"conversation {thread_id!r} is not waiting for a decision")
        if not resuming and not goes_on and state.interrupts:
            raise RunError(
                f"conversation {thread_id!r} is waiting for a decision; answer it before sending a new message"
            )

    def _translate(self, agent: str, exc: Exception) -> CAError:
        """A foreign exception as an error of the tree, by where it comes from: a provider package's
        is a ProviderError naming the model and server; anything else fails the run as it is."""
        text = f"{type(exc).__name__}: {exc}"
        package = type(exc).__module__.split(".")[0]
        if package not in _PROVIDER_PACKAGES:
            return RunError(text, data={"exception": type(exc).__name__})
        if (cause := _root_cause(exc)) is not None:
            text = f"{text} ({cause})"
        spec = self.bundle.project.agents.get(agent)
        model = getattr(spec, "model", None) or self.bundle.project.config.defaults.model
        data: dict[str, Any] = {"agent": agent, "exception": type(exc).__name__}
        if model is None:
            return ProviderError(f"model call failed: {text}", data=data)
        data["model"] = model.label()
        if model.base_url:
            data["server"] = model.base_url
        where = f" at {model.base_url}" if model.base_url else ""
        return ProviderError(f"model call failed for agent {agent!r} ({model.label()}{where}): {text}", data=data)


async def _answer_held_calls(graph: Any, thread_id: str, agent: str, state: Any) -> None:
    """Close the pause a canceled (or failed) task left in the conversation (its ``state``): the tool
    calls it held are answered "cancelled by the user" (as if the tools ran), so the history stays valid
    for every provider and the next message starts a new turn. The update names the conversation's
    agent, as every checkpoint of it does, and no task (a run that goes on from its own checkpoint
    must not take it for its own)."""
    messages = (state.values or {}).get("messages", [])
    last = messages[-1] if messages else None
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    closing = [
        ToolMessage("cancelled by the user", tool_call_id=call["id"] or "", name=call["name"], status="error")
        for call in last.tool_calls
        if call.get("id") not in answered
    ]
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "metadata": {"agent": agent}}
    await graph.aupdate_state(config, {"messages": closing}, as_node="tools")


def _owner(state: Any) -> str | None:
    """The agent whose conversation a graph state is (its checkpoints name it); None for a new one."""
    return (state.metadata or {}).get("agent") or None


def _root_cause(exc: BaseException) -> str | None:
    """What lies under a provider's error, when it says more: the SDKs answer every network failure
    "Connection error." and keep the reason (refused, unknown host, reset) in the exceptions it
    was raised ``from``. The deepest of those whose text is not already said, on one line and at
    most 300 characters; None when none is. Only explicit causes are followed: an exception that
    was merely being handled meanwhile says nothing about this one."""
    said = str(exc)
    found: str | None = None
    seen = {id(exc)}
    current = exc.__cause__
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        text = " ".join(str(current).split())
        if text and text not in said:
            found = text if len(text) <= 300 else text[:299] + "…"
        current = current.__cause__
    return found


def _message(graph: Any, values: Mapping[str, Any], text: str, context: RunContext) -> dict[str, Any]:
    """A new message's input: the message, and its task's start where governance counts the task
    (:func:`~framework.runtime.governance.middleware.task_start`; as a graph node it was a superstep more)."""
    payload: dict[str, Any] = {"messages": [HumanMessage(text)]}
    if "ca_task" in graph.channels:
        payload |= task_start(values, context.task_id or uuid.uuid4().hex) or {}
    return payload
