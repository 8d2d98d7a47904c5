"""Traces of runs, read back with the OpenTelemetry SDK's in-memory exporter.

Each test opens the project's real Runtime (SQLite stores, governance, the scripted model) with
tracing installed on an in-memory exporter, runs a task, and reads the span tree: names,
parents, GenAI attributes and the audit records as events.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from framework.runtime import telemetry
from framework.runtime.events import RunEvent, RunFinished
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import REPO, SIDE_EFFECT, write_project


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.install(provider)
    yield exporter
    telemetry.uninstall()


def _events(root: Path, call: Any) -> list[RunEvent]:
    async def main() -> list[RunEvent]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), source="cli", stack=stack)
            return [event async for event in call(runtime)]

    return asyncio.run(main())


def _tree(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_a_tool_calling_run_is_one_agent_span_with_its_model_and_tool_calls(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    effects = tmp_path / "effects.log"
    write_project(
        tmp_path,
        {
            "tools/side.py": SIDE_EFFECT,
            "agents/writer.yaml": f"""
                name: writer
                profile: autonomous
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{{name: append, args: {{file: "{effects}", text: hello}}}}]
                    - done
                tools:
                  - python: tools/side.py:append
            """,
        },
    )
    conversation = uuid.uuid4().hex
    events = _events(tmp_path, lambda rt: rt.send("writer", "write it", conversation=conversation))
    assert isinstance(events[-1], RunFinished) and events[-1].state == "completed"

    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.name == "invoke_agent writer"]
    chats = [s for s in finished if s.name.startswith("chat ")]
    [tool] = [s for s in finished if s.name == "execute_tool append"]
    assert len(chats) == 2 and len(finished) == 4
    assert all(_parent(s) == _id(root) for s in [*chats, tool])  # each a child of the run
    assert root.attributes is not None and tool.attributes is not None and chats[0].attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "writer"
    assert root.attributes["gen_ai.conversation.id"] == conversation
    assert root.attributes["ca.state"] == "completed" and root.attributes["ca.usage.tool_calls"] == 1
    assert root.attributes["ca.usage.cost_usd"] == 0  # a local model's price is known: nothing
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert chats[0].attributes["gen_ai.provider.name"] == chats[0].attributes["gen_ai.request.model"] == "scripted"
    assert [c.name for c in chats] == ["chat scripted", "chat scripted"]
    assert tool.attributes["gen_ai.tool.name"] == "append"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert "gen_ai.tool.call.arguments" not in tool.attributes  # contents only when opted in
    # The tool call started after the first model call ended and before the second began.
    first, second = sorted(chats, key=lambda s: s.start_time or 0)
    assert (first.end_time or 0) <= (tool.start_time or 0) <= (tool.end_time or 0) <= (second.start_time or 0)
    # The audit records of the task are events of its run, in order.
    names = [e.name for e in root.events]
    assert names[0] == names[-1] == "task.state"
    assert names.index("tool.call") < names.index("tool.result")
    states = [e.attributes["ca.state"] for e in root.events if e.name == "task.state" and e.attributes]
    assert states == ["working", "completed"]  # "submitted" is audited before the run starts
    assert effects.read_text() == "hello\n"


def test_a_workflow_has_a_span_per_step_with_its_agent_calls_inside(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    write_project(
        tmp_path,
        {
            "agents/echo.yaml": "name: echo\n",
            "agents/flow.yaml": """
                name: flow
                kind: workflow
                steps:
                  - {id: first, agent: echo, input: "one {{ input }}"}
                  - parallel:
                      - {id: left, agent: echo, input: "left {{ steps.first.output }}"}
                      - {id: right, agent: echo, input: "right {{ steps.first.output }}"}
                output: "{{ steps.left.output }} / {{ steps.right.output }}"
            """,
        },
    )
    events = _events(tmp_path, lambda rt: rt.send("flow", "go", conversation=uuid.uuid4().hex))
    assert isinstance(events[-1], RunFinished) and events[-1].state == "completed", events[-1]
    tree = _tree(spans)
    root = tree["invoke_agent flow"]
    for step in ("first", "parallel-1", "left", "right"):  # the parallel block is a step of its own
        span = tree[f"step {step}"]
        assert _parent(span) == _id(root)
        assert span.attributes is not None and span.attributes["ca.workflow.step"] == step
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    steps = {_id(tree[f"step {n}"]) for n in ("first", "left", "right")}
    assert len(chats) == 3 and {_parent(c) for c in chats} == steps  # each model call inside its step


def test_an_agent_called_in_process_is_traced_inside_its_callers_tool_call(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    effects = tmp_path / "effects.log"
    write_project(
        tmp_path,
        {
            "tools/side.py": SIDE_EFFECT,
            "agents/helper.yaml": f"""
                name: helper
                profile: autonomous
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{{name: append, args: {{file: "{effects}", text: helped}}}}]
                    - done
                tools:
                  - python: tools/side.py:append
            """,
            "agents/boss.yaml": """
                name: boss
                profile: autonomous
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{name: helper, args: {input: "help me"}}]
                    - done
                tools:
                  - agent: helper
                capabilities: {agents: [helper]}
            """,
        },
    )
    events = _events(tmp_path, lambda rt: rt.send("boss", "go", conversation=uuid.uuid4().hex))
    assert isinstance(events[-1], RunFinished) and events[-1].state == "completed", events[-1]
    finished = spans.get_finished_spans()
    tree = _tree(spans)
    root, call, append = tree["invoke_agent boss"], tree["execute_tool helper"], tree["execute_tool append"]
    assert root.context is not None
    assert {s.context.trace_id for s in finished if s.context is not None} == {root.context.trace_id}  # one trace
    assert _parent(call) == _id(root)
    assert call.attributes is not None and call.attributes["gen_ai.tool.name"] == "helper"
    chats = [s for s in finished if s.name.startswith("chat ")]
    by_parent = sorted(_parent(c) == _id(call) for c in chats)
    assert by_parent == [False, False, True, True]  # boss's two model calls, then helper's two inside the call
    assert _parent(append) == _id(call)  # the called agent's tool call too
    assert [s.name for s in finished if s.name.startswith("invoke_agent")] == ["invoke_agent boss"]
    # The called agent's audit records (its task's states, its tool call) are events of the caller's run.
    helper_events = [e for e in root.events if e.attributes and e.attributes.get("ca.agent") == "helper"]
    assert "tool.call" in [e.name for e in helper_events]
    assert effects.read_text() == "helped\n"


def test_a_paused_run_and_its_resumption_are_linked_with_the_decision_as_an_event(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    effects = tmp_path / "effects.log"
    write_project(
        tmp_path,
        {
            "tools/side.py": SIDE_EFFECT,
            "agents/writer.yaml": f"""
                name: writer
                profile: manual
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{{name: append, args: {{file: "{effects}", text: hello}}}}]
                    - done
                tools:
                  - python: tools/side.py:append
            """,
        },
    )
    paused = _events(tmp_path, lambda rt: rt.send("writer", "write it", conversation=uuid.uuid4().hex))
    finished = paused[-1]
    assert isinstance(finished, RunFinished) and finished.state == "input-required"
    # The resumption opens the project again, as `ca approve` in another process does.
    done = _events(tmp_path, lambda rt: rt.decide(finished.task_id, {"decision": "approve"}, by="cli:alice"))
    assert isinstance(done[-1], RunFinished) and done[-1].state == "completed"

    first, second = [s for s in spans.get_finished_spans() if s.name == "invoke_agent writer"]
    assert first.attributes is not None and first.attributes["ca.state"] == "input-required"
    assert first.context is not None and second.context is not None
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert second.attributes is not None and second.attributes["ca.resumed"] is True
    paused_state = first.events[-1].attributes
    assert paused_state is not None and paused_state["ca.state"] == "input-required"
    assert json.loads(str(paused_state["ca.waiting"])) == ["approval"]
    [decision] = [e for e in second.events if e.name == "decision"]
    assert decision.attributes is not None and decision.attributes["ca.decision"] == "approve"
    assert "ca.reason" not in decision.attributes  # no reason given: no attribute, not "null"
    assert effects.read_text() == "hello\n"


HIDE_SDK = """
import sys

