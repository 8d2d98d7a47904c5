"""a2a-sdk's REQUIRED-field check of a request, its fields sorted out once per message type:
the same errors, in the same order, as the SDK's own walk, and the same answer on the wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from a2a.types import (
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    Message,
    Part,
    SendMessageRequest,
    Task,
    TaskStatus,
)
from a2a.utils import proto_utils
from google.protobuf.message import Message as Proto

from framework.protocols.a2a.required_fields import _walk, sort_fields_once
from tests.conftest import write_project
from tests.serving import ServerProcess, start_serve

pytestmark = pytest.mark.e2e


SDK_WALK = proto_utils._validate_proto_required_fields_internal
"""The SDK's own walk, unless a server built earlier in this process put ours in its place."""


def sdk_walk(message: Proto) -> list[Any]:
    """The SDK's walk all the way down: its nested levels call the module's walk, so the SDK's is put back meanwhile."""
    before = proto_utils._validate_proto_required_fields_internal
    proto_utils._validate_proto_required_fields_internal = SDK_WALK
    try:
        return list(SDK_WALK(message))
    finally:
        proto_utils._validate_proto_required_fields_internal = before


def said(text: str) -> Message:
    return Message(message_id="m1", role="ROLE_USER", parts=[Part(text=text)])


CASES: list[Proto] = [
    SendMessageRequest(message=said("hello")),
    SendMessageRequest(),  # no message at all
    SendMessageRequest(message=Message(role="ROLE_USER", parts=[Part(text="no id")])),
    SendMessageRequest(message=Message(message_id="m2", role="ROLE_USER")),  # no parts
    SendMessageRequest(message=Message(message_id="m3", parts=[Part(text="x"), Part()])),  # no role, an empty part
    Task(id="t1", status=TaskStatus(), history=[said("a"), Message()], artifacts=[Artifact(parts=[Part()])]),
    AgentCard(name="echo", skills=[AgentSkill(id="s")], supported_interfaces=[AgentInterface()]),
]


@pytest.mark.parametrize("message", CASES, ids=lambda m: type(m).__name__)
def test_the_walk_reports_what_the_sdk_reports(message: Proto) -> None:
    assert SDK_WALK is not _walk  # the module was imported before any server replaced the SDK's walk
    assert _walk(message) == sdk_walk(message)
    twice = _walk(message)  # the second message of a type is walked from what the first sorted out
    assert twice == sdk_walk(message)


def test_a_request_missing_required_fields_is_refused_as_the_sdk_refuses_it(tmp_path: Path) -> None:
    root = write_project(tmp_path, {"agents/echo.yaml": "name: echo\n"})
    server: ServerProcess = start_serve(root)
    try:
        message: dict[str, Any] = {"messageId": "m1", "role": "ROLE_USER", "parts": []}
        answer = server.rpc("SendMessage", {"message": message})
        error = answer["error"]
        assert error["code"] == -32602, answer
        violations = [v for detail in error["data"] for v in detail.get("fieldViolations", [])]
        assert violations == [{"field": "message.parts", "description": "Field must contain at least one element."}]
    finally:
        server.stop()


def test_sorting_fields_once_replaces_the_sdks_walk() -> None:
    before = proto_utils._validate_proto_required_fields_internal
    try:
        sort_fields_once()
        assert proto_utils._validate_proto_required_fields_internal is _walk
        with pytest.raises(Exception, match="Validation failed"):
            proto_utils.validate_proto_required_fields(SendMessageRequest())
    finally:
        proto_utils._validate_proto_required_fields_internal = before
