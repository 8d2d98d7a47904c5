"""JSON-RPC 2.0 on plain dicts, independent of framing (HTTP body, stdio line), and the error table.

Error codes — one table for every transport:

    -32700  parse error            invalid JSON
    -32600  invalid request        not a JSON-RPC 2.0 request object
    -32601  method not found
    -32602  invalid params
    -32603  internal error
    -32001…-32009                  A2A's own (task not found … version not supported), as a2a-sdk maps them
    -32080  budget exceeded        a budget with on_exceed: fail was spent
    -32081  policy denied          a capability, contract or profile rule refused the action
    -32082  contract violation     the answer broke the agent's contract
    -32083  approval rejected      a person (or an approval timeout) rejected the action
    -32084  agent not found
    -32085  spec invalid           the project's YAML is invalid (see _cleveragents/diagnostics)
    -32086  authentication required
    -32087  forbidden
    -32088  task not waiting       a decision was sent to a task that waits for none
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class Code(IntEnum):
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    BUDGET_EXCEEDED = -32080
    POLICY_DENIED = -32081
    CONTRACT_VIOLATION = -32082
    APPROVAL_REJECTED = -32083
    AGENT_NOT_FOUND = -32084
    SPEC_INVALID = -32085
    AUTHENTICATION_REQUIRED = -32086
    FORBIDDEN = -32087
    TASK_NOT_WAITING = -32088


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


@dataclass(frozen=True)
class Request:
    method: str
    params: dict[str, Any]
    id: str | int | None
    """None for a notification (no answer is sent)."""


def parse_request(obj: Any) -> Request:
    """Validate a decoded JSON-RPC 2.0 request object; raise JsonRpcError(-32600/-32602)."""
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0" or not isinstance(obj.get("method"), str):
        raise JsonRpcError(Code.INVALID_REQUEST, "not a JSON-RPC 2.0 request: need jsonrpc '2.0' and a method name")
    request_id = obj.get("id")
    if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, str | int)):
        raise JsonRpcError(Code.INVALID_REQUEST, "the id must be a string or an integer")
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise JsonRpcError(Code.INVALID_PARAMS, "params must be an object (by-name parameters)")
    return Request(obj["method"], params, request_id)


def result(request_id: str | int | None, value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: str | int | None, exc: JsonRpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": exc.to_json()}
