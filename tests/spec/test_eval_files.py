"""Eval files: every mistake is reported at once, at its file:line:col, saying what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.spec import load_project
from framework.spec.eval_loader import load_evals
from tests.conftest import ProjectFactory

AGENTS = {
    "agents/helper.yaml": "name: helper\n",
    "agents/flow.yaml": "name: flow\nkind: workflow\nsteps:\n  - {id: one, agent: helper}\n",
}


def problems(make_project: ProjectFactory, text: str) -> list[str]:
    root = make_project({**AGENTS, "evals/e.yaml": text})
    with pytest.raises(SpecError) as caught:
        load_evals(load_project(root))
    return [
        f"{Path(d.file).name}:{d.line}:{d.column}: {d.message}" + (f" ({d.hint})" if d.hint else "")
        for d in caught.value.diagnostics
    ]


def test_every_problem_of_a_file_is_reported_at_its_place(make_project: ProjectFactory) -> None:
    found = problems(
        make_project,
        """\
cases:
  - name: a
    input: []
    files: {../outside.txt: x}
    approvals: [{decision: edit}]
    expect: {state: completed, failure_code: budget_exceeded}
  - name: a
    agent: flow
    model: offline
    input: hi
""",
    )
    assert found == [
        "e.yaml:3:12: a conversation needs at least one message",
        "e.yaml:4:12: '../outside.txt' must be a path inside the project, like 'src/app.py'",
        "e.yaml:5:17: decision 'edit' needs `args:`, the tool call's new arguments",
        "e.yaml:6:13: failure_code goes with state: failed or rejected (or no state)",
        "e.yaml:7:11: duplicate case name 'a': case 1 has it (give every case of a file its own name)",
        "e.yaml:9:12: agent 'flow' is a workflow: it has no model to replace"
        " (set the model on the agents its steps call, or remove `model:`)",
    ]


def test_a_valid_file_loads_with_its_defaults(make_project: ProjectFactory) -> None:
    root = make_project({**AGENTS, "evals/e.yaml": "cases:\n  - {name: a, input: hi, approvals: {'*': approve}}\n"})
    [suite] = load_evals(load_project(root))
    [case] = suite.cases
    assert (suite.name, case.agent, case.messages, case.timeout) == ("e", None, ["hi"], 120.0)
    assert case.approvals["*"].to_decision() == {"decision": "approve"}
