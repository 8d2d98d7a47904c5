"""The built-in ``offline`` chat model: no key, no network, deterministic.

It echoes the user's text, and each line ``@tool NAME {JSON arguments}`` of the user's last
message makes it call that tool (one call per model turn, in order) before it summarises the
results. Demos and black-box tests exercise tools, approvals and budgets with it.

:class:`LocalChatModel` is the base it shares with the ``scripted`` test model: a subclass says
*what* to reply; the base streams it word by word and reports estimated token usage.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Self

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolCall,
    ToolCallChunk,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from pydantic import PrivateAttr

from framework.compiler.tool_names import model_facing_name, spec_name

_WORDS = re.compile(r"\S+\s*|^\s+")
_TOOL_LINE = re.compile(r"\s*@tool(?:\s|$)")
_MAX_ECHO = 200


class PlannedCall(NamedTuple):
    """One tool call a local model will make, with its arguments already serialised."""

    id: str
    name: str
    args: dict[str, Any]
    args_json: str


@dataclass(frozen=True, slots=True)
class Reply:
    """What a local model answers in one turn: text, tool calls, or both."""

    text: str
    calls: tuple[PlannedCall, ...] = ()
    words: tuple[str, ...] | None = None  # precomputed stream pieces of ``text``, if any

    def pieces(self) -> Sequence[str]:
        """``text`` split into words, each with its trailing whitespace (they concatenate to ``text``)."""
        return self.words if self.words is not None else _WORDS.findall(self.text)

    def output_tokens(self) -> int:
        """Estimated tokens of the reply: a quarter of its characters, at least one."""
        chars = len(self.text) + sum(len(c.name) + len(c.args_json) for c in self.calls)
        return max(1, -(-chars // 4))


def estimate_input_tokens(messages: Sequence[BaseMessage]) -> int:
    """A quarter of the characters of every message (system prompt and tool calls included), rounded up."""
    chars = 0
    for message in messages:
        content = message.content
        chars += len(content) if isinstance(content, str) else len(message.text)
        if isinstance(message, AIMessage):
            chars += sum(len(c["name"]) + len(json.dumps(c["args"])) for c in message.tool_calls)
    return -(-chars // 4)


class LocalChatModel(BaseChatModel):
    """A chat model answered in-process: streams word chunks, then one chunk with tool calls and usage."""

    model_label: ClassVar[str] = "local"

    delay: float = 0.0
    """Seconds to wait between streamed words (0: as fast as possible)."""
    tool_names: tuple[str, ...] | None = None
    """Model-facing names of the tools bound with :meth:`bind_tools`; None when never bound."""
    tool_labels: tuple[str, ...] = ()
    """The same tools as a person names them in the YAML (``fs.list``, not ``fs_list``)."""
    _bound: dict[tuple[tuple[str, ...], tuple[str, ...]], LocalChatModel] = PrivateAttr(default_factory=dict)
    """The copies :meth:`bind_tools` made of this model, by the tools' names and labels."""

    def __copy__(self) -> Self:
        # pydantic copies private attributes shallowly: a copy (with other callbacks, say) would
        # share this model's bound copies and be given them. Its bindings are its own.
        copied = super().__copy__()
        copied._bound = {}
        return copied

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        copied = super().__deepcopy__(memo)
        copied._bound = {}
        return copied

    @abstractmethod
    def _reply(self, messages: list[BaseMessage]) -> Reply:
        """What to answer to ``messages``."""

    @property
    def _llm_type(self) -> str:
        return self.model_label

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        """Provider and model as a trace names them: ``offline`` / ``scripted`` for both."""
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = params["ls_model_name"] = self.model_label
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """A copy of this model that knows the names of ``tools`` (``tool_choice`` is ignored); the
        same copy for the same tools. The agent binds its tools before every model call, and a new
        copy would describe itself for the call's callbacks each time (``repr`` of every field: for
        a scripted model, all its replies)."""
        names = tuple(_tool_name(t) for t in tools)
        labels = tuple(map(_tool_label, tools, names))
        bound = self._bound.get((names, labels))
        if bound is None:
            bound = self._bound[names, labels] = self.model_copy(update={"tool_names": names, "tool_labels": labels})
        return bound

    def _final_chunk(self, reply: Reply, messages: list[BaseMessage]) -> AIMessageChunk:
        return AIMessageChunk(
            content="",
            tool_call_chunks=[
                ToolCallChunk(name=c.name, args=c.args_json, id=c.id, index=i) for i, c in enumerate(reply.calls)
            ],
            usage_metadata=self._usage(reply, messages),
            response_metadata=self._metadata(reply),
            chunk_position="last",
        )

    def _usage(self, reply: Reply, messages: list[BaseMessage]) -> UsageMetadata:
        prompt, output = estimate_input_tokens(messages), reply.output_tokens()
        return UsageMetadata(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output)

    def _metadata(self, reply: Reply) -> dict[str, Any]:
        return {"model_name": self.model_label, "finish_reason": "tool_calls" if reply.calls else "stop"}

    def _result(self, reply: Reply, messages: list[BaseMessage]) -> ChatResult:
        message = AIMessage(
            content=reply.text,
            tool_calls=[ToolCall(name=c.name, args=dict(c.args), id=c.id, type="tool_call") for c in reply.calls],
            usage_metadata=self._usage(reply, messages),
            response_metadata=self._metadata(reply),
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages)
        if self.delay:
            time.sleep(self.delay * len(reply.pieces()))
        return self._result(reply, messages)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages)
        if self.delay:
            await asyncio.sleep(self.delay * len(reply.pieces()))
        return self._result(reply, messages)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        for i, word in enumerate(reply.pieces()):
            if self.delay and i:
                time.sleep(self.delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        if self.delay:
            time.sleep(self.delay)
        yield ChatGenerationChunk(message=self._final_chunk(reply, messages))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        for i, word in enumerate(reply.pieces()):
            if self.delay and i:
                await asyncio.sleep(self.delay)
            yield ChatGenerationChunk(message=AIMessageChunk(content=word))
        if self.delay:
            await asyncio.sleep(self.delay)
        yield ChatGenerationChunk(message=self._final_chunk(reply, messages))


def _tool_name(tool: dict[str, Any] | type | Callable[..., Any] | BaseTool) -> str:
    if isinstance(tool, BaseTool):
        return tool.name
    if isinstance(tool, dict):
        function = tool.get("function")
        return str(function.get("name", "") if isinstance(function, dict) else tool.get("name", ""))
    return str(getattr(tool, "__name__", tool))


def _tool_label(tool: Any, name: str) -> str:
    """The spec's name of a builtin or python tool (``fs.list``); the model's for the rest (an agent
    tool's spec name is its URL, which nobody writes after ``@tool``)."""
    ca_name = (tool.metadata or {}).get("ca_name") if isinstance(tool, BaseTool) else None
    return str(ca_name) if isinstance(ca_name, str) and model_facing_name(ca_name) == name else name


class _BadLine(ValueError):
    """A ``@tool`` line the offline model cannot act on; the message is shown to the user."""


class OfflineChatModel(LocalChatModel):
    """The built-in model of agent ``agent``: echoes the user, obeys ``@tool NAME {JSON}`` lines."""

    model_label: ClassVar[str] = "offline"

    agent: str
    """The agent's name, shown at the start of every reply."""

    def _reply(self, messages: list[BaseMessage]) -> Reply:
        human_at = -1
        turn = 0
        for i, message in enumerate(messages):
            if isinstance(message, HumanMessage):
                human_at, turn = i, turn + 1
        user_text = messages[human_at].text if human_at >= 0 else ""
        after = messages[human_at + 1 :]
        results = [m for m in after if isinstance(m, ToolMessage)]

        said: list[str] = []
        lines: list[str] = []
        for line in user_text.splitlines():
            (lines if _TOOL_LINE.match(line) else said).append(line)
        try:
            calls = [self._parse(line) for line in lines]
        except _BadLine as exc:
            return Reply(f"[{self.agent}] {exc}")

        if len(results) < len(calls):
            n = len(results)
            name, args = calls[n]
            args_json = json.dumps(args, ensure_ascii=False, sort_keys=True)
            digest = hashlib.sha256(f"{turn}\0{n}\0{name}\0{args_json}".encode()).hexdigest()[:8]
            return Reply("", (PlannedCall(f"call_{n + 1}_{digest}", model_facing_name(name), args, args_json),))

        echo = " ".join(" ".join(said).split())[:_MAX_ECHO]
        out = [f"[{self.agent}] You said: {echo}".rstrip()]
        names = _call_names(after)
        known = [name for name, _ in calls]
        for result in results:
            tool = spec_name(result.name or names.get(result.tool_call_id, "tool"), known)
            text = " ".join(result.text.split())[:_MAX_ECHO]
            out.append(f"{tool} failed: {text}" if result.status == "error" else f"{tool}: {text}")
        return Reply("\n".join(out))

    def _parse(self, line: str) -> tuple[str, dict[str, Any]]:
        """``@tool NAME {JSON}`` → (spec name, arguments); raises _BadLine saying what is wrong."""
        rest = line.strip().removeprefix("@tool").strip()
        name = re.split(r"[\s{]", rest, maxsplit=1)[0]
        raw = rest[len(name) :].strip()
        shown = line.strip()
        if not name:
            raise _BadLine(f"I could not parse the line {shown!r}: it names no tool. Write: @tool NAME {{JSON}}")
        try:
            args = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise _BadLine(
                f"I could not parse the line {shown!r}: the arguments are not valid JSON "
                f"({exc.msg} at column {exc.pos + 1} of the arguments). Write: @tool NAME {{JSON}}"
            ) from exc
        if not isinstance(args, dict):
            raise _BadLine(f"I could not parse the line {shown!r}: the arguments must be a JSON object {{...}}")
        if self.tool_names is not None and model_facing_name(name) not in self.tool_names:
            available = ", ".join(self.tool_labels or self.tool_names) or "none"
            raise _BadLine(f"I cannot call {name!r}: this agent has no such tool (its tools: {available})")
        return name, args


def _call_names(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """tool_call_id → tool name for the calls of the AI messages in ``messages``."""
    return {
        c["id"]: c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls if c["id"] is not None
    }
