"""Contracts enforced by the runtime: forbidden calls and answers, required calls, output schemas, retries."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from framework.runtime.audit import AuditLog
from framework.runtime.events import RunFinished, ToolCallFinished
from framework.runtime.runtime import Runtime
from framework.spec import load_project
from tests.conftest import ProjectFactory
from tests.driving import drive, finished


def scripted(replies: str, contract: str, *, tools: str = "[fs.list]") -> str:
    return f"""
        name: bound
        model:
          provider: scripted
          replies: {replies}
        profile: autonomous
        tools: {tools}
        capabilities: {{fs: {{read: ["**"]}}, shell: {{allow: ["git *"]}}}}
        contract: {contract}
    """


def test_a_forbidden_answer_fails_the_task_and_is_audited(make_project: ProjectFactory) -> None:
    root = make_project(
        {"agents/bound.yaml": scripted('["the password: hunter2"]', "{must_not: [{output_matches: 'password\\s*:'}]}")}
    )
    [run] = drive(root, "bound", ("c1", "tell me"))
    end = finished(run)
    assert end.state == "failed"
    assert end.error.startswith("contract violated: ")
    assert "password" in end.error
    with AuditLog.open(root) as log:
        kinds = [r.kind for r in log.query()]
    assert "contract" in kinds


def test_a_forbidden_tool_call_is_denied_before_it_runs(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/bound.yaml": scripted(
                '[{tool_calls: [{name: shell, args: {command: "git push origin main"}}]}, "ok, I will not"]',
                "{must_not: [{tool: shell, args: {command: 'git push*'}}]}",
                tools="[shell]",
            )
        }
    )
    [run] = drive(root, "bound", ("c1", "push it"))
    [result] = [e for e in run if isinstance(e, ToolCallFinished)]
    assert result.is_error and result.result.startswith("denied: ") and "must_not" in result.result
    assert finished(run).state == "completed" and finished(run).output == "ok, I will not"


@pytest.mark.parametrize("tools", ["[fs.list]", "[]"], ids=["with-tools", "without-tools"])
def test_output_schema_violation_is_explained_and_the_model_retries(make_project: ProjectFactory, tools: str) -> None:
    contract = (
        "{must_always: [{output_schema: {type: object, required: [verdict]}}], "
        "on_violation: {action: retry, max_retries: 2}}"
    )
    replies = """['not json at all', '{"verdict": "approve"}']"""
    root = make_project({"agents/bound.yaml": scripted(replies, contract, tools=tools)})
    [run] = drive(root, "bound", ("c1", "review"))
    end = finished(run)
    assert end.state == "completed"
    assert end.output == '{"verdict": "approve"}'
    assert end.usage.model_calls == 2


@pytest.mark.parametrize("tools", ["[fs.list]", "[]"], ids=["with-tools", "without-tools"])
def test_retries_are_bounded(make_project: ProjectFactory, tools: str) -> None:
    contract = "{must_always: [{output_matches: '^VERDICT:'}], on_violation: {action: retry, max_retries: 1}}"
    root = make_project({"agents/bound.yaml": scripted("['nope', 'still nope', 'VERDICT: ok']", contract, tools=tools)})
    [run] = drive(root, "bound", ("c1", "review"))
    end = finished(run)
    assert end.state == "failed" and "contract violated" in end.error
    assert end.usage.model_calls == 2  # the first answer and one retry, no more


def test_a_required_tool_call_must_happen_before_completion(make_project: ProjectFactory) -> None:
    contract = "{must_always: [{tool_called: fs.list}]}"
    missing = make_project({"agents/bound.yaml": scripted("['done without looking']", contract)})
    [run] = drive(missing, "bound", ("c1", "check"))
    assert finished(run).state == "failed" and "fs.list" in finished(run).error


def test_a_required_tool_call_that_happened_satisfies_the_contract(make_project: ProjectFactory) -> None:
    contract = "{must_always: [{tool_called: fs.list}]}"
    root = make_project(
        {"agents/bound.yaml": scripted('[{tool_calls: [{name: fs.list, args: {path: .}}]}, "looked, done"]', contract)}
    )
    [run] = drive(root, "bound", ("c1", "check"))
    end = finished(run)
    assert isinstance(end, RunFinished) and end.state == "completed" and end.output == "looked, done"


def test_a_task_counts_its_own_tool_calls_and_the_conversation_keeps_no_earlier_ones(
    make_project: ProjectFactory,
) -> None:
    """A required call made by an earlier task of the conversation does not satisfy a later one, and
    the conversation's state holds the current task's calls only: it does not grow with every task."""
    contract = "{must_always: [{tool_called: fs.list}]}"
    look = "{tool_calls: [{name: fs.list, args: {path: .}}]}"
    replies = f'[{look}, {look}, "looked twice", {look}, "looked", "did not look"]'
    root = make_project({"agents/bound.yaml": scripted(replies, contract)})
    runs = drive(root, "bound", ("c1", "look twice"), ("c1", "look once"), ("c1", "do not look"))
    assert [finished(run).state for run in runs] == ["completed", "completed", "failed"]
    assert "fs.list" in finished(runs[2]).error

    async def calls_kept() -> list[dict[str, object]]:
        async with AsyncExitStack() as stack:
            runtime = await Runtime.open(load_project(root), stack=stack)
            state = await runtime.bundle.graph("bound").aget_state({"configurable": {"thread_id": "c1"}})
        return list(state.values.get("ca_calls", []))

    assert asyncio.run(calls_kept()) == []  # the last task called nothing; the two before it are gone
