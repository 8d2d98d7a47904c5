"""Through the real Runtime (offline models, in-process): a pause says what it waits for as a typed
variant, and a failure keeps its kind across an agent call."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from framework.runtime.events import Paused, RunEvent, RunFinished
from framework.runtime.pauses import BudgetExtension, Gate, Pause, Question, ToolApproval
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import ProjectFactory

AGENTS = {
    "agents/writer.yaml": "name: writer\ntools: [fs.write]\ncapabilities: {fs: {write: ['out/**']}}\n",
    "agents/shipper.yaml": (
        "name: shipper\nkind: workflow\nsteps:\n  - {id: check, gate: {message: 'Ship it?', timeout: 5m}}\n"
    ),
    "agents/asker.yaml": "name: asker\nkind: workflow\nsteps:\n  - {id: who, ask: {message: 'Who is asking?'}}\n",
    "agents/counted.yaml": (
        "name: counted\nprofile: autonomous\ntools: [fs.list]\ncapabilities: {fs: {read: ['**']}}\n"
        "budget: {max_turns: 1, on_exceed: ask}\n"
    ),
    "agents/bound.yaml": "name: bound\nprofile: autonomous\ncontract: {must_not: [{output_matches: 'You said'}]}\n",
    "agents/relay.yaml": "name: relay\nkind: workflow\nsteps:\n  - {id: pass, agent: bound}\n",
}


def run_once(root: Path, agent: str, text: str) -> list[RunEvent]:
    async def go() -> list[RunEvent]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            return [e async for e in runtime.send(agent, text, conversation="c1")]

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("agent", "text", "expected"),
    [
        (
            "writer",
            '@tool fs.write {"path": "out/a.txt", "content": "a"}',
            ToolApproval(
                'writer wants to run fs.write {"content": "a", "path": "out/a.txt"}',
                "writer",
                "fs.write",
                "",
                {"path": "out/a.txt", "content": "a"},
                "",
                ("approve", "reject", "edit", "always"),
            ),
        ),
        ("shipper", "go", Gate("Ship it?", "check", 300.0)),
        ("asker", "go", Question("Who is asking?", "who")),
        ("counted", '@tool fs.list {"path": "."}', BudgetExtension("", "counted", "max_turns", 1.0, 1.0)),
    ],
    ids=["approval", "gate", "ask", "budget"],
)
def test_a_pause_says_what_it_waits_for_as_its_variant(
    make_project: ProjectFactory, agent: str, text: str, expected: Pause
) -> None:
    events = run_once(make_project(AGENTS), agent, text)
    [paused] = [e for e in events if isinstance(e, Paused)]
    pause = paused.pause
    if isinstance(pause, ToolApproval):  # the call id and the profile's reason vary; the rest is fixed
        assert pause.call_id and pause.reason
        pause = ToolApproval(pause.message, pause.agent, pause.tool, "", pause.args, "", pause.decisions)
    if isinstance(pause, BudgetExtension):
        assert pause.message.startswith("task budget max_turns reached: used 1 of 1. Allow ")
        pause = BudgetExtension("", pause.agent, pause.limit, pause.used, pause.cap, pause.decisions)
    assert pause == expected
    assert paused.payload["kind"] == expected.kind  # the wire form is unchanged


def test_a_callee_that_breaks_its_contract_fails_the_calling_workflow_as_a_contract_violation(
    make_project: ProjectFactory,
) -> None:
    events = run_once(make_project(AGENTS), "relay", "tell me")
    end = events[-1]
    assert isinstance(end, RunFinished) and end.state == "failed"
    assert end.failure is not None
    assert (end.failure.kind, end.failure.code) == ("ContractViolation", "contract_violation")
    assert end.error.startswith("contract violated: ")
