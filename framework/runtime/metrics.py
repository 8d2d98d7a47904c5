"""``ca serve``'s Prometheus metrics (``/metrics``), kept with the official prometheus-client.

What is counted, and from where (one source per figure):

    ca_requests_total{method, code}           every JSON-RPC / REST request: its method and
                                              its answer (HTTP status, or the JSON-RPC error code)
    ca_request_seconds{method}                how long it took to answer
    ca_task_runs_total{agent, state}          runs that ended, by the state they ended in
    ca_tasks{state}                           tasks of the project by state (read at scrape time)
    ca_pending_approvals                      tasks waiting for a person (read at scrape time)
    ca_approval_wait_seconds                  from a pause to its decision
    ca_model_calls_total{agent, model}        model calls
    ca_model_call_seconds{agent, model}       their latency
    ca_tokens_total{agent, model, type}       tokens (type: input, output)
    ca_cost_usd_total{agent, model}           US dollars, for models whose price is known
    ca_tool_calls_total{agent, tool, decision}  tool calls: allowed (by a rule or a person),
                                              denied, rejected
    ca_tool_call_seconds{agent, tool}         their latency

Task states, decisions and tool calls come from the audit (the records every entry point
writes); model calls and latencies from a LangChain callback handler that each agent's model and
tools carry from compile time (:class:`Meter`). Carried by them, not given to each run: a run's
callbacks reach every step of its graph, and only having none spares LangChain and LangGraph
their callback bookkeeping on each of them (~7% of a served request's CPU).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, Callbacks

from framework.errors import CAError, RunError
from framework.runtime.telemetry import model_of, tool_name, usage_of
from framework.spec.prices import call_cost

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.outputs import LLMResult
    from langchain_core.tools import BaseTool

    from framework.compiler.models import ModelHook
    from framework.compiler.tools import ToolHook
    from framework.runtime.audit import AuditRecord
    from framework.runtime.task_record import Task
    from framework.runtime.tasks import TaskStore
    from framework.spec.model import ModelConfig

FINAL = frozenset({"completed", "failed", "canceled", "rejected", "input-required"})
"""The states a run ends in (input-required: it paused)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_UNDER_WAY = 10_000
"""Model and tool calls of one agent measured at once, at most (see :class:`CallMetrics`)."""


