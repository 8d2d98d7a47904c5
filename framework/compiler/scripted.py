"""The ``scripted`` chat model of the project's own tests: it answers from a list, in order.

The reply for a call is chosen by how many AI messages the conversation already holds, so a
conversation continued in another process or replayed from a checkpoint picks the right next
reply. Replies are prepared once at construction: a model turn costs a count and a lookup.
"""

from __future__ import annotations

import json
from typing import ClassVar, Self

from langchain_core.messages import AIMessage, BaseMessage
from pydantic import PrivateAttr, model_validator

from framework.compiler.offline import LocalChatModel, PlannedCall, Reply
from framework.compiler.tool_names import model_facing_name
from framework.errors import ModelError
from framework.spec.model import ScriptedReply


class ScriptedChatModel(LocalChatModel):
    """Answers the n-th model turn of a conversation with ``replies[n]``.

    ``replies`` also accepts plain strings and dicts (``["hi", {"tool_calls": [...]}]``).
    Tool names are spec names (``fs.read``); calls carry the model-facing name (``fs_read``).
    """

    model_label: ClassVar[str] = "scripted"

    replies: list[ScriptedReply]
    """The answers, in order; a call past the last one raises ``ModelError``."""

    _prepared: tuple[Reply, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _prepare_scripted_replies(self) -> Self:
        self._prepared = tuple(_prepare(n, reply) for n, reply in enumerate(self.replies, start=1))
        return self

    def _reply(self, messages: list[BaseMessage]) -> Reply:
        index = sum(1 for m in messages if isinstance(m, AIMessage))
        if index >= len(self._prepared):
            raise ModelError(
                f"scripted model has no reply left: {len(self._prepared)} replies were given and all are used"
            )
        return self._prepared[index]


def _prepare(n: int, reply: ScriptedReply) -> Reply:
    """Reply ``n`` (1-based) ready to stream; tool call ids are ``call_<n>_<k>``, unique in a conversation."""
    calls = tuple(
        PlannedCall(f"call_{n}_{k}", model_facing_name(c.name), dict(c.args), json.dumps(c.args, ensure_ascii=False))
        for k, c in enumerate(reply.tool_calls, start=1)
    )
    return Reply(reply.text, calls, words=tuple(Reply(reply.text).pieces()))