class NoSdk:  # as on a default install, where the SDK is an extra that is not there
    def find_spec(self, name, path, target=None):
        if name.split(".")[:2] in (["opentelemetry", "sdk"], ["opentelemetry", "exporter"]):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoSdk())
"""

RUN_ONE = """
import asyncio, os, sys, uuid
from contextlib import AsyncExitStack
from pathlib import Path
from framework.runtime.runtime import Runtime
from framework.spec import load_project

async def main():
    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(Path(os.getcwd())), source="cli", stack=stack)
        return [e async for e in runtime.send("echo", "hi", conversation=uuid.uuid4().hex)]

print(asyncio.run(main())[-1].state)
"""


def _python(root: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "HOME": str(root), **env}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, env=environ, timeout=120, check=False
    )


def test_with_telemetry_off_a_run_needs_nothing_of_the_sdk(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    result = _python(tmp_path, HIDE_SDK + RUN_ONE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "completed"


def test_tracing_asked_for_without_the_sdk_is_one_clear_error(tmp_path: Path) -> None:
    write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    result = _python(tmp_path, HIDE_SDK + RUN_ONE, OTEL_TRACES_EXPORTER="console")
    assert result.returncode != 0
    assert "the OpenTelemetry SDK is not installed" in result.stderr
    assert "pip install 'cleveragents[otel]'" in result.stderr


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_the_standard_variables_switch_tracing_on_and_off(environ: dict[str, str], expected: bool) -> None:
    assert telemetry.wanted(environ) is expected


@pytest.mark.parametrize(
    ("carrier", "continues"),
    [
        ({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, True),
        ({"traceparent": "00-not-a-trace-01"}, False),
        ({"traceparent": 12}, False),  # not a string: not a trace context
        ("traceparent", False),  # a `_meta` that is not an object
        (None, False),
    ],
)
def test_a_carried_trace_context_is_continued_only_when_valid(
    spans: InMemorySpanExporter, carrier: Any, continues: bool
) -> None:
    tracing = telemetry.tracing()
    assert tracing is not None
    with (
        tracing.tracer.start_as_current_span("ambient") as ambient,
        telemetry.continued(carrier),
        tracing.tracer.start_as_current_span("run"),
    ):
        pass
    run = _tree(spans)["run"]
    assert run.parent is not None
    if continues:
        assert (run.parent.trace_id, run.parent.span_id) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    else:  # the current span stays the parent: a bad carrier neither breaks nor orphans the trace
        assert run.parent.span_id == ambient.get_span_context().span_id
