"""Traces of every run, in OpenTelemetry's GenAI semantic conventions (semconv 1.44.0, incubating).

Switched on by the standard variables (docs/observability.md): ``OTEL_TRACES_EXPORTER``
(``otlp``, ``console``, or both, comma-separated; ``none`` is off) or, without it, an OTLP
endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
``OTEL_SDK_DISABLED=true`` wins over both. Off, nothing of the OpenTelemetry SDK is imported:
:func:`tracing` returns None and every hook costs one ``is None`` check.

The spans of a run (all INTERNAL, each the child of the one above it):

    invoke_agent AGENT   a run of a task: a new message, or a paused task resumed (linked to
                         the run that paused); gen_ai.operation.name, gen_ai.agent.name,
                         gen_ai.conversation.id, ca.task.id, ca.source, then usage and
                         ca.state; status ERROR with ca.failure.code when it fails
    step ID              a workflow step (ca.workflow.step)
    chat MODEL           a model call: gen_ai.provider.name, gen_ai.request.model,
                         gen_ai.usage.input_tokens / output_tokens,
                         gen_ai.response.finish_reasons, and ca.usage.cost_usd where the
                         model's price is known (the conventions name no cost attribute yet)
    execute_tool TOOL    a tool call: gen_ai.tool.name, gen_ai.tool.call.id, gen_ai.tool.type

Every audit record of a task (a capability denial, a contract check, a profile decision, an
approval asked and who decided it, a budget stop, each state) is an event on its run's span,
named by the record's kind, with the record's data (masked, as in the audit) as ``ca.*``
attributes. Tool arguments and results, and model output, are recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, masked too.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from framework.compiler.workflow import STEP_NODE
from framework.errors import UsageError
from framework.runtime.governance.secrets import KNOWN
from framework.runtime.otel_switch import wanted
from framework.spec.prices import call_cost

if TYPE_CHECKING:
    from langchain_core.outputs import LLMResult
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

    from framework.runtime.audit import AuditRecord
    from framework.runtime.events import RunFinished

SEMCONV_VERSION = "1.44.0"
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_CAP = 4096
"""Characters of a captured content attribute (arguments, results, output) at most."""


_current: list[Tracing] = []


def tracing() -> Tracing | None:
    """The process's tracing, or None when telemetry is off."""
    return _current[0] if _current else None


def start(environ: Mapping[str, str] | None = None) -> Tracing | None:
    """Set up the SDK from the ``OTEL_*`` variables, once per process; None when they ask for nothing."""
    env = os.environ if environ is None else environ
    if _current or not wanted(env):
        return tracing()
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError as exc:
        raise UsageError(
            f"tracing is switched on (OTEL_* variables) but the OpenTelemetry SDK is not installed ({exc.name}): "
            "install it with pip install 'cleveragents[otel]', or unset the OTEL_* variables"
        ) from None

    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    # A client's traceparent may join its trace, not switch tracing of the server's runs off.
    sampler = None if env.get("OTEL_TRACES_SAMPLER") else ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON)
    provider = TracerProvider(
        resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", "cleveragents")}), sampler=sampler
    )
    for name in (e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")):
        exporter: SpanExporter
        if name in ("", "none"):
            continue
        if name == "console":
            exporter = ConsoleSpanExporter(out=sys.stderr)
        elif name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            if protocol not in (None, "", "http/protobuf"):
                raise UsageError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: ca exports OTLP over HTTP; "
                    "set it to http/protobuf (or unset it) and point the endpoint at the collector's HTTP port (4318)"
                )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:
            raise UsageError(f"OTEL_TRACES_EXPORTER names {name!r}: ca knows 'otlp', 'console' and 'none'")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # a2a-sdk's server and client spans use it too
    return install(provider, contents=env.get(CONTENT_ENV, "").strip().lower() == "true")


def inject(headers: Any) -> None:
    """Add the W3C trace context of the current span to outgoing ``headers`` (an agent call), if tracing."""
    if _current:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)  # the trace context only, never baggage


