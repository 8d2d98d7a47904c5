"""Agent Cards built from specs, and `ca card` / `ca graph` through the real process."""

from __future__ import annotations

import json

from framework.compiler.bundle import build_bundle
from framework.compiler.card import EXTENSION_URI, card_to_json
from framework.spec import load_project
from tests.conftest import REPO, ProjectFactory, run_ca


def test_card_carries_skills_interfaces_and_extension() -> None:
    bundle = build_bundle(load_project(REPO, environ={}), base_url="https://agents.example.com")
    card = card_to_json(bundle.card("reviewer"))
    assert card["name"] == "reviewer"
    assert card["description"] == "Reviews a change and points out bugs"
    rpc, rest = "https://agents.example.com/agents/reviewer/", "https://agents.example.com/agents/reviewer/rest"
    assert [(i["url"], i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]] == [
        (rpc, "JSONRPC", "1.0"),
        (rest, "HTTP+JSON", "1.0"),
        (rpc, "JSONRPC", "0.3.0"),
        (rest, "HTTP+JSON", "0.3.0"),
    ]
    # The v0.3 fields, for v0.3 clients: the same endpoints, answered in v0.3 without A2A-Version.
    assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (rpc, "JSONRPC", "0.3.0")
    assert card["additionalInterfaces"] == [{"url": rest, "transport": "HTTP+JSON"}]
    assert card["skills"][0]["id"] == "review" and card["skills"][0]["tags"] == ["code", "review"]
    assert card["capabilities"]["streaming"] is True
    [extension] = card["capabilities"]["extensions"]
    assert extension["uri"] == EXTENSION_URI
    assert extension["params"]["profile"] == "supervised"
    assert "agent:summarizer" in extension["params"]["tools"]


def test_card_version_changes_with_the_spec(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\ninstructions: one\n"})
    before = build_bundle(load_project(root)).card("a").version
    (root / "agents" / "a.yaml").write_text("name: a\ninstructions: two\n")
    after = build_bundle(load_project(root)).card("a").version
    assert before != after and before.split("+")[0] == after.split("+")[0]


def test_agent_without_skills_gets_one_from_its_description(make_project: ProjectFactory) -> None:
    root = make_project({"agents/a.yaml": "name: a\ndescription: Does things\n"})
    card = card_to_json(build_bundle(load_project(root)).card("a"))
    assert [(s["id"], s["description"]) for s in card["skills"]] == [("a", "Does things")]


def test_bundles_of_the_same_project_are_equal_and_hash_alike() -> None:
    one = build_bundle(load_project(REPO, environ={}))
    two = build_bundle(load_project(REPO, environ={}))
    assert one == two and hash(one) == hash(two)


def test_ca_card_prints_json() -> None:
    result = run_ca("card", "summarizer", "--base-url", "http://127.0.0.1:9999")
    assert result.returncode == 0, result.stderr
    card = json.loads(result.stdout)
    assert card["supportedInterfaces"][0]["url"] == "http://127.0.0.1:9999/agents/summarizer/"


def test_ca_graph_prints_mermaid_of_a_workflow() -> None:
    result = run_ca("graph", "release")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("---") or "graph TD" in result.stdout
    for node in ("step.summary", "step.draft", "step.check"):
        assert node in result.stdout


def test_ca_card_of_an_unknown_agent() -> None:
    result = run_ca("card", "reviewr")
    assert result.returncode == 2  # a usage error: the name is to change
    assert "agent 'reviewr' not found (did you mean 'reviewer'?)" in result.stderr
