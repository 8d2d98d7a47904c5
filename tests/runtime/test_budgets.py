"""Budgets through the real Runtime: an agent told to exceed each cap stops within one model call.

Every test drives agents in-process with the offline model (one tool call per ``@tool`` line, one
line per model turn) or the scripted one, and checks what a user sees: the run's final event,
its stop reason and final text, the usage it reports, and which tool calls ran.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from framework.runtime.audit import AuditLog
from framework.runtime.events import Paused, RunEvent, Usage, UsageUpdate
from tests.conftest import ProjectFactory
from tests.driving import drive, finished, results

LIST = '@tool fs.list {"path": "."}'
LIST_30 = "list the folder, again and again\n" + "\n".join([LIST] * 30)


def lister(budget: str, *, name: str = "worker") -> str:
    """An autonomous offline agent that may list the project: it does what its message's @tool lines say."""
    return f"""
        name: {name}
        model: offline
        profile: autonomous
        tools: [fs.list]
        capabilities: {{fs: {{read: ["**"]}}}}
        budget: {budget}
    """


def caller(name: str, callee: str, budget: str = "{}") -> str:
    """An autonomous offline agent that may call ``callee`` as a tool (and list the project)."""
    return f"""
        name: {name}
        model: offline
        profile: autonomous
        tools: [fs.list, {{agent: {callee}}}]
        capabilities: {{agents: [{callee}], fs: {{read: ["**"]}}}}
        budget: {budget}
    """


def ask_agent(callee: str, text: str) -> str:
    """The @tool line that makes an offline agent ask ``callee`` ``text``."""
    return f"@tool {callee} " + json.dumps({"input": text})


def send(root: Path, agent: str, text: str) -> list[RunEvent]:
    """One task in conversation c1; its events."""
    [events] = drive(root, agent, ("c1", text))
    return events


def executed(events: Sequence[RunEvent], tool: str = "fs.list", *, nested: bool = False) -> int:
    """How many calls of ``tool`` ran (a refused call comes back as an error result)."""
    return sum(1 for e in results(events, nested=nested) if e.tool == tool and not e.is_error)


def usage_after_each_call(events: Sequence[RunEvent]) -> list[Usage]:
    """Cumulative usage after each model call of the run."""
    return [e.usage for e in events if isinstance(e, UsageUpdate)]


def assert_within_one_call(totals: Sequence[float], cap: float) -> None:
    """The cap was reached, and only by the last model call: before it the run was under the cap."""
    assert len(totals) >= 2, totals
    last_call = totals[-1] - totals[-2]
    assert totals[-1] >= cap
    assert totals[-1] - cap < last_call  # the overshoot is smaller than one model call
    assert totals[-2] < cap


# -- each budget dimension stops the run within one model call ------------------------------


def test_max_turns_stops_the_run_at_the_cap(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{max_turns: 4}")})
    events = send(root, "worker", LIST_30)
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "max_turn_requests")
    assert end.output == "Stopped: task budget max_turns reached: used 4 of 4."
    assert end.usage.model_calls == 4
    assert executed(events) == 4  # one listing per model turn, none after the cap


def test_max_tool_calls_stops_the_run_at_the_cap(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{max_tool_calls: 3}")})
    events = send(root, "worker", LIST_30)
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "max_turn_requests")
    assert end.output == "Stopped: task budget max_tool_calls reached: used 3 of 3."
    assert executed(events) == 3
    assert end.usage.model_calls == 3  # the call that would have made a fourth never happened