def extracted(headers: Mapping[str, str]) -> Any:
    """The OpenTelemetry context a request's ``traceparent`` (and ``tracestate``) carries."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(headers)  # a client's baggage is not ours to carry on


CARRIED = ("traceparent", "tracestate")
"""The keys of a W3C trace context in a message (MCP and ACP ``_meta``, A2A message ``metadata``)."""


def carried(carrier: Any) -> dict[str, str]:
    """The W3C trace context keys a message's ``_meta`` / ``metadata`` object carries (strings only)."""
    if not isinstance(carrier, Mapping):
        return {}
    return {key: value for key in CARRIED if isinstance(value := carrier.get(key), str)}


@contextmanager
def continued(carrier: Any) -> Iterator[None]:
    """Inside, the trace context ``carrier`` holds (``traceparent``, ``tracestate``) is current, when
    tracing: what starts there (a run's ``invoke_agent`` span) is its child. A carrier without a
    valid ``traceparent`` changes nothing, so the current context stays the parent."""
    keys = carried(carrier) if _current else {}
    if "traceparent" not in keys:
        yield
        return
    from opentelemetry import context, trace

    found = extracted(keys)
    if not trace.get_current_span(found).get_span_context().is_valid:
        yield
        return
    token = context.attach(found)
    try:
        yield
    finally:
        context.detach(token)


def install(provider: TracerProvider, *, contents: bool = False) -> Tracing:
    """Trace with ``provider`` from now on (the tests' in-memory exporter; :func:`start` otherwise)."""
    _current[:] = [Tracing(provider, contents=contents)]
    return _current[0]


def uninstall() -> None:
    """Stop tracing (flushing what was recorded)."""
    if _current:
        _current.pop().provider.force_flush()


@dataclass
class _Run:
    span: Span
    handler: RunSpans


class Tracing:
    """The tracer, and the open run span of each task (audit records become its events)."""

    def __init__(self, provider: TracerProvider, *, contents: bool) -> None:
        from framework import __version__

        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("cleveragents", __version__, schema_url=_schema_url())
        self.contents = contents
        self._runs: dict[str, _Run] = {}
        self._aliases: dict[str, str] = {}
        """An in-process agent call's task -> its caller's task: its records go to the caller's run."""

    def flush(self) -> None:
        self.provider.force_flush()

    @contextmanager
    def run(
        self,
        *,
        agent: str,
        task_id: str,
        conversation: str,
        source: str,
        prices: Mapping[str, Any],
        paused_by: str = "",
    ) -> Iterator[RunSpans]:
        """The ``invoke_agent`` span of one run; the callback handler that adds its children.

        ``paused_by``: the traceparent of the run that paused this task (a resumed run links to it).
        """
        from opentelemetry import trace
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "invoke_agent",
            gen_ai.GEN_AI_AGENT_NAME: agent,
            gen_ai.GEN_AI_CONVERSATION_ID: conversation,
            "ca.task.id": task_id,
            "ca.source": source,
        }
        links = []
        paused = _span_context(paused_by)
        if paused is not None:
            links.append(trace.Link(paused, {"ca.link": "resumes the run that paused"}))
            attributes["ca.resumed"] = True
        span = self.tracer.start_span(f"invoke_agent {agent}", attributes=attributes, links=links)
        handler = RunSpans(self, span, prices)
        self._runs[task_id] = _Run(span, handler)
        try:
            yield handler
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            raise
        finally:
            handler.close()
            del self._runs[task_id]
            span.end()

    def traceparent(self, task_id: str) -> str:
        """The W3C traceparent of ``task_id``'s open run span ("" when it has none)."""
        run = self._runs.get(task_id)
        if run is None:
            return ""
        context = run.span.get_span_context()
        return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"

    def alias(self, child_task: str, parent_task: str) -> None:
        """Report ``child_task``'s records (an in-process agent call) on ``parent_task``'s run."""
        self._aliases[child_task] = self._aliases.get(parent_task, parent_task)

    def finished(self, task_id: str, event: RunFinished) -> None:
        """Put a run's end on its span: state, usage, and an error status with its code if it failed."""
        from opentelemetry import trace
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        run = self._runs.get(task_id)
        if run is None:
            return
        span = run.span
        span.set_attribute("ca.state", event.state)
        span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, event.usage.input_tokens)
        span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, event.usage.output_tokens)
        span.set_attribute("ca.usage.model_calls", event.usage.model_calls)
        span.set_attribute("ca.usage.tool_calls", event.usage.tool_calls)
        if run.handler.cost is not None:
            span.set_attribute("ca.usage.cost_usd", run.handler.cost)
        if event.failure is not None:
            span.set_attribute("ca.failure.code", event.failure.code)
            span.set_status(trace.StatusCode.ERROR, event.failure.code)

    def audited(self, record: AuditRecord) -> None:
        """An audit record as an event on its task's run span (secrets already masked)."""
        run = self._runs.get(self._aliases.get(record.task_id, record.task_id))
        if run is None:
            return
        attributes: dict[str, Any] = {"ca.audit.seq": record.seq, "ca.task.id": record.task_id}
        if record.agent:
            attributes["ca.agent"] = record.agent
        for key, value in record.data.items():
            if value is not None:  # an attribute has a value or is not there
                attributes[f"ca.{key}"] = _attribute(value)
        run.span.add_event(record.kind, attributes)


