"""The error tree: every class has a stable code with one JSON-RPC number, the documented table
is the code's table, refusals of paths and URLs are errors of the tree, and a failure keeps its
kind through the JSON it is checkpointed as."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from framework.compiler.confine import confine
from framework.errors import (
    CAError,
    ContractViolation,
    Failure,
    PathRefused,
    PolicyDenied,
    RunError,
    SpecError,
    UrlRefused,
)
from framework.protocols.jsonrpc import ERROR_CODES, error_for
from framework.runtime.governance.network import parse_url

A2A_DOC = Path(__file__).resolve().parents[1] / "docs" / "a2a.md"


def _tree(cls: type[CAError] = CAError) -> list[type[CAError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _tree(sub))]


@pytest.mark.parametrize("cls", _tree(), ids=lambda c: c.__name__)
def test_every_error_class_answers_json_rpc_with_its_codes_number(cls: type[CAError]) -> None:
    error = SpecError([]) if cls is SpecError else cls("what to change")
    answer = error_for(error).to_json()
    assert answer["code"] == ERROR_CODES[cls.code]
    assert (answer["data"]["kind"], answer["data"]["code"]) == (cls.__name__, cls.code)


def test_the_documented_error_codes_are_the_codes_the_table_sends() -> None:
    section = A2A_DOC.read_text(encoding="utf-8").split("## Error codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(n): code for n, code in re.findall(r"^\| (-320[89]\d) \| `(\w+)`", section, re.M)}
    ours = {int(number): code for code, number in ERROR_CODES.items() if -32099 <= number <= -32080}
    assert documented == ours


def test_a_path_outside_the_root_is_refused_as_a_policy_denial(tmp_path: Path) -> None:
    with pytest.raises(PathRefused) as refused:
        confine(tmp_path, "../elsewhere.txt")
    assert isinstance(refused.value, PolicyDenied)
    assert Failure.of(refused.value).code == "policy_denied"


def test_a_url_of_another_scheme_is_refused_as_a_policy_denial() -> None:
    with pytest.raises(UrlRefused, match="only http:// and https:// URLs are allowed") as refused:
        parse_url("ftp://files.example.com/x")
    assert isinstance(refused.value, PolicyDenied)
    assert (Failure.of(refused.value).kind, Failure.of(refused.value).code) == ("UrlRefused", "policy_denied")


def test_a_failure_rebuilt_from_its_json_raises_as_the_same_class_with_its_data() -> None:
    failure = Failure.of(ContractViolation("contract violated: x", data={"violations": ["x"]}))
    again = Failure.from_json(failure.to_json()).error()
    assert type(again) is ContractViolation
    assert (str(again), again.data) == ("contract violated: x", {"violations": ["x"]})


def test_a_failure_checkpointed_without_a_code_gets_its_classes_code() -> None:
    older = Failure.from_json({"kind": "ContractViolation", "message": "contract violated: y"})
    assert (older.code, older.error().code) == ("contract_violation", "contract_violation")


def test_a_failure_of_an_unknown_kind_raises_as_a_run_error_keeping_its_message() -> None:
    stranger = Failure.from_json({"kind": "SomethingElse", "message": "gone wrong"})
    error = stranger.error()
    assert (type(error), str(error), stranger.code) == (RunError, "gone wrong", "run_failed")
