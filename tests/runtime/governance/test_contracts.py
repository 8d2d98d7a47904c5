"""Contracts: must_not calls are denied before they run; the final output is checked before completion."""

from __future__ import annotations

from typing import Any

import pytest

from framework.runtime.governance import ToolCall, check_call_contract, check_output_contract
from framework.spec.contract import Contract


def contract(**rules: Any) -> Contract:
    return Contract.model_validate(rules)


PUSH = contract(must_not=[{"output_matches": "x"}, {"tool": "shell", "args": {"command": "git push*"}}])


@pytest.mark.parametrize("command", ["git push", "git push --force origin main", "'git' push", "git    push -f"])
def test_a_must_not_call_is_denied_with_the_rule_quoted(command: str) -> None:
    decision = check_call_contract(PUSH, ToolCall.builtin("shell", command=command))
    assert decision.denied
    assert decision.rule == "contract.must_not[1]"
    assert decision.reason == (
        "contract.must_not[1] {tool: 'shell', args: {command: 'git push*'}} forbids this call; "
        "the agent must do without it, or remove that rule from the agent's contract"
    )


def test_a_call_outside_every_must_not_rule_is_allowed() -> None:
    decision = check_call_contract(PUSH, ToolCall.builtin("shell", command="git status"))
    assert decision.allowed
    assert decision.rule == "contract"


def test_a_must_not_tool_glob_without_args_forbids_every_call_of_those_tools() -> None:
    rules = contract(must_not=[{"tool": "fs.*"}])
    assert check_call_contract(rules, ToolCall.builtin("fs.write", path="a", content="b")).denied
    assert check_call_contract(rules, ToolCall.builtin("http.get", url="https://x")).allowed


def test_a_must_not_path_rule_is_not_dodged_by_spelling_the_path_differently() -> None:
    rules = contract(must_not=[{"tool": "fs.write", "args": {"path": ".env"}}])
    for path in (".env", "./.env", "src/../.env", "src\\..\\.env"):
        assert check_call_contract(rules, ToolCall.builtin("fs.write", path=path, content="")).denied, path


def test_a_forbidden_output_pattern_is_reported_by_position_never_by_its_text() -> None:
    rules = contract(must_not=[{"output_matches": r"(?i)api[_-]?key\s*[:=]\s*\S+"}])
    output = "here: API_KEY=" + "k" * 200
    [violation] = check_output_contract(rules, output, [])
    assert violation.startswith("contract.must_not[0]: the output matches the forbidden pattern ")
    assert "'(?i)api[_-]?key\\\\s*[:=]\\\\s*\\\\S+'" in violation
    assert "kkkk" not in violation and "API_KEY" not in violation
    assert "at characters 6-214" in violation
    assert violation.endswith("; the answer must not contain it")


def test_a_short_forbidden_match_is_named_by_its_span() -> None:
    rules = contract(must_not=[{"output_matches": "password"}])
    assert check_output_contract(rules, "my password is", []) == [
        "contract.must_not[0]: the output matches the forbidden pattern 'password' at characters 3-11; "
        "the answer must not contain it"
    ]


def test_a_required_call_that_was_made_satisfies_must_always() -> None:
    rules = contract(must_always=[{"tool_called": "shell", "args": {"command": "pytest*"}}])
    calls = [ToolCall.builtin("fs.read", path="a"), ToolCall.builtin("shell", command="pytest -q")]
    assert check_output_contract(rules, "done", calls) == []


def test_a_required_call_with_other_arguments_does_not_count() -> None:
    rules = contract(must_always=[{"tool_called": "shell", "args": {"command": "pytest*"}}])
    calls = [ToolCall.builtin("shell", command="ruff check ."), ToolCall.builtin("fs.read", path="a")]
    assert check_output_contract(rules, "done", calls) == [
        "contract.must_always[0]: a call matching {tool_called: 'shell', args: {command: 'pytest*'}} is required "
        "before the task completes, but the calls made were to 'fs.read', 'shell'; make that call first"
    ]


def test_a_required_call_when_no_tool_was_called() -> None:
    rules = contract(must_always=[{"tool_called": "fs.*"}])
    [violation] = check_output_contract(rules, "done", [])
    assert "a call matching {tool_called: 'fs.*'} is required" in violation
    assert "but no tool was called; make that call first" in violation


SCHEMA = {
    "type": "object",
    "required": ["verdict"],
    "properties": {
        "verdict": {"enum": ["ok", "bad"]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
    },
}


@pytest.mark.parametrize(
    "output",
    [
        '{"verdict": "ok"}',
        '  {"verdict": "bad", "items": [{"name": "x"}]}\n',
        'Here you go:\n```json\n{"verdict": "ok"}\n```\nThanks.',
        '```\n{"verdict": "ok"}\n```',
    ],
)
def test_output_matching_the_schema_passes(output: str) -> None:
    assert check_output_contract(contract(must_always=[{"output_schema": SCHEMA}]), output, []) == []


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ('{"items": []}', "does not match output_schema at $: 'verdict' is a required property"),
        ('{"verdict": "maybe"}', "does not match output_schema at $.verdict: 'maybe' is not one of ['ok', 'bad']"),
        ('{"verdict": "ok", "items": [{"name": 3}]}', "at $.items[0].name: 3 is not of type 'string'"),
        ("```json\n[1, 2]\n```", "at $: [1, 2] is not of type 'object'"),
        ("The verdict is ok.", "but it is not JSON (Expecting value: line 1 column 1 (char 0)); answer with the JSON"),
        ("```json\n{verdict: ok}\n```", "but it is not JSON"),
    ],
)
def test_output_breaking_the_schema_is_reported_with_the_path(output: str, said: str) -> None:
    [violation] = check_output_contract(contract(must_always=[{"output_schema": SCHEMA}]), output, [])
    assert violation.startswith("contract.must_always[0]: ")
    assert said in violation


def test_a_required_output_pattern_must_be_found() -> None:
    rules = contract(must_always=[{"output_matches": r"(?m)^Verdict: (ok|bad)$"}])
    assert check_output_contract(rules, "Review.\nVerdict: ok", []) == []
    assert check_output_contract(rules, "Review. verdict ok", []) == [
        "contract.must_always[0]: the output must match the pattern '(?m)^Verdict: (ok|bad)$' and does not; "
        "write the answer so that it does"
    ]


def test_every_violation_is_reported_in_rule_order() -> None:
    rules = contract(
        must_not=[{"tool": "shell"}, {"output_matches": "TODO"}],
        must_always=[{"tool_called": "shell"}, {"output_matches": "done"}, {"output_schema": {"type": "object"}}],
    )
    violations = check_output_contract(rules, "TODO later", [])
    assert [v.split(":")[0] for v in violations] == [
        "contract.must_not[1]",
        "contract.must_always[0]",
        "contract.must_always[1]",
        "contract.must_always[2]",
    ]


def test_an_empty_contract_has_no_violations() -> None:
    assert check_output_contract(Contract(), "anything", []) == []
    assert check_call_contract(Contract(), ToolCall.builtin("shell", command="rm -rf /")).allowed