class RunSpans(BaseCallbackHandler):
    """LangChain callbacks of one run as spans: workflow steps, model calls, tool calls.

    Called inline, in order, on the run's event loop. A span's parent is the nearest enclosing
    run that has a span (a step, or a tool call for a nested agent's calls), else the run span.
    """

    run_inline = True

    def __init__(self, tracing: Tracing, root: Span, prices: Mapping[str, Any]) -> None:
        self.tracing = tracing
        self.root = root
        self.prices = prices
        self.cost: float | None = None
        """US dollars of the run's model calls, while every price is known; None otherwise."""
        self._priced = True
        self._spans: dict[UUID, Span] = {}
        self._tokens: dict[UUID, object] = {}
        """Tool calls whose span is the current context while they run (an agent call carries it on)."""
        self._models: dict[UUID, str] = {}
        self._parents: dict[UUID, UUID | None] = {}

    def close(self) -> None:
        """End what a cancelled run left open."""
        for span in self._spans.values():
            span.end()
        self._spans.clear()

    def _parent(self, parent_run_id: UUID | None) -> Span:
        while parent_run_id is not None:
            span = self._spans.get(parent_run_id)
            if span is not None:
                return span
            parent_run_id = self._parents.get(parent_run_id)
        return self.root

    def _open(self, run_id: UUID, parent_run_id: UUID | None, name: str, attributes: dict[str, Any]) -> None:
        from opentelemetry import trace

        self._parents[run_id] = parent_run_id
        context = trace.set_span_in_context(self._parent(parent_run_id))
        self._spans[run_id] = self.tracing.tracer.start_span(name, context=context, attributes=attributes)

    def _close(self, run_id: UUID, error: BaseException | None = None) -> Span | None:
        from opentelemetry import trace

        self._parents.pop(run_id, None)
        span = self._spans.pop(run_id, None)
        if span is not None:
            if error is not None:
                span.set_status(trace.StatusCode.ERROR, type(error).__name__)
                span.set_attribute("error.type", type(error).__name__)
            span.end()
        return span

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str(kwargs.get("name") or "")
        if name.startswith(STEP_NODE) and (metadata or {}).get("langgraph_node") == name:  # a workflow's step
            step = name.removeprefix(STEP_NODE)
            self._open(run_id, parent_run_id, f"step {step}", {"ca.workflow.step": step})
        else:
            self._parents[run_id] = parent_run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._close(run_id, _real(error))

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        provider, model = model_of(metadata, kwargs)
        self._models[run_id] = f"{provider}:{model}"
        attributes = {
            gen_ai.GEN_AI_OPERATION_NAME: "chat",
            gen_ai.GEN_AI_PROVIDER_NAME: provider,
            gen_ai.GEN_AI_REQUEST_MODEL: model,
        }
        self._open(run_id, parent_run_id, f"chat {model}", attributes)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        span = self._spans.get(run_id)
        model = self._models.pop(run_id, "")
        if span is not None:
            tokens_in, tokens_out, reason = usage_of(response)
            span.set_attribute(gen_ai.GEN_AI_USAGE_INPUT_TOKENS, tokens_in)
            span.set_attribute(gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS, tokens_out)
            if reason:
                span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, [reason])
            price = call_cost(model, self.prices, tokens_in, tokens_out)
            if price is not None:
                dollars = float(price)
                span.set_attribute("ca.usage.cost_usd", dollars)
                if self._priced:
                    self.cost = (self.cost or 0.0) + dollars
            else:
                self._priced, self.cost = False, None
            message = _message(response)
            if self.tracing.contents and message is not None:
                span.set_attribute("ca.output.text", _content(getattr(message, "content", "")))
        self._close(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._models.pop(run_id, None)
        self._close(run_id, _real(error))

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        name = tool_name(serialized, kwargs)
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: "execute_tool",
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_TYPE: "function",
        }
        if kwargs.get("tool_call_id"):
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = str(kwargs["tool_call_id"])
        if self.tracing.contents:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _content(inputs if inputs is not None else input_str)
        self._open(run_id, parent_run_id, f"execute_tool {name}", attributes)
        from opentelemetry import context, trace

        # The tool's body runs in this task right after this callback: what it sends (an A2A call
        # to another server) carries this span as its parent.
        self._tokens[run_id] = context.attach(trace.set_span_in_context(self._spans[run_id]))

    def _detach(self, run_id: UUID) -> None:
        token = self._tokens.pop(run_id, None)
        if token is not None:
            from opentelemetry import context

            context.detach(token)  # type: ignore[arg-type]

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai

        span = self._spans.get(run_id)
        if span is not None and self.tracing.contents:
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _content(getattr(output, "content", output)))
        if span is not None and getattr(output, "status", "") == "error":  # a refused or failed call
            span.set_attribute("error.type", "tool_error")
        self._detach(run_id)
        self._close(run_id)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._detach(run_id)
        self._close(run_id, _real(error))