class Metrics:
    """The registry of one server, fed by the audit and by the agents' model and tool calls (:class:`Meter`)."""

    def __init__(self, tasks: TaskStore, prices: Mapping[str, Any]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.tasks = tasks
        self.prices = prices
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "ca_requests", "Requests answered, by method and answer", ["method", "code"], registry=r
        )
        self.request_seconds = Histogram("ca_request_seconds", "Time to answer a request", ["method"], registry=r)
        self.runs = Counter("ca_task_runs", "Runs of tasks that ended, by end state", ["agent", "state"], registry=r)
        self.approval_wait = Histogram(
            "ca_approval_wait_seconds",
            "From a pause to its decision",
            buckets=(1, 10, 60, 300, 1800, 3600, 4 * 3600, 24 * 3600, float("inf")),
            registry=r,
        )
        self.model_calls = Counter("ca_model_calls", "Model calls", ["agent", "model"], registry=r)
        self.model_seconds = Histogram("ca_model_call_seconds", "Model call latency", ["agent", "model"], registry=r)
        self.tokens = Counter("ca_tokens", "Tokens, by type (input, output)", ["agent", "model", "type"], registry=r)
        self.cost = Counter("ca_cost_usd", "Cost of model calls whose price is known", ["agent", "model"], registry=r)
        self.tool_calls = Counter(
            "ca_tool_calls", "Tool calls, by governance decision", ["agent", "tool", "decision"], registry=r
        )
        self.tool_seconds = Histogram("ca_tool_call_seconds", "Tool call latency", ["agent", "tool"], registry=r)
        self._store = _StoreCollector()
        r.register(self._store)
        self._measuring: set[asyncio.Task[None]] = set()
        """Approval waits being read from their task records (awaited before each scrape)."""

    async def aexposition(self) -> bytes:
        """The registry in the Prometheus text format, the task counts read with the event loop running."""
        from prometheus_client import generate_latest

        if self._measuring:  # every decision audited before the scrape is in it
            await asyncio.gather(*self._measuring, return_exceptions=True)
        self._store.counts = await self.tasks.acounts()
        return generate_latest(self.registry)

    def audited(self, record: AuditRecord) -> None:
        """Count what an audit record says happened."""
        data = record.data
        if record.kind == "task.state" and data.get("state") in FINAL:
            self.runs.labels(record.agent, str(data["state"])).inc()
        elif record.kind == "tool.call":
            self.tool_calls.labels(record.agent, str(data.get("tool", "")), "allowed").inc()
        elif record.kind == "denial":
            tool = "unknown" if data.get("rule") == "tool.unknown" else str(data.get("tool", ""))
            self.tool_calls.labels(record.agent, tool, "denied").inc()
        elif record.kind == "decision" and "tool" in data:
            if data.get("decision") == "reject":
                self.tool_calls.labels(record.agent, str(data["tool"]), "rejected").inc()
            self._waited(record)

    def _waited(self, record: AuditRecord) -> None:
        """Measure the wait the decision ``record`` ended, from its task record: on the event loop the
        record is read with the loop running (awaited before the next scrape), elsewhere at once."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # appended off any event loop: reading here holds no loop up
            try:
                task = self.tasks.get(record.task_id)
            except CAError as exc:
                _unmeasured(record, exc)
                return
            self._observe_wait(record, task)
            return
        measuring = loop.create_task(self._ameasure_wait(record))
        self._measuring.add(measuring)
        measuring.add_done_callback(self._measuring.discard)

    async def _ameasure_wait(self, record: AuditRecord) -> None:
        try:
            task = await self.tasks.aget(record.task_id)
        except CAError as exc:
            _unmeasured(record, exc)
            return
        self._observe_wait(record, task)

    def _observe_wait(self, record: AuditRecord, task: Task) -> None:
        if task.pending:
            paused = datetime.fromisoformat(task.pending[0].paused_at)
            self.approval_wait.observe(max(0.0, (datetime.fromisoformat(record.ts) - paused).total_seconds()))


class Meter:
    """Where the model and tool calls of a runtime's agents are counted: in :attr:`metrics` once a
    server gives it some (``ca serve``), else nowhere. Its hooks give each agent's model and tools,
    as they are compiled, a :class:`CallMetrics` handler of their own."""

    def __init__(self) -> None:
        self.metrics: Metrics | None = None

    def models(self, hook: ModelHook | None) -> ModelHook:
        """A model hook that measures the model ``hook`` (or the plain build) gives."""

        def measured(build: Callable[[], BaseChatModel], config: ModelConfig | None, agent: str) -> BaseChatModel:
            model = hook(build, config, agent) if hook is not None else build()
            return model.model_copy(update={"callbacks": _adding(model.callbacks, CallMetrics(self, agent))})

        return measured

    def tools(self, hook: ToolHook | None) -> ToolHook:
        """A tool hook that measures the tool ``hook`` (or nothing) gives."""

        def measured(tool: BaseTool, agent: str) -> BaseTool:
            given = hook(tool, agent) if hook is not None else tool
            return given.model_copy(update={"callbacks": _adding(given.callbacks, CallMetrics(self, agent))})

        return measured


def _adding(callbacks: Callbacks, handler: BaseCallbackHandler) -> Callbacks:
    """``callbacks`` (a list, a manager or None) and ``handler``, for this model or tool only."""
    if callbacks is None:
        return [handler]
    if isinstance(callbacks, list):
        return [*callbacks, handler]
    manager = callbacks.copy()
    manager.add_handler(handler, inherit=False)
    return manager


class CallMetrics(BaseCallbackHandler):
    """The model or tool calls of one agent's model or tools: counts, tokens, cost and latency (see
    :class:`Meter`), each under the agent of the task that ran it (the run's ``agent`` metadata,
    which an agent called in-process or a workflow's step inherits), else under this one's."""

    run_inline = True

    def __init__(self, meter: Meter, agent: str) -> None:
        self.meter = meter
        self.agent = agent
        self._started: dict[UUID, tuple[float, str, str]] = {}
        """Calls under way, by LangChain run id: when, what and whose; a call cancelled without an end
        is dropped past MAX_UNDER_WAY."""

    def _start(self, run_id: UUID, label: str, metadata: Mapping[str, Any] | None) -> None:
        if self.meter.metrics is None:
            return
        if len(self._started) >= MAX_UNDER_WAY:  # ends that never came (cancelled tool calls): the oldest go
            del self._started[next(iter(self._started))]
        agent = (metadata or {}).get("agent") or self.agent
        self._started[run_id] = (time.perf_counter(), label, str(agent))

    def on_chat_model_start(
        self, serialized: dict[str, Any] | None, messages: Any, *, run_id: UUID, **kwargs: Any
    ) -> None:
        provider, model = model_of(kwargs.get("metadata"), kwargs)
        self._start(run_id, f"{provider}:{model}", kwargs.get("metadata"))

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._started.pop(run_id, None)
        m = self.meter.metrics
        if started is None or m is None:
            return
        begun, model, agent = started
        m.model_calls.labels(agent, model).inc()
        m.model_seconds.labels(agent, model).observe(time.perf_counter() - begun)
        tokens_in, tokens_out, _ = usage_of(response)
        m.tokens.labels(agent, model, "input").inc(tokens_in)
        m.tokens.labels(agent, model, "output").inc(tokens_out)
        price = call_cost(model, m.prices, tokens_in, tokens_out)
        if price is not None:
            m.cost.labels(agent, model).inc(float(price))

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._started.pop(run_id, None)
        if started is not None and self.meter.metrics is not None:
            self.meter.metrics.model_calls.labels(started[2], started[1]).inc()

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID, **kwargs: Any) -> None:
        self._start(run_id, tool_name(serialized, kwargs), kwargs.get("metadata"))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        started = self._started.pop(run_id, None)
        if started is not None and self.meter.metrics is not None:
            begun, tool, agent = started
            self.meter.metrics.tool_seconds.labels(agent, tool).observe(time.perf_counter() - begun)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.on_tool_end(None, run_id=run_id)  # a failed call took its time too


class _StoreCollector:
    """Gauges read from the task record when scraped: tasks by state, pending approvals."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        """Tasks by state, as :meth:`Metrics.aexposition` read them for this scrape."""

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        counts = self.counts
        by_state = GaugeMetricFamily("ca_tasks", "Tasks of the project, by state", labels=["state"])
        for state, n in sorted(counts.items()):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily(
            "ca_pending_approvals", "Tasks waiting for a person's decision", value=counts.get("input-required", 0)
        )


def _unmeasured(record: AuditRecord, exc: CAError) -> None:
    """A decision whose wait cannot be read from its task record: a task the store no longer has is
    nothing to measure; a store that is busy or away is said, and the metric misses one sample."""
    if not isinstance(exc, RunError):
        logger.warning("approval wait of task %s not measured: %s", record.task_id, exc)
