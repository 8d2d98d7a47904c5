"""JSON-RPC 2.0 on plain dicts, independent of framing (HTTP body, stdio line), and the error table.

Error codes — one table for every transport (A2A's JSON-RPC and platform methods, ACP):

    -32700  parse error            invalid JSON
    -32600  invalid request        not a JSON-RPC 2.0 request object
    -32601  method not found
    -32602  invalid params         (also: UsageError)
    -32603  internal error         (also: StoreError, a damaged database under .ca/)
    -32001…-32009                  A2A's own (task not found … version not supported), as a2a-sdk maps them

How a message is read (every wire, :func:`read_message`): its text is decoded strictly
(``framework.protocols.jsontext``: UTF-8, no NaN/Infinity, at most 64 levels deep), else
-32700; an object that is not a JSON-RPC 2.0 request gets -32600, with id null when its id is
not a string or an integer (an invalid id is never echoed); a value in ``params``
that could not be stored and sent back (``1e999``, a lone surrogate) gets -32602 with the id.
A notification (no ``id`` member) is never answered.
    -32080  budget_exceeded        a budget with on_exceed: fail was spent
    -32081  policy_denied          a capability, contract or profile rule refused an action the run needed
    -32082  contract_violation     the answer broke the agent's contract
    -32083  approval_rejected      a person (or an approval timeout with on_timeout: fail) rejected it
    -32084  agent_not_found
    -32085  spec_invalid           the project's YAML is invalid (data: diagnostics)
    -32086  authentication required
    -32087  conversation_busy      another turn of the conversation outlasted the wait limit (retryable)
    -32088  task_not_waiting       a decision was sent to a task that waits for none
    -32089  provider_error         a model call failed (the provider answered an error, or is down)
    -32090  tool_failed            a tool could not be loaded, or a workflow's tool step failed
    -32091  run_failed             any other failure of a run

The names are the ``code`` of the error classes (``framework.errors``): :data:`ERROR_CODES` maps
each to its number and :func:`failure_error` builds the answer, with ``data`` ``{kind, code, ...}``.
A cancelled run is not an error answer (A2A: task state canceled, ACP: stopReason cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from framework.errors import CAError, ErrorCode, Failure
from framework.protocols.jsontext import JsonTextError, decode, unrepresentable


class Code(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    VERSION_NOT_SUPPORTED = -32009
    BUDGET_EXCEEDED = -32080
    POLICY_DENIED = -32081
    CONTRACT_VIOLATION = -32082
    APPROVAL_REJECTED = -32083
    AGENT_NOT_FOUND = -32084
    SPEC_INVALID = -32085
    AUTHENTICATION_REQUIRED = -32086
    CONVERSATION_BUSY = -32087
    TASK_NOT_WAITING = -32088
    PROVIDER_ERROR = -32089
    TOOL_FAILED = -32090
    RUN_FAILED = -32091
    STORE_BUSY = -32092
    CONVERSATION_TOO_LARGE = -32093
    STORE_UNREACHABLE = -32094


ERROR_CODES: dict[ErrorCode, Code] = {
    "usage_error": Code.INVALID_PARAMS,
    "store_damaged": Code.INTERNAL_ERROR,
    "store_busy": Code.STORE_BUSY,
    "store_unreachable": Code.STORE_UNREACHABLE,
    "budget_exceeded": Code.BUDGET_EXCEEDED,
    "policy_denied": Code.POLICY_DENIED,
    "contract_violation": Code.CONTRACT_VIOLATION,
    "approval_rejected": Code.APPROVAL_REJECTED,
    "agent_not_found": Code.AGENT_NOT_FOUND,
    "spec_invalid": Code.SPEC_INVALID,
    "conversation_busy": Code.CONVERSATION_BUSY,
    "conversation_too_large": Code.CONVERSATION_TOO_LARGE,
    "task_not_waiting": Code.TASK_NOT_WAITING,
    "provider_error": Code.PROVIDER_ERROR,
    "tool_failed": Code.TOOL_FAILED,
    "run_failed": Code.RUN_FAILED,
}
"""The JSON-RPC number of each failure code: the one place a failure becomes a number."""


@dataclass
class JsonRpcError(Exception):
    """An error answer: code, a message that says what to change, optional data."""

    code: int
    message: str
    data: Any = None

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": int(self.code), "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def failure_error(failure: Failure) -> JsonRpcError:
    """The JSON-RPC error answer for a failure (transports answer a cancelled run otherwise; here it is -32091)."""
    number = Code.RUN_FAILED if failure.code == "cancelled" else ERROR_CODES[failure.code]
    return JsonRpcError(number, failure.message, {**failure.data, "kind": failure.kind, "code": failure.code})


def error_for(exc: CAError) -> JsonRpcError:
    """The JSON-RPC error answer for an error of the tree."""
    return failure_error(Failure.of(exc))


@dataclass(frozen=True)
class Request:
    method: str
    params: dict[str, Any]
    id: str | int | None
    """None for a notification (no answer is sent) and for a request whose id is null."""
    notification: bool = False
    """No ``id`` member: the sender wants no answer, not even an error."""


def valid_id(value: Any) -> bool:
    """Whether ``value`` may be a JSON-RPC id we echo: a string (of Unicode text) or an integer, or null."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    return isinstance(value, str) and unrepresentable(value, "id") is None


def answer_id(obj: Any) -> str | int | None:
    """The id to answer ``obj`` with: its own when valid, else null."""
    value = obj.get("id") if isinstance(obj, dict) else None
    return value if valid_id(value) else None


def parse_request(obj: Any) -> Request:
    """Validate a decoded JSON-RPC 2.0 request object; raise JsonRpcError(-32600/-32602).

    -32600 is about the envelope, -32602 about params; answer either with :func:`answer_id`.
    """
    if not isinstance(obj, dict):
        raise JsonRpcError(
            Code.INVALID_REQUEST, "not a JSON-RPC 2.0 request: expected an object (batches are not supported)"
        )
    if obj.get("jsonrpc") != "2.0" or not isinstance(obj.get("method"), str):
        raise JsonRpcError(Code.INVALID_REQUEST, "not a JSON-RPC 2.0 request: need jsonrpc '2.0' and a method name")
    if not valid_id(obj.get("id")):
        raise JsonRpcError(Code.INVALID_REQUEST, "the id must be a string or an integer (of at most 4300 digits)")
    if unrepresentable(obj["method"], "method") is not None:
        raise JsonRpcError(Code.INVALID_REQUEST, "the method name is not Unicode text")
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JsonRpcError(Code.INVALID_PARAMS, "params must be an object (by-name parameters)")
    problem = unrepresentable(params)
    if problem is not None:
        raise JsonRpcError(Code.INVALID_PARAMS, problem)
    return Request(obj["method"], params, obj.get("id"), notification="id" not in obj)


def read_message(raw: bytes | str) -> Any:
    """One wire message's decoded value; raises JsonRpcError(-32700) when the text is not JSON we take."""
    try:
        return decode(raw)
    except JsonTextError as exc:
        raise JsonRpcError(Code.PARSE_ERROR, f"parse error: {exc}") from None


def result(request_id: str | int | None, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: str | int | None, exc: JsonRpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_json()}