def test_max_tool_calls_refuses_the_calls_of_one_turn_beyond_the_cap(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/worker.yaml": """
                name: worker
                model:
                  provider: scripted
                  replies:
                    - tool_calls: [{name: fs.list, args: {path: .}}, {name: fs.list, args: {path: .}},
                                   {name: fs.list, args: {path: .}}, {name: fs.list, args: {path: .}},
                                   {name: fs.list, args: {path: .}}]
                    - never reached
                profile: autonomous
                tools: [fs.list]
                capabilities: {fs: {read: ["**"]}}
                budget: {max_tool_calls: 3}
            """
        }
    )
    events = send(root, "worker", "list the folder five times at once")
    end = finished(events)
    assert executed(events) == 3
    refused = [e for e in results(events) if e.is_error]
    assert len(refused) == 2
    assert all(e.result == "denied: the task's budget of tool calls is spent" for e in refused)
    assert (end.stop_reason, end.output) == (
        "max_turn_requests",
        "Stopped: task budget max_tool_calls reached: used 3 of 3.",
    )


TOKEN_CAPS: dict[str, tuple[int, Callable[[Usage], int]]] = {
    "max_tokens": (2000, lambda u: u.total_tokens),
    "max_input_tokens": (1500, lambda u: u.input_tokens),
    "max_output_tokens": (40, lambda u: u.output_tokens),
}


@pytest.mark.parametrize("limit", list(TOKEN_CAPS))
def test_a_token_cap_stops_the_run_within_one_model_call(make_project: ProjectFactory, limit: str) -> None:
    cap, measure = TOKEN_CAPS[limit]
    root = make_project({"agents/worker.yaml": lister(f"{{{limit}: {cap}}}")})
    events = send(root, "worker", LIST_30)
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "max_tokens")
    used = measure(end.usage)
    assert end.output == f"Stopped: task budget {limit} reached: used {used} of {cap}."
    assert_within_one_call([measure(u) for u in usage_after_each_call(events)], cap)
    assert executed(events) == end.usage.model_calls  # every turn but the stop listed the folder


def test_max_cost_usd_stops_the_run_within_one_model_call(make_project: ProjectFactory) -> None:
    per_input, per_output = 1000, 2000  # US dollars per million tokens: a few calls cost cents
    replies = "".join("\n                    - tool_calls: [{name: fs.list, args: {path: .}}]" for _ in range(30))
    root = make_project(
        {
            "ca.yaml": f"prices: {{scripted: {{input_per_mtok: {per_input}, output_per_mtok: {per_output}}}}}\n",
            "agents/worker.yaml": f"""
                name: worker
                model:
                  provider: scripted
                  replies:{replies}
                profile: autonomous
                tools: [fs.list]
                capabilities: {{fs: {{read: ["**"]}}}}
                budget: {{max_cost_usd: 0.5}}
            """,
        }
    )
    events = send(root, "worker", "list the folder until the money runs out")
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "max_tokens")
    assert end.output.startswith("Stopped: task budget max_cost_usd reached: used 0.")
    assert end.output.endswith(" USD of 0.5 USD.")
    costs = [(u.input_tokens * per_input + u.output_tokens * per_output) / 1e6 for u in usage_after_each_call(events)]
    assert f"used {costs[-1]:.4g} USD" in end.output  # the price from ca.yaml is what was charged
    assert_within_one_call(costs, 0.5)


NAP = '''
import time


def nap() -> str:
    """Rest for 0.3 seconds."""
    time.sleep(0.3)
    return "rested"
'''


def test_max_duration_stops_the_run_within_one_model_call(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "tools/slow.py": NAP,
            "agents/sleeper.yaml": """
                name: sleeper
                model: offline
                profile: autonomous
                tools: [{python: "tools/slow.py:nap"}]
                budget: {max_duration: 1s}
            """,
        }
    )
    events = send(root, "sleeper", "rest\n" + "\n".join(["@tool nap {}"] * 20))
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "max_turn_requests")
    assert end.output.startswith("Stopped: task budget max_duration reached: used 1.")
    assert end.output.endswith(" s of 1 s.")
    naps = executed(events, "nap")
    # A model call starts only while under 1 s: before the n-th one, n-1 naps (0.3 s each) were done.
    assert 1 <= naps <= 4
    assert end.usage.model_calls == naps


@pytest.mark.parametrize(("max_depth", "c_runs"), [(1, False), (2, True)])
def test_max_depth_refuses_the_agent_call_one_hop_too_deep(
    make_project: ProjectFactory, max_depth: int, c_runs: bool
) -> None:
    root = make_project(
        {
            "agents/a.yaml": caller("a", "b", f"{{max_depth: {max_depth}}}"),
            "agents/b.yaml": caller("b", "c"),  # no budget of its own: a's cap binds it
            "agents/c.yaml": lister("{}", name="c"),
        }
    )
    events = send(root, "a", "delegate\n" + ask_agent("b", "pass it on\n" + ask_agent("c", "hello from a")))
    end = finished(events)
    assert (end.state, end.stop_reason) == ("completed", "end_turn")
    [b_result] = results(events)
    assert b_result.tool == "b" and not b_result.is_error  # a → b is within the cap
    [c_result] = results(events, nested=True)
    assert c_result.tool == "c"
    if c_runs:
        assert not c_result.is_error and c_result.result == "[c] You said: hello from a"
    else:
        assert c_result.is_error and c_result.result == "denied: agent calls may nest 1 deep"
        assert "c failed: denied: agent calls may nest 1 deep" in end.output  # the model saw the refusal


# -- on_exceed --------------------------------------------------------------------------------


def test_on_exceed_fail_fails_the_task_naming_the_limit(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{max_turns: 2, on_exceed: fail}")})
    events = send(root, "worker", LIST_30)
    end = finished(events)
    assert end.state == "failed"
    assert end.error == "task budget max_turns reached: used 2 of 2 (on_exceed: fail)"
    assert end.usage.model_calls == 2 and executed(events) == 2


def _budget_pause(events: Sequence[RunEvent]) -> dict[str, Any]:
    [pause] = [e for e in events if isinstance(e, Paused)]
    assert finished(events).state == "input-required"
    return pause.payload


def test_on_exceed_ask_pauses_and_an_approval_widens_the_cap_by_extend_by(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{max_turns: 4, on_exceed: ask, extend_by: 0.5}")})
    first, second = drive(root, "worker", ("c1", LIST_30), {"decision": "approve"})

    asked = _budget_pause(first)
    assert asked["kind"] == "budget" and asked["limit"] == "max_turns"
    assert (asked["used"], asked["cap"]) == (4, 4)
    assert asked["message"] == "task budget max_turns reached: used 4 of 4. Allow 50% more?"
    assert executed(first) == 4

    again = _budget_pause(second)  # approved: 4 × 1.5 = 6 turns, then it asks again
    assert (again["used"], again["cap"]) == (6, 6)
    # The resumed run made 2 more calls; the task reports its whole usage (4 + 2).
    assert finished(second).usage.model_calls == 6 and executed(second) == 2


def test_on_exceed_ask_rejected_stops_the_task(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{max_turns: 4, on_exceed: ask}")})
    first, second = drive(root, "worker", ("c1", LIST_30), {"decision": "reject"})
    assert _budget_pause(first)["limit"] == "max_turns"
    end = finished(second)
    assert (end.state, end.stop_reason) == ("completed", "max_turn_requests")
    assert end.output == "Stopped: task budget max_turns reached: used 4 of 4."
    assert end.usage.model_calls == 4 and executed(second) == 0  # the task's whole usage: nothing more ran


# -- scope: the conversation ----------------------------------------------------------------------


def test_a_conversation_cap_stops_a_second_task_in_the_same_conversation(make_project: ProjectFactory) -> None:
    root = make_project({"agents/worker.yaml": lister("{conversation: {max_turns: 3}}")})
    message = "list once\n" + LIST
    first, second, elsewhere = drive(root, "worker", ("c1", message), ("c1", message), ("c2", message))

    assert finished(first).stop_reason == "end_turn" and finished(first).usage.model_calls == 2
    end = finished(second)  # one more model call, then the conversation's three are spent
    assert (end.state, end.stop_reason) == ("completed", "max_turn_requests")
    assert end.output == "Stopped: conversation budget max_turns reached: used 3 of 3."
    assert end.usage.model_calls == 1
    assert finished(elsewhere).stop_reason == "end_turn"  # another conversation has its own cap


@pytest.mark.parametrize("tools", [True, False], ids=["model-call-checks", "model-nodes"])
def test_a_task_cap_counts_each_task_of_a_conversation_from_its_own_start(
    make_project: ProjectFactory, tools: bool
) -> None:
    """The Runner starts each task in the graph's input (no node of its own): the next task in the
    conversation counts from zero, and the last one's stop is not its stop."""
    spec = lister("{max_turns: 2}") if tools else lister("{max_turns: 1, on_exceed: ask}").replace("[fs.list]", "[]")
    root = make_project({"agents/worker.yaml": spec})
    first, second = drive(root, "worker", ("c1", LIST_30 if tools else "hi"), ("c1", "list once\n" + LIST))
    if tools:
        assert (finished(first).stop_reason, finished(first).usage.model_calls) == ("max_turn_requests", 2)
    end = finished(second)
    assert (end.state, end.stop_reason) == ("completed", "end_turn"), end
    assert end.usage.model_calls == (2 if tools else 1)


def test_a_conversation_cap_stops_an_agent_without_tools_before_its_model_call(make_project: ProjectFactory) -> None:
    # No tools, no contract: its model turn is checked inside the model call (governance/graphs.py)
    chat = "name: chat\nmodel: offline\nbudget: {conversation: {max_turns: 2}}\n"
    root = make_project({"agents/chat.yaml": chat})
    runs = drive(root, "chat", ("c1", "one"), ("c1", "two"), ("c1", "three"))
    assert [finished(run).stop_reason for run in runs] == ["end_turn", "end_turn", "max_turn_requests"]
    end = finished(runs[2])
    assert end.output == "Stopped: conversation budget max_turns reached: used 2 of 2."
    assert end.usage.model_calls == 0  # stopped before the model was called
    audit = AuditLog.open(root)
    try:
        assert [r.data["limit"] for r in audit.query(kind="budget")] == ["max_turns"]
        assert len(audit.query(kind="model.call")) == 2
    finally:
        audit.close()


# -- agent calls: the caller pays, the callee gets what is left ------------------------------


def test_a_callees_model_calls_are_charged_to_its_caller(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": caller("a", "b", "{max_turns: 4}"), "agents/b.yaml": lister("{}", name="b")})
    events = send(root, "a", "ask b ten times\n" + "\n".join([ask_agent("b", "hi")] * 10))
    end = finished(events)
    assert (end.stop_reason, end.output) == (
        "max_turn_requests",
        "Stopped: task budget max_turns reached: used 4 of 4.",
    )
    # Each of a's turns calls b, which answers in one model call: 2 + 2 = 4, so a calls b only twice.
    assert executed(events, "b") == 2
    assert end.usage.model_calls == 4  # the run's usage includes the callee's


def test_a_callee_gets_no_more_than_its_caller_has_left(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": caller("a", "b", "{max_turns: 3}"), "agents/b.yaml": lister("{}", name="b")})
    errand = "list five times\n" + "\n".join([LIST] * 5)
    events = send(root, "a", f"list, then delegate\n{LIST}\n{ask_agent('b', errand)}")
    # a used 2 of its 3 turns (listing, calling b) when it called b: b may make one model call.
    [b_result] = [e for e in results(events) if e.tool == "b"]
    assert b_result.result == "Stopped: task budget max_turns reached: used 1 of 1."
    assert executed(events, nested=True) == 1  # b listed once, not five times
    end = finished(events)
    assert end.output == "Stopped: task budget max_turns reached: used 3 of 3."
    assert end.usage.model_calls == 3


def test_a_callee_gets_no_more_than_its_callers_conversation_has_left(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/a.yaml": caller("a", "b", "{conversation: {max_turns: 3}}"),
            "agents/b.yaml": lister("{}", name="b"),
        }
    )
    errand = "list five times\n" + "\n".join([LIST] * 5)
    events = send(root, "a", f"delegate\n{ask_agent('b', errand)}")
    # a's first model call left 2 of the conversation's 3 turns: b may make two model calls.
    [b_result] = [e for e in results(events) if e.tool == "b"]
    assert b_result.result == "Stopped: task budget max_turns reached: used 2 of 2."
    assert executed(events, nested=True) == 2
    end = finished(events)
    assert end.output == "Stopped: conversation budget max_turns reached: used 3 of 3."
    assert end.usage.model_calls == 3
