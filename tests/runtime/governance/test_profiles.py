"""Profile decisions, table-driven: first matching rule wins, else the default."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from framework.runtime.governance import ToolCall, decide
from framework.spec.profile import Profile

REPO = Path(__file__).resolve().parents[3]

CUSTOM: dict[str, Any] = {
    "version": 1,
    "name": "custom",
    "rules": [
        {
            "match": {"tool": "shell", "args": {"command": "git push*"}},
            "action": "deny",
            "reason": "pushing is for people",
        },
        {"match": {"tool": "fs.*", "args": {"path": ".env"}}, "action": "deny"},
        {"match": {"tool": "fs.*", "args": {"path": "secrets/**"}}, "action": "ask"},
        {"match": {"capability": "shell", "cost_usd_over": 0.50}, "action": "deny"},
        {"match": {"tool": "http.*"}, "action": "ask"},
        {"match": {"capability": "shell"}, "action": "allow"},
        {"match": {"capability": "agent", "tool": "review*"}, "action": "allow"},
        {"match": {"cost_usd_over": 1}, "action": "ask"},
    ],
    "default": "deny",
}


def _builtin(name: str) -> Profile:
    return Profile.model_validate(YAML(typ="safe").load(REPO / "profiles" / f"{name}.yaml"))


PROFILES = {name: _builtin(name) for name in ("manual", "supervised", "autonomous")} | {
    "custom": Profile.model_validate(CUSTOM)
}


def fs(tool: str, path: str | None = None) -> ToolCall:
    return ToolCall.builtin(tool) if path is None else ToolCall.builtin(tool, path=path)


def sh(command: str) -> ToolCall:
    return ToolCall.builtin("shell", command=command)


PY = ToolCall("lint", "python", {"files": ["a.py"]})
GET = ToolCall.builtin("http.get", url="https://api.github.com/")

# (profile, call, task cost so far, expected action, expected deciding rule)
TABLE: list[tuple[str, ToolCall, str, str, str]] = [
    # supervised: capability classes, rule order, strict cost threshold
    ("supervised", fs("fs.read", "src/a.py"), "0", "allow", "rule 1"),
    ("supervised", fs("fs.list", "src"), "0", "allow", "rule 1"),
    ("supervised", ToolCall.builtin("fs.search", pattern="TODO"), "0", "allow", "rule 1"),
    ("supervised", fs("fs.write", "src/a.py"), "0", "ask", "rule 2"),
    ("supervised", sh("pytest -q"), "0", "ask", "rule 3"),
    ("supervised", GET, "0", "ask", "rule 4"),
    ("supervised", PY, "0", "allow", "default"),
    ("supervised", PY, "0.11", "ask", "rule 7"),
    ("supervised", PY, "0.10", "allow", "default"),
    ("supervised", ToolCall("summarizer", "agent", {"text": "hi"}), "0", "allow", "default"),
    ("supervised", fs("fs.read", "src/a.py"), "5", "allow", "rule 1"),
    # manual and autonomous have no rules: the default decides everything
    ("manual", fs("fs.read", "src/a.py"), "0", "ask", "default"),
    ("manual", PY, "0", "ask", "default"),
    ("autonomous", sh("rm -rf build"), "0", "allow", "default"),
    ("autonomous", fs("fs.write", "a.txt"), "100", "allow", "default"),
    # custom: tool globs, args globs in every reading, cost thresholds, order, default
    ("custom", sh("git push --force"), "0", "deny", "rule 1"),
    ("custom", sh("'git' push origin"), "0", "deny", "rule 1"),
    ("custom", sh("git   push"), "0", "deny", "rule 1"),
    ("custom", sh("git status"), "0", "allow", "rule 6"),
    ("custom", sh("git status"), "0.51", "deny", "rule 4"),
    ("custom", sh("git status"), "0.50", "allow", "rule 6"),
    ("custom", sh("git push"), "9", "deny", "rule 1"),
    ("custom", fs("fs.write", ".env"), "0", "deny", "rule 2"),
    ("custom", fs("fs.read", "./src/../.env"), "0", "deny", "rule 2"),
    ("custom", fs("fs.read", "secrets/a/b.key"), "0", "ask", "rule 3"),
    ("custom", fs("fs.read", "secrets"), "0", "deny", "default"),
    ("custom", fs("fs.list"), "0", "deny", "default"),
    ("custom", GET, "0", "ask", "rule 5"),
    ("custom", ToolCall("reviewer", "agent", {}), "0", "allow", "rule 7"),
    ("custom", ToolCall("writer", "agent", {}), "0", "deny", "default"),
    ("custom", PY, "2", "ask", "rule 8"),
    ("custom", PY, "1", "deny", "default"),
]


@pytest.mark.parametrize(
    ("profile", "call", "cost", "action", "rule"),
    TABLE,
    ids=[f"{p}-{c.tool}-{'-'.join(map(str, c.args.values()))}-{cost}" for p, c, cost, _, _ in TABLE],
)
def test_profile_decision(profile: str, call: ToolCall, cost: str, action: str, rule: str) -> None:
    decision = decide(PROFILES[profile], call, cost_usd=Decimal(cost))
    assert (decision.action, decision.rule) == (action, f"profile {profile} {rule}")
    if action != "allow":
        assert "to change this" in decision.reason
        assert f"profiles/{profile}.yaml" in decision.reason


def test_the_table_covers_every_action_profile_and_rule_kind() -> None:
    assert len(TABLE) >= 20
    assert {row[0] for row in TABLE} == set(PROFILES)
    assert {row[3] for row in TABLE} == {"allow", "ask", "deny"}


def test_a_rule_reason_is_quoted_with_the_rule() -> None:
    decision = decide(PROFILES["custom"], sh("git push"))
    assert decision.reason.startswith("pushing is for people: rule 1 of profile 'custom'")
    assert "{tool: 'shell', args: {command: 'git push*'}}" in decision.reason
    assert "edit rule 1 in profile 'custom'" in decision.reason


def test_a_built_in_cost_rule_states_the_threshold() -> None:
    decision = decide(PROFILES["supervised"], PY, cost_usd=Decimal("0.2"))
    assert decision.reason.startswith("this task has cost more than $0.10: rule 7")
    assert "{cost_usd_over: 0.1" in decision.reason


def test_the_default_says_where_to_add_a_rule() -> None:
    decision = decide(PROFILES["manual"], PY)
    assert decision.reason.startswith("no rule of profile 'manual' matches 'lint', so its default asks")
    assert "add a rule for this call or change `default:`" in decision.reason


def test_an_allow_names_the_rule_without_a_change_hint() -> None:
    decision = decide(PROFILES["supervised"], fs("fs.read", "a"))
    assert decision.allowed
    assert decision.reason == "rule 1 of profile 'supervised' {capability: 'fs.read'} allows this call"


def test_a_missing_argument_does_not_match_an_args_glob() -> None:
    profile = Profile.model_validate(
        {"name": "p", "rules": [{"match": {"args": {"path": "*"}}, "action": "deny"}], "default": "allow"}
    )
    assert decide(profile, fs("fs.list")).allowed
    assert decide(profile, fs("fs.list", "")).denied


def test_non_string_arguments_are_matched_as_json() -> None:
    profile = Profile.model_validate(
        {"name": "p", "rules": [{"match": {"args": {"count": "1?"}}, "action": "deny"}], "default": "allow"}
    )
    assert decide(profile, ToolCall("t", "python", {"count": 12})).denied
    assert decide(profile, ToolCall("t", "python", {"count": 3})).allowed


def test_the_profiles_tested_are_the_ones_every_project_gets(tmp_path: Path) -> None:
    from framework.spec import load_project

    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.yaml").write_text("version: 1\nname: a\n", encoding="utf-8")
    project = load_project(tmp_path)
    for name in ("manual", "supervised", "autonomous"):
        assert project.profiles[name] == PROFILES[name]


def mcp(tool: str, **hints: bool) -> ToolCall:
    return ToolCall(f"notes.{tool}", "mcp", {}, annotations=hints)


@pytest.mark.parametrize(
    ("profile", "call", "action", "rule"),
    [
        ("supervised", mcp("list", readOnlyHint=True), "allow", "rule 5"),
        ("supervised", mcp("add"), "ask", "rule 6"),
        ("supervised", mcp("wipe", readOnlyHint=False, destructiveHint=True), "ask", "rule 6"),
        ("supervised", mcp("odd", destructiveHint=False), "ask", "rule 6"),
        ("manual", mcp("list", readOnlyHint=True), "ask", "default"),
        ("autonomous", mcp("wipe", destructiveHint=True), "allow", "default"),
    ],
)
def test_mcp_tools_are_decided_by_their_annotations(profile: str, call: ToolCall, action: str, rule: str) -> None:
    decision = decide(PROFILES[profile], call)
    assert (decision.action, decision.rule) == (action, f"profile {profile} {rule}")


def test_an_annotation_rule_is_written_back_in_its_reason() -> None:
    decision = decide(PROFILES["supervised"], mcp("list", readOnlyHint=True))
    assert "{capability: 'mcp', annotations: {readOnlyHint: true}} allows this call" in decision.reason
    asked = decide(PROFILES["supervised"], mcp("add"))
    assert asked.reason.startswith("the MCP server does not mark this tool read-only: rule 6")


def test_a_hint_the_server_did_not_give_matches_no_rule_that_names_it() -> None:
    profile = Profile.model_validate(
        {"name": "strict", "rules": [{"match": {"annotations": {"destructiveHint": False}}, "action": "allow"}]}
    )
    assert decide(profile, mcp("add")).action == "ask"  # the default
    assert decide(profile, mcp("add", destructiveHint=False)).action == "allow"
    assert decide(profile, PY).action == "ask"  # a python tool has no hints
