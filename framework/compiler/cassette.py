"""Cassettes: a chat model's requests and responses, recorded once and replayed with no network.

``ca test --record`` wraps every provider model (not ``offline`` or ``scripted``, which are local
and deterministic already) in :class:`_Recording`: the request is sent on, the response streamed
back as it comes and both are kept. ``ca test`` wraps them in :class:`_Replaying` instead: the
provider model is never even built (no key, no connection); each request is compared with the
next one recorded for that agent and answered with its recorded response, streamed word by word. The results of tools that
leave the process (``http.get``, remote agents) are kept and replayed the same way
(:meth:`Cassette.tool_hook`).
A request that differs fails the model call with the first difference (:class:`CassetteMismatch`,
also kept on :attr:`Cassette.mismatch`, so a caller reads it typed).

A cassette is YAML, one exchange after another, multi-line text as ``|`` blocks so a re-recording
diffs line by line. What is written has passed through ``mask`` (the audit's secret masker).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import agenerate_from_stream, generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ConfigDict, Field

from framework.compiler.offline import LocalChatModel, PlannedCall, Reply
from framework.errors import ModelError
from framework.spec.model import ModelConfig

Mode = Literal["record", "replay"]
LOCAL_PROVIDERS = ("offline", "scripted")
FORMAT = 1


class CassetteMismatch(ModelError):
    """A model request that the cassette does not hold: the case must be re-recorded (or fixed)."""


class Cassette:
    """The model exchanges of one case. ``replay``: read from ``path``; ``record``: written by :meth:`save`."""

    def __init__(self, path: Path, mode: Mode, *, mask: Callable[[Any], Any] = lambda v: v) -> None:
        self.path = path
        self.mode = mode
        self.mask = mask
        self.exchanges: list[dict[str, Any]] = []
        self.used: dict[str, int] = {}
        """Agent -> how many of its recorded exchanges were replayed."""
        self.mismatch: str | None = None
        """The first difference found in replay, or None."""
        self._lock = threading.Lock()
        if mode == "replay" and path.is_file():
            self.exchanges = _read(path)

    def hook(self, build: Callable[[], BaseChatModel], config: ModelConfig | None, agent: str) -> BaseChatModel:
        """The model of ``agent`` as this cassette serves it (a :data:`framework.compiler.models.ModelHook`)."""
        if config is None or config.provider in LOCAL_PROVIDERS:
            return build()
        if self.mode == "record":
            return _Recording(inner=build(), agent=agent, cassette=self)
        return _Replaying(agent=agent, cassette=self, label=config.label())

    def tool_hook(self, tool: BaseTool, agent: str) -> BaseTool:
        """``tool`` as this cassette serves it (a :data:`framework.compiler.tools.ToolHook`): the tools
        whose results come from outside the process (``http.get``, remote agents) are recorded or
        replayed; every other tool runs as it is (its effects are the case's own)."""
        if not _leaves_process(tool) or not isinstance(tool, StructuredTool):
            return tool
        name = str((tool.metadata or {}).get("ca_name") or tool.name)
        pair = tool.response_format == "content_and_artifact"
        inner_async, inner_sync = tool.coroutine, tool.func

        async def taped_async(*args: Any, **kwargs: Any) -> Any:
            if self.mode == "replay":
                return self._tool_result(agent, name, kwargs, pair)
            assert inner_async is not None
            result = await inner_async(*args, **kwargs)
            self.record_tool(agent, name, kwargs, result)
            return result

        def taped_sync(*args: Any, **kwargs: Any) -> Any:
            if self.mode == "replay":
                return self._tool_result(agent, name, kwargs, pair)
            assert inner_sync is not None
            result = inner_sync(*args, **kwargs)
            self.record_tool(agent, name, kwargs, result)
            return result

        return tool.model_copy(
            update={
                "coroutine": taped_async if inner_async is not None else None,
                "func": taped_sync if inner_sync is not None else None,
            }
        )

    def _tool_result(self, agent: str, tool: str, args: dict[str, Any], pair: bool) -> Any:
        key = f"{agent}/{tool}"
        sent = self.mask(json.loads(json.dumps(args, default=str)))
        with self._lock:
            mine = [e for e in self.exchanges if e.get("agent") == agent and e.get("tool") == tool]
            n = self.used.get(key, 0)
            self.used[key] = n + 1
        if n >= len(mine):
            held = f"holds {len(mine)}" if mine else "holds none"
            self._fail(f"{tool} call {n + 1} of agent {agent!r} is not in the cassette {self.path.name} ({held})")
        difference = first_difference(mine[n]["args"], sent, "args")
        if difference is not None:
            self._fail(
                f"{tool} call {n + 1} of agent {agent!r} differs from the cassette {self.path.name}: {difference}"
            )
        result = mine[n]["result"]
        return tuple(result) if pair and isinstance(result, list) else result

    # -- replay ------------------------------------------------------------------

    def answer(self, agent: str, request: dict[str, Any]) -> dict[str, Any]:
        """The recorded response to ``request``, the next one of ``agent``; CassetteMismatch if it differs."""
        request = self.mask(json.loads(json.dumps(request, default=str)))
        with self._lock:
            mine = [e for e in self.exchanges if e.get("agent") == agent and "request" in e]
            n = self.used.get(agent, 0)
            self.used[agent] = n + 1
        if n >= len(mine):
            held = f"holds {len(mine)}" if mine else "holds none"
            problem = (
                f"model call {n + 1} of agent {agent!r} is not in the cassette {self.path.name} ({held}): "
                "the run asks the model more than when it was recorded"
            )
            self._fail(problem)
        difference = first_difference(mine[n]["request"], request)
        if difference is not None:
            self._fail(
                f"model call {n + 1} of agent {agent!r} differs from the cassette {self.path.name}: {difference}"
            )
        response: dict[str, Any] = mine[n]["response"]
        return response

    def _fail(self, problem: str) -> None:
        with self._lock:
            if self.mismatch is None:
                self.mismatch = problem
        raise CassetteMismatch(problem + " (re-record with `ca test --record`)")

    # -- record ------------------------------------------------------------------

    def record(self, agent: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        with self._lock:
            exchange = {"agent": agent, "request": request, "response": response}
            # Plain JSON types only (message text is a str subclass, args may hold tuples).
            self.exchanges.append(self.mask(json.loads(json.dumps(exchange, default=str))))

    def record_tool(self, agent: str, tool: str, args: dict[str, Any], result: Any) -> None:
        with self._lock:
            exchange = {"agent": agent, "tool": tool, "args": args, "result": result}
            self.exchanges.append(self.mask(json.loads(json.dumps(exchange, default=str))))

    def save(self) -> bool:
        """Write the recorded exchanges (masked); False (and no file) when there were none."""
        if not self.exchanges:
            self.path.unlink(missing_ok=True)
            return False
        from ruamel.yaml import YAML
        from ruamel.yaml.scalarstring import LiteralScalarString

        def blocks(value: Any) -> Any:
            if isinstance(value, str) and "\n" in value:
                return LiteralScalarString(value)
            if isinstance(value, dict):
                return {k: blocks(v) for k, v in value.items()}
            if isinstance(value, list):
                return [blocks(v) for v in value]
            return value

        yaml = YAML()
        yaml.default_flow_style = False
        yaml.width = 4096
        out = io.StringIO()
        yaml.dump({"version": FORMAT, "exchanges": blocks(self.exchanges)}, out)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("# Recorded by `ca test --record`; replayed by `ca test`.\n" + out.getvalue(), "utf-8")
        return True


def _read(path: Path) -> list[dict[str, Any]]:
    """The exchanges of a cassette file; ModelError when it is not one (edited by hand, cut short)."""
    from ruamel.yaml.cyaml import CSafeLoader
    from ruamel.yaml.error import YAMLError

    try:
        loader = CSafeLoader(path.read_text(encoding="utf-8"))
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except (YAMLError, OSError, UnicodeDecodeError) as exc:
        raise ModelError(f"cassette {path} cannot be read ({exc}): re-record it with `ca test --record`") from exc
    exchanges = data.get("exchanges") if isinstance(data, dict) else None
    if not isinstance(exchanges, list) or not all(isinstance(e, dict) for e in exchanges):
        raise ModelError(f"cassette {path} holds no list of exchanges: re-record it with `ca test --record`")
    return exchanges


def request_of(messages: Sequence[BaseMessage], tools: Sequence[str]) -> dict[str, Any]:
    """What a cassette keeps of a model request: the tools offered and the messages, plainly."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.type, "content": str(message.text)}
        if isinstance(message, AIMessage) and message.tool_calls:
            item["tool_calls"] = [{"name": c["name"], "args": c["args"]} for c in message.tool_calls]
        if isinstance(message, ToolMessage):
            item["tool"] = message.name or ""
        out.append(item)
    return {"tools": list(tools), "messages": out}


def response_of(message: AIMessage) -> dict[str, Any]:
    """What a cassette keeps of a model response: text, tool calls, usage and the model's name."""
    usage: Any = message.usage_metadata or {}
    return {
        "text": str(message.text),
        "tool_calls": [{"id": c["id"] or "", "name": c["name"], "args": c["args"]} for c in message.tool_calls],
        "usage": {
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
        },
        "model": str(message.response_metadata.get("model_name", "")),
    }


def first_difference(recorded: Any, sent: Any, path: str = "request") -> str | None:
    """Where ``sent`` first differs from ``recorded``, said plainly; None when they are equal."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in [*recorded, *(k for k in sent if k not in recorded)]:
            if key not in sent:
                return f"{path}.{key}: the cassette has {_short(recorded[key])}, the run sent nothing"
            if key not in recorded:
                return f"{path}.{key}: the run sent {_short(sent[key])}, the cassette has nothing"
            found = first_difference(recorded[key], sent[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(sent, list):
        for i, (a, b) in enumerate(zip(recorded, sent, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(recorded) != len(sent):
            return f"{path}: the cassette has {len(recorded)} items, the run sent {len(sent)}"
        return None
    if recorded != sent:
        return f"{path}: the cassette has {_short(recorded)}, the run sent {_short(sent)}"
    return None


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _leaves_process(tool: BaseTool) -> bool:
    """``http.get``, and calls of remote agents (their name is a URL)."""
    meta = tool.metadata or {}
    if meta.get("capability") == "network":
        return True
    return meta.get("capability") == "agent" and "://" in str(meta.get("ca_name", ""))


def _names(tools: Sequence[Any]) -> tuple[str, ...]:
    out = []
    for tool in tools:
        if isinstance(tool, BaseTool):
            out.append(tool.name)
        elif isinstance(tool, dict):
            function = tool.get("function")
            out.append(str(function.get("name", "") if isinstance(function, dict) else tool.get("name", "")))
        else:
            out.append(str(getattr(tool, "__name__", tool)))
    return tuple(out)


class _Recording(BaseChatModel):
    """A provider model whose every call is kept in a cassette (streamed through as it comes)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    inner: BaseChatModel
    agent: str
    cassette: Any
    call_kwargs: dict[str, Any] = Field(default_factory=dict)
    tool_names: tuple[str, ...] = ()

    @property
    def _llm_type(self) -> str:
        return f"recording-{self.inner._llm_type}"

    @property
    def _streams(self) -> bool:
        """Whether the provider's model is set to stream (``build_model`` sets it): it is then called
        through its streaming API even when nobody follows the tokens (a judge's verdict, a blocking
        request), as it would be unrecorded; its own ``_generate`` would ask for a stream and
        refuse the stream it got back."""
        return bool(getattr(self.inner, "streaming", False))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        bound = self.inner.bind_tools(tools, **kwargs)
        if isinstance(bound, RunnableBinding) and isinstance(bound.bound, BaseChatModel):
            inner, extra = bound.bound, dict(bound.kwargs)
        elif isinstance(bound, BaseChatModel):
            inner, extra = bound, {}
        else:
            raise ModelError(f"the model of agent {self.agent!r} cannot be recorded: its tools bind as {bound!r}")
        return self.model_copy(update={"inner": inner, "call_kwargs": extra, "tool_names": _names(tools)})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self._streams:
            return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))
        result = self.inner._generate(messages, stop, None, **self.call_kwargs, **kwargs)
        self._keep(messages, result.generations[0].message)
        return result

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self._streams:
            return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))
        result = await self.inner._agenerate(messages, stop, None, **self.call_kwargs, **kwargs)
        self._keep(messages, result.generations[0].message)
        return result

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        total: AIMessageChunk | None = None
        for chunk in self.inner._stream(messages, stop, None, **self.call_kwargs, **kwargs):
            total = _add(total, chunk)
            yield chunk
        self._keep(messages, total)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        total: AIMessageChunk | None = None
        async for chunk in self.inner._astream(messages, stop, None, **self.call_kwargs, **kwargs):
            total = _add(total, chunk)
            yield chunk
        self._keep(messages, total)

    def _keep(self, messages: list[BaseMessage], message: BaseMessage | None) -> None:
        if isinstance(message, AIMessageChunk):
            message = AIMessage(
                content=message.content,
                tool_calls=message.tool_calls,
                usage_metadata=message.usage_metadata,
                response_metadata=message.response_metadata,
            )
        if isinstance(message, AIMessage):
            self.cassette.record(self.agent, request_of(messages, self.tool_names), response_of(message))


