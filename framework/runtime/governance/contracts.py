"""Contracts: what an agent must never do and what its final answer must always satisfy.

Two checks, at the two moments docs/governance.md, 'Contracts' names:

* :func:`check_call_contract`, before each tool call: a ``must_not`` rule with ``tool`` (and
  ``args`` globs, matched in every reading as :mod:`.matching` describes) denies the call;
* :func:`check_output_contract`, before the task completes: ``must_not`` output patterns,
  ``must_always`` required calls, ``output_schema`` and ``output_matches``. It returns one
  human-readable sentence per violation; an empty list means the contract holds.

Output patterns are regular expressions *searched* anywhere in the output. A violation names
where a forbidden match is (its character span), never its text: the message reaches the client
and the audit, and the match is exactly what must not leave the process.

:func:`holds_output` says whether an agent has output rules at all: the runner then holds the
text of its answer back until the answer passed them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from framework.runtime.governance.calls import Decision, ToolCall, allow, deny
from framework.runtime.governance.matching import call_matches, describe
from framework.spec.contract import Contract, MustAlways

_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)\r?\n[ \t]*```", re.DOTALL | re.IGNORECASE)


def check_call_contract(contract: Contract, call: ToolCall) -> Decision:
    """``deny`` when a ``must_not`` tool rule matches ``call``, else ``allow``.

    ``rule`` is ``"contract.must_not[I]"`` (counting from 0, as the YAML list index) or
    ``"contract"`` when nothing forbids the call.
    """
    for index, rule in enumerate(contract.must_not):
        if rule.tool is None or not call_matches(rule.tool, rule.args, call):
            continue
        where = f"contract.must_not[{index}]"
        return deny(
            f"{where} {describe(rule.tool, rule.args)} forbids this call; the agent must do without it, "
            f"or remove that rule from the agent's contract",
            where,
        )
    return allow("no contract.must_not rule forbids this call", "contract")


WITHHELD = "ca_withheld"
"""``response_metadata`` key of a message never shown: an answer that broke the contract, and
the explanation the model got for it."""


def holds_output(contract: Contract) -> bool:
    """Whether ``contract`` judges the text of the final answer (``output_matches``, ``output_schema``)."""
    return any(rule.output_matches is not None for rule in contract.must_not) or any(
        must.output_matches is not None or must.output_schema is not None for must in contract.must_always
    )


def check_output_contract(contract: Contract, output: str, calls_made: Sequence[ToolCall]) -> list[str]:
    """Every way ``output`` (the final answer) and ``calls_made`` (in order) break ``contract``."""
    violations: list[str] = []
    for index, rule in enumerate(contract.must_not):
        if rule.output_matches is None:
            continue
        found = rule.output_matches.search(output)
        if found:
            violations.append(
                f"contract.must_not[{index}]: the output matches the forbidden pattern "
                f"{rule.output_matches.pattern!r} at characters {found.start()}-{found.end()}; "
                "the answer must not contain it"
            )
    for index, must in enumerate(contract.must_always):
        if problem := _must_always_problem(must, output, calls_made):
            violations.append(f"contract.must_always[{index}]: {problem}")
    return violations


def _must_always_problem(must: MustAlways, output: str, calls_made: Sequence[ToolCall]) -> str | None:
    if must.tool_called is not None:
        if any(call_matches(must.tool_called, must.args, call) for call in calls_made):
            return None
        wanted = describe(must.tool_called, must.args, key="tool_called")
        made = sorted({call.tool for call in calls_made})
        seen = f"the calls made were to {', '.join(map(repr, made))}" if made else "no tool was called"
        return f"a call matching {wanted} is required before the task completes, but {seen}; make that call first"
    if must.output_matches is not None:
        if must.output_matches.search(output):
            return None
        return (
            f"the output must match the pattern {must.output_matches.pattern!r} and does not; "
            "write the answer so that it does"
        )
    if must.output_schema is not None:
        return _schema_problem(must.output_schema, output)
    return None


def parse_json_output(output: str) -> Any:
    """The JSON document of ``output``: the whole text, or else its first ```json fenced block.

    Raises ``ValueError`` (a ``json.JSONDecodeError``) when neither parses.
    """
    try:
        return json.loads(output)
    except ValueError:
        fenced = _FENCE.search(output)
        if fenced is None:
            raise
        return json.loads(fenced.group(1))


def _schema_problem(schema: dict[str, Any], output: str) -> str | None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    try:
        document = parse_json_output(output)
    except ValueError as exc:
        return (
            f"the output must be JSON matching contract.output_schema, but it is not JSON ({exc}); "
            "answer with the JSON document alone or in one ```json fenced block"
        )
    # jsonschema's pick of the most relevant error: the same one every time for the same output.
    error = best_match(Draft202012Validator(schema).iter_errors(document))
    if error is None:
        return None
    return f"the output does not match output_schema at {json_path(error.absolute_path)}: {error.message}"


def json_path(parts: Iterable[str | int]) -> str:
    """A jsonschema error path written as ``$.items[0].name`` (``$`` for the document itself)."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if part.isidentifier() else f"[{part!r}]")
    return text
