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
"""


@pytest.mark.parametrize(
    ("tools", "hooks"),
    [
        ("[fs.read]", []),
        ("[]", ["before_model", "after_model"]),  # a retry must route back to the model without a tool node
    ],
    ids=["with-tools", "without-tools"],
)
def test_the_model_turn_is_checked_inside_the_model_call_when_the_agent_has_tools(
    make_project: ProjectFactory, tools: str, hooks: list[str]
) -> None:
    root = make_project({"agents/reader.yaml": AGENT.format(tools=tools)})
    bundle = build_bundle(load_project(root), middleware=governance_middleware)
    nodes = list(bundle.graph("reader").get_graph().nodes)
    assert [node.rsplit(".", 1)[1] for node in nodes if node.endswith("_model")] == hooks
