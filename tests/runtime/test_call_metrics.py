"""The metrics handler each agent's model and tools carry (framework.runtime.metrics.Meter)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from framework.compiler.offline import OfflineChatModel
from framework.runtime.metrics import MAX_UNDER_WAY, CallMetrics, Meter, Metrics
from framework.runtime.tasks import TaskStore


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[TaskStore]:
    store = TaskStore.open(tmp_path)
    yield store
    store.close()


def _samples(metrics: Metrics, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {
        frozenset(sample.labels.items()): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def test_a_model_built_through_the_meter_counts_its_calls_once_a_server_has_metrics(tasks: TaskStore) -> None:
    meter = Meter()
    model = meter.models(None)(lambda: OfflineChatModel(agent="echo"), None, "echo")
    asyncio.run(model.ainvoke([HumanMessage("before any metrics")]))  # a CLI run: counted nowhere, and no error
    meter.metrics = Metrics(tasks, {})
    asyncio.run(model.ainvoke([HumanMessage("hello")]))
    calls = _samples(meter.metrics, "ca_model_calls_total")
    assert calls == {frozenset({("agent", "echo"), ("model", "offline:offline")}): 1.0}


def test_a_call_counts_for_the_agent_of_the_task_that_ran_it(tasks: TaskStore) -> None:
    meter = Meter()
    meter.metrics = Metrics(tasks, {})
    model = meter.models(None)(lambda: OfflineChatModel(agent="helper"), None, "helper")
    # the helper called in-process by the boss's task: the run's metadata names the boss (Runner.run)
    asyncio.run(model.ainvoke([HumanMessage("hello")], config={"metadata": {"agent": "boss"}}))
    calls = _samples(meter.metrics, "ca_model_calls_total")
    assert calls == {frozenset({("agent", "boss"), ("model", "offline:offline")}): 1.0}


def test_calls_that_never_end_do_not_pile_up(tasks: TaskStore) -> None:
    meter = Meter()
    meter.metrics = Metrics(tasks, {})
    handler = CallMetrics(meter, "writer")
    for _ in range(MAX_UNDER_WAY + 50):  # tool calls cancelled mid-way: LangChain sends no end for them
        handler.on_tool_start({"name": "append"}, "", run_id=uuid.uuid4())
    assert len(handler._started) == MAX_UNDER_WAY
