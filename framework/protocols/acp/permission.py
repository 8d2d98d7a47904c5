"""session/request_permission: the options an approval offers, and the decision an answer selects.

An answer ACP does not allow — an error answer, a result without ``outcome``, an outcome or
option that was not offered — is :func:`bad_permission_answer`: the prompt ends with that
error (and its task is canceled) instead of waiting for an answer that will not come.
"""

from __future__ import annotations

import json
from typing import Any

from framework.errors import Cancelled
from framework.protocols.jsonrpc import Code, JsonRpcError
from framework.spec.common import shown

FULL_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow in this session", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Reject (and tell the agent not to retry)", "kind": "reject_always"},
]
SHORT_OPTIONS = [FULL_OPTIONS[0], FULL_OPTIONS[2]]
DECISIONS = {
    "allow_once": {"decision": "approve"},
    "allow_always": {"decision": "always"},
    "reject_once": {"decision": "reject"},
    "reject_always": {"decision": "reject", "reason": "the user rejected this; do not try it again"},
}


def bad_permission_answer(what: str) -> JsonRpcError:
    """The answer to session/prompt when the editor's answer to session/request_permission is unusable."""
    return JsonRpcError(
        Code.INVALID_PARAMS,
        f"the editor answered session/request_permission with {what}; expected "
        '{"outcome": {"outcome": "selected", "optionId": ...}} with one of the offered options, '
        'or {"outcome": {"outcome": "cancelled"}}; the task was canceled',
    )


def permission_decision(answer: Any, options: list[dict[str, Any]]) -> dict[str, Any]:
    """The decision an answer to session/request_permission selects; Cancelled when the person
    cancelled it; :func:`bad_permission_answer` when the answer is not one ACP allows."""
    outcome = answer.get("outcome") if isinstance(answer, dict) else None
    if not isinstance(outcome, dict):
        raise bad_permission_answer(f"a result without an 'outcome' object: {shown(json.dumps(answer))}")
    if outcome.get("outcome") == "cancelled":
        raise Cancelled("the permission request was cancelled")
    if outcome.get("outcome") != "selected":
        raise bad_permission_answer(f"an unknown outcome {shown(str(outcome.get('outcome')))}")
    offered = [o["optionId"] for o in options]
    option = outcome.get("optionId")
    if option not in offered:
        raise bad_permission_answer(f"option {shown(str(option))}, which was not offered ({', '.join(offered)})")
    return dict(DECISIONS[str(option)])
