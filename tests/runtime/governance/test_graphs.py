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
"""
RULES = "{must_not: [{output_matches: 'secret'}]}"


@pytest.mark.parametrize(
    ("tools", "contract", "hooks"),
    [
        ("[fs.read]", RULES, []),
        ("[]", "{}", []),  # nothing sends its answer back to the model
        ("[]", RULES, ["before_model", "after_model"]),  # a retry must route back to the model without a tool node
    ],
    ids=["with-tools", "without-tools-or-contract", "with-a-contract-without-tools"],
)
def test_the_model_turn_is_checked_inside_the_model_call_unless_a_retry_needs_nodes_of_its_own(
    make_project: ProjectFactory, tools: str, contract: str, hooks: list[str]
) -> None:
    root = make_project({"agents/reader.yaml": AGENT.format(tools=tools, contract=contract)})
    bundle = build_bundle(load_project(root), middleware=governance_middleware)
    nodes = list(bundle.graph("reader").get_graph().nodes)
    assert [node.rsplit(".", 1)[1] for node in nodes if node.endswith("_model")] == hooks
