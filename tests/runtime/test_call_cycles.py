"""Agent-call cycles that only exist at run time (through tag selectors) are refused, with the chain."""

from __future__ import annotations

import json

from tests.conftest import ProjectFactory
from tests.driving import drive, finished, results


def selector_agent(name: str, tag: str, wants: str, *, message_to: str) -> str:
    return f"""
        name: {name}
        model: offline
        profile: autonomous
        skills: [{{id: {name}-skill, tags: [{tag}]}}]
        tools: [{{agents: {{tags: [{wants}]}}}}]
        capabilities: {{agents: [{message_to}]}}
    """


def test_a_cycle_through_tag_selectors_is_refused_at_run_time(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/ping.yaml": selector_agent("ping", "pinger", "ponger", message_to="pong"),
            "agents/pong.yaml": selector_agent("pong", "ponger", "pinger", message_to="ping"),
        }
    )
    # ping asks pong; pong's offline model is asked (through its input) to ask ping back.
    inner = "@tool ping " + json.dumps({"input": "and back again"})
    message = "@tool pong " + json.dumps({"input": inner})
    [run] = drive(root, "ping", ("c1", message))
    denied = [r for r in results(run, nested=True) if r.is_error]
    assert any("agent call cycle at run time: ping -> pong -> ping" in r.result for r in denied), denied
    assert finished(run).state == "completed"