def _add(total: AIMessageChunk | None, chunk: ChatGenerationChunk) -> AIMessageChunk:
    message = chunk.message
    assert isinstance(message, AIMessageChunk)
    if chunk.generation_info:  # a provider may say its model's name only here
        info = {k: v for k, v in chunk.generation_info.items() if k == "model_name"}
        message = message.model_copy(update={"response_metadata": {**message.response_metadata, **info}})
    return message if total is None else total + message


@dataclass(frozen=True, slots=True)
class _Replayed(Reply):
    """A recorded response, with the usage and model name the provider reported."""

    usage: dict[str, int] = field(default_factory=dict)
    model: str = ""


class _Replaying(LocalChatModel):
    """A provider model answered from a cassette: no key, no connection."""

    agent: str
    cassette: Any
    label: str

    def _reply(self, messages: list[BaseMessage]) -> Reply:
        response = self.cassette.answer(self.agent, request_of(messages, self.tool_names or ()))
        calls = tuple(
            PlannedCall(
                c.get("id") or f"call_{i}", c["name"], dict(c.get("args") or {}), json.dumps(c.get("args") or {})
            )
            for i, c in enumerate(response.get("tool_calls") or [], start=1)
        )
        usage = response.get("usage") or {}
        return _Replayed(
            str(response.get("text", "")), calls, usage=usage, model=str(response.get("model") or self.label)
        )

    def _usage(self, reply: Reply, messages: list[BaseMessage]) -> UsageMetadata:
        if not isinstance(reply, _Replayed):
            return super()._usage(reply, messages)
        inp, out = int(reply.usage.get("input_tokens", 0)), int(reply.usage.get("output_tokens", 0))
        return UsageMetadata(input_tokens=inp, output_tokens=out, total_tokens=inp + out)

    def _metadata(self, reply: Reply) -> dict[str, Any]:
        name = reply.model if isinstance(reply, _Replayed) else self.label
        return {"model_name": name, "finish_reason": "tool_calls" if reply.calls else "stop"}
