"""Workflow agents through the real `ca run` process: every step pattern, on the offline model."""

from __future__ import annotations

from typing import Any

from tests.conftest import ProjectFactory, events, run_ca

ECHO = {"agents/echo.yaml": "name: echo\n", "agents/shout.yaml": "name: shout\n"}


def run_workflow(make_project: ProjectFactory, steps_yaml: str, prompt: str = "hello") -> list[dict[str, Any]]:
    root = make_project({**ECHO, "agents/flow.yaml": "name: flow\nkind: workflow\n" + steps_yaml})
    result = run_ca("run", "flow", prompt, "--json", cwd=root)
    assert "Traceback" not in result.stderr
    evs = events(result.stdout)
    evs.append({"kind": "exit", "code": result.returncode, "stderr": result.stderr})
    return evs


def steps_done(evs: list[dict[str, Any]]) -> list[str]:
    return [e["step"] for e in evs if e["kind"] == "step" and e["status"] == "completed" and not e["source"]]


def finished(evs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in evs if e["kind"] == "finished")


def test_sequence_passes_outputs_through_templates(make_project: ProjectFactory) -> None:
    evs = run_workflow(
        make_project,
        """
steps:
  - {id: first, agent: echo}
  - {id: second, agent: shout, input: "again: {{ steps.first.output }}"}
""",
    )
    assert evs[-1]["code"] == 0, evs[-1]["stderr"]
    assert evs[0]["kind"] == "plan"
    assert steps_done(evs) == ["first", "second"]
    assert finished(evs)["output"] == "[shout] You said: again: [echo] You said: hello"


def test_parallel_branches_join(make_project: ProjectFactory) -> None:
    evs = run_workflow(
        make_project,
        """
steps:
  - id: both
    parallel:
      - {id: left, agent: echo, input: "L {{ input }}"}
      - {id: right, agent: shout, input: "R {{ input }}"}
output: "{{ steps.left.output }} | {{ steps.right.output }}"
""",
    )
    assert evs[-1]["code"] == 0, evs[-1]["stderr"]
    assert set(steps_done(evs)) >= {"left", "right", "both"}
    assert finished(evs)["output"] == "[echo] You said: L hello | [shout] You said: R hello"


def test_router_takes_the_matching_route(make_project: ProjectFactory) -> None:
    evs = run_workflow(
        make_project,
        """
steps:
  - {id: triage, agent: echo}
  - id: route
    router:
      on: triage
      routes:
        - when: {contains: urgent}
          steps: [{id: page, agent: shout, input: "PAGE {{ input }}"}]
      default: [{id: queue, agent: echo, input: "queue {{ input }}"}]
""",
        prompt="urgent: disk full",
    )
    assert evs[-1]["code"] == 0, evs[-1]["stderr"]
    assert "page" in steps_done(evs) and "queue" not in steps_done(evs)
    assert finished(evs)["output"] == "[shout] You said: PAGE urgent: disk full"


def test_loop_stops_at_its_maximum(make_project: ProjectFactory) -> None:
    evs = run_workflow(
        make_project,
        """
steps:
  - id: retry
    loop:
      steps: [{id: attempt, agent: echo}]
      until: {contains: "never appears"}
      max: 3
""",
    )
    assert evs[-1]["code"] == 0, evs[-1]["stderr"]
    assert steps_done(evs).count("attempt") == 3


def test_gate_pauses_without_a_terminal(make_project: ProjectFactory) -> None:
    evs = run_workflow(
        make_project,
        """
steps:
  - {id: draft, agent: echo}
  - {id: check, gate: {message: "Ship it? {{ steps.draft.output }}"}}
  - {id: ship, agent: shout}
""",
    )
    assert evs[-1]["code"] == 3
    paused = next(e for e in evs if e["kind"] == "paused")
    assert paused["payload"] == {"kind": "gate", "step": "check", "message": "Ship it? [echo] You said: hello"}
    assert finished(evs)["state"] == "input-required"
    assert "ship" not in steps_done(evs)


def test_a_failing_step_fails_the_run_with_a_clear_error(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "agents/keyed.yaml": "name: keyed\nmodel: anthropic:claude-sonnet-4-0\n",
            "agents/flow.yaml": "name: flow\nkind: workflow\nsteps: [{id: ask, agent: keyed}]\n",
        }
    )
    result = run_ca("run", "flow", "hi", cwd=root, env={"ANTHROPIC_API_KEY": ""})
    assert result.returncode == 1
    assert "needs an API key: set ANTHROPIC_API_KEY" in result.stderr
    assert "▸ step ask failed" in result.stderr
    assert "Traceback" not in result.stderr
