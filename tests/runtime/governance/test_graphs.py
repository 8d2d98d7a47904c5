"""Where governance sits in an llm agent's graph: the model turn's checks cost no graph step of their own."""

from __future__ import annotations

import pytest

from framework.compiler.bundle import build_bundle
from framework.runtime.governance.graphs import governance_middleware
from framework.spec import load_project
from tests.conftest import ProjectFactory

AGENT = """
    name: reader
    model: {{provider: scripted, replies: [done]}}
    tools: {tools}
    capabilities: {{fs: {{read: ["**"]}}}}
    contract: {contract}
    budget: {budget}
"""
RULES = "{must_not: [{output_matches: 'secret'}]}"
ASKS = "{max_turns: 3, on_exceed: ask}"


@pytest.mark.parametrize(
    ("tools", "contract", "budget", "hooks"),
    [
        ("[fs.read]", RULES, ASKS, []),
        ("[]", "{}", "{max_turns: 3}", []),  # nothing sends its answer back to the model, nor pauses
        ("[]", RULES, "null", ["before_model", "after_model"]),  # a retry routes back to the model without a tool node
        ("[]", "{}", ASKS, ["before_model", "after_model"]),  # pauses kept there by earlier versions still resume
    ],
    ids=["with-tools", "without-tools-contract-or-asks", "with-a-contract-without-tools", "asking-without-tools"],
)
def test_the_model_turn_is_checked_inside_the_model_call_unless_a_retry_or_a_pause_needs_nodes(
    make_project: ProjectFactory, tools: str, contract: str, budget: str, hooks: list[str]
) -> None:
    root = make_project({"agents/reader.yaml": AGENT.format(tools=tools, contract=contract, budget=budget)})
    bundle = build_bundle(load_project(root), middleware=governance_middleware)
    nodes = list(bundle.graph("reader").get_graph().nodes)
    assert [node.rsplit(".", 1)[1] for node in nodes if node.endswith("_model")] == hooks
