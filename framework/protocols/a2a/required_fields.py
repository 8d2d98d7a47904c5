"""a2a-sdk's check of a request's REQUIRED fields, with each message type's fields sorted out once.

a2a-sdk checks the params of every request (``validate_proto_required_fields``: A2A's REQUIRED
fields must be present) by walking the message and, for every field of every nested message,
reading the field's options and their ``field_behavior`` extension: reflection whose answer is
the same for every message of a type, and 2% of the time of a served ``SendMessage``.
:func:`sort_fields_once` makes the walk visit, for each message type, only the fields that are
REQUIRED or hold messages, found once per type. Which field is checked, how, and the errors
reported are the SDK's own (``_check_required_field_violation``, ``_recurse_validation``).
"""

from __future__ import annotations

import functools
from typing import Any

from a2a.utils import proto_utils
from google.api.field_behavior_pb2 import REQUIRED, field_behavior  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message


@functools.cache
def _walked(descriptor: Descriptor) -> tuple[tuple[FieldDescriptor, bool], ...]:
    """The fields of a message type the walk looks at, each with whether it is REQUIRED."""
    fields = []
    for field in descriptor.fields:
        required = REQUIRED in field.GetOptions().Extensions[field_behavior]
        if required or field.type == FieldDescriptor.TYPE_MESSAGE:
            fields.append((field, required))
    return tuple(fields)


def _walk(msg: Message) -> list[Any]:
    """The SDK's walk over ``msg`` (the same errors, in the same order), its fields sorted out once per type."""
    errors: list[Any] = []
    for field, required in _walked(msg.DESCRIPTOR):
        if required and (violation := proto_utils._check_required_field_violation(msg, field)):
            errors.append(violation)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            errors.extend(proto_utils._recurse_validation(msg, field))
    return errors


def sort_fields_once() -> None:
    """Make a2a-sdk's REQUIRED-field checks (requests, and its warnings about cards) use :func:`_walk`."""
    proto_utils._validate_proto_required_fields_internal = _walk