def _real(error: BaseException) -> BaseException | None:
    """None for LangGraph's control flow (an interrupt bubbling up is a pause, not an error)."""
    from langgraph.errors import GraphBubbleUp

    return None if isinstance(error, GraphBubbleUp) else error


def tool_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    """A tool call's name as in the YAML (``fs.read``, ``notes.list_notes``), from LangChain's callback."""
    from framework.compiler.tool_names import yaml_name
    from framework.runtime.runner import spec_tool_name

    called = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
    ca_name = (kwargs.get("metadata") or {}).get("ca_name")  # the tool's own metadata
    return yaml_name(called, ca_name if isinstance(ca_name, str) else None) or spec_tool_name(called)


def model_of(metadata: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """A model call's provider and model, as LangChain's callbacks report them (``ls_*`` metadata)."""
    meta = metadata or {}
    provider = str(meta.get("ls_provider") or "unknown")
    model = str(meta.get("ls_model_name") or (kwargs.get("invocation_params") or {}).get("model") or provider)
    return provider, model


def _message(response: LLMResult) -> Any:
    generation = response.generations[0][0] if response.generations and response.generations[0] else None
    return getattr(generation, "message", None)


def usage_of(response: LLMResult) -> tuple[int, int, str]:
    """Input tokens, output tokens and the finish reason of a model call's result."""
    generation = response.generations[0][0] if response.generations and response.generations[0] else None
    message = getattr(generation, "message", None)
    usage = getattr(message, "usage_metadata", None) or {}
    info = getattr(generation, "generation_info", None) or {}
    meta = getattr(message, "response_metadata", None) or {}
    reason = str(info.get("finish_reason") or meta.get("finish_reason") or meta.get("stop_reason") or "")
    return int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)), reason


def _content(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(KNOWN.value(value), default=str, ensure_ascii=False)
    return KNOWN.text(text)[:CONTENT_CAP]


def _attribute(value: Any) -> Any:
    """An audit value as a span attribute: scalars as they are, anything else as JSON."""
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, default=str, ensure_ascii=False, sort_keys=True)


def _span_context(traceparent: str) -> Any:
    """The SpanContext a W3C traceparent names, or None."""
    parts = traceparent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags))


def _schema_url() -> str:
    return f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
