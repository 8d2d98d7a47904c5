"""An ``llm`` agent becomes ``langchain.agents.create_agent`` with our middleware.

The middleware list is the slot where policies plug in (governance wraps model and
tool calls there). Skills are per-request: the run context names a skill, and
:class:`SkillMiddleware` adds its instructions and narrows the tools for that request.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import Context, ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from langchain.agents import create_agent, factory
from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool
from langgraph.graph.state import CompiledStateGraph
from langsmith import set_runtime_overrides, traceable
from langsmith.utils import tracing_is_enabled

from framework.spec.agent import LlmAgent
from framework.spec.skill import Skill

RECURSION_LIMIT = 200


@dataclass(frozen=True)
class RunContext:
    """Per-request context every graph receives (``graph.astream(..., context=RunContext(...))``).

    Nested agent calls get a child context (same task and audit, ``depth + 1``, the caller's
    remaining budget as ``caps``).
    """

    skill: str | None = None
    """A skill id named by the request (A2A metadata, ACP slash command, ``ca run --skill``)."""
    task_id: str = ""
    conversation_id: str = ""
    source: str = "cli"
    """Where the request came in: cli, a2a-http, a2a-stdio, acp, agent-call, mcp."""
    caller: str = ""
    """Who sent the task (its owner, as the task store records it); a callee's is its caller's.
    Model and tool call records name it, so usage is counted by caller from the audit alone."""
    profile: str | None = None
    """An automation profile chosen for this conversation (an ACP session mode), over the agent's own."""
    depth: int = 0
    """How many agent calls deep this run is (0 for the agent a person asked)."""
    caps: Mapping[str, float] | None = None
    """What the caller has left (budget limit name -> amount); a callee never gets more."""
    chain: tuple[str, ...] = ()
    """The agents (names or URLs) of the calls that led here, outermost first: a callee found in
    it again is a call cycle, refused at run time."""
    call_id: str = ""
    """For a callee: the caller's tool call that started it (keys durable state of remote calls)."""
    request: Mapping[str, Any] | None = field(default=None, compare=False)
    """The message that started or resumed this run, as the transport got it: ``message_id`` and
    ``metadata`` (workflow templates read ``{{ request.message_id }}``, ``{{ request.metadata.KEY }}``)."""
    audit: Any = field(default=None, compare=False, repr=False)
    """The audit log to append to (``framework.runtime.audit.AuditLog``), or None."""
    fence: Any = field(default=None, compare=False, repr=False)
    """Asked before each tool runs whether this process still owns the task (``framework.runtime.fence``),
    or None (one machine: nothing to ask)."""

    def child(self) -> RunContext:
        return replace(self, skill=None, profile=None, source="agent-call", depth=self.depth + 1)


CALL_CONTEXT: ContextVar[RunContext | None] = ContextVar("ca_call_context", default=None)
"""Set around an agent-call tool by the runtime's governance: the callee's context (depth, caps)."""


def system_prompt(spec: LlmAgent) -> str:
    if spec.instructions.strip():
        return spec.instructions.strip()
    about = f" {spec.description}" if spec.description else ""
    return f"You are {spec.name}.{about}"


class SkillMiddleware(AgentMiddleware[Any, RunContext]):
    """Specialises a model request for the skill the run context names."""

    def __init__(self, skills: Mapping[str, Skill]) -> None:
        super().__init__()
        self.skills = dict(skills)

    def _specialise(self, request: ModelRequest[RunContext]) -> ModelRequest[RunContext]:
        context = request.runtime.context if request.runtime is not None else None
        skill = self.skills.get(context.skill) if isinstance(context, RunContext) and context.skill else None
        if skill is None:
            return request
        overrides: dict[str, Any] = {}
        if skill.instructions:
            base = request.system_message.text if request.system_message is not None else ""
            heading = f"Skill: {skill.name or skill.id}"
            overrides["system_message"] = SystemMessage(f"{base}\n\n{heading}\n{skill.instructions}".strip())
        if skill.tools is not None:
            allowed = set(skill.tools)
            overrides["tools"] = [t for t in request.tools if _spec_name(t) in allowed]
        return request.override(**overrides) if overrides else request

    def wrap_model_call(
        self,
        request: ModelRequest[RunContext],
        handler: Callable[[ModelRequest[RunContext]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(self._specialise(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[RunContext],
        handler: Callable[[ModelRequest[RunContext]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._specialise(request))


def _spec_name(tool: BaseTool | dict[str, Any]) -> str:
    if isinstance(tool, BaseTool):
        return str((tool.metadata or {}).get("ca_name", tool.name))
    return str(tool.get("name", ""))


async def _inline_unless_traced(
    default: Callable[..., Awaitable[Any]], ctx: Context, func: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> Any:
    """langsmith's ``aio_to_thread``: inline while LangSmith tracing is off, else its own (a worker thread).

    create_agent wraps every middleware ``wrap_*`` hook in a langsmith ``traceable``, whose span
    set-up and end each hop to a worker thread, traced or not: two hops per governed tool call,
    a third of governance's cost. Untraced, both only build an empty container: nothing to wait for.
    """
    if tracing_is_enabled():
        return await default(ctx, func, *args, **kwargs)
    return ctx.run(func, *args, **kwargs)


@functools.cache
def _untraced_spans_inline() -> None:
    """Install :func:`_inline_unless_traced` once per process (langsmith's one runtime override)."""
    set_runtime_overrides(aio_to_thread=_inline_unless_traced)


def _as_they_are(**_: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``traceable`` that leaves the function it decorates as it is."""
    return lambda hook: hook


_COMPOSING = threading.Lock()


@contextmanager
def _hook_spans_only_if_traced() -> Iterator[None]:
    """While create_agent runs: hooks wrapped in langsmith spans only if LangSmith traces now.

    create_agent wraps every middleware ``wrap_*`` hook in a langsmith ``traceable`` (the
    ``traceable`` of ``langchain.agents.factory``). Untraced, each call through it still builds
    and ends a span context: 2% of a served request's instructions, more for each governed tool
    call. So with tracing off when the agent is compiled (no ``LANGSMITH_TRACING``, no
    ``tracing_context``) the hooks are composed unwrapped; with it on, as create_agent wraps them.
    The swap is made under a lock, so a compile in another thread gets its own choice.
    """
    with _COMPOSING:
        if tracing_is_enabled() or not hasattr(factory, "traceable"):  # traced, or a langchain without it
            yield
            return
        setattr(factory, "traceable", _as_they_are)  # noqa: B010 - a module global create_agent reads
        try:
            yield
        finally:
            setattr(factory, "traceable", traceable)  # noqa: B010


def compile_llm_agent(
    spec: LlmAgent,
    *,
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    skills: Mapping[str, Skill],
    middleware: Sequence[AgentMiddleware[Any, Any]] = (),
    checkpointer: Any = None,
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The agent loop: model ⇄ tools, with skills and any policy middleware.

    An agent without skills gets no :class:`SkillMiddleware`: no request can name one of its skills
    (``Bundle.check_skill`` refuses it first), and each ``wrap_model_call`` in the stack costs every
    model call a hop through it (and a langsmith span when LangSmith traces: :func:`_hook_spans_only_if_traced`).
    """
    _untraced_spans_inline()
    stack: list[AgentMiddleware[Any, Any]] = [*([SkillMiddleware(skills)] if skills else []), *middleware]
    with _hook_spans_only_if_traced():
        graph = create_agent(
            model,
            list(tools),
            system_prompt=system_prompt(spec),
            middleware=stack,
            context_schema=RunContext,
            checkpointer=checkpointer,
            name=spec.name,
        )
    # Each model turn and each tool round is a step; budgets (max_turns) are the real limit.
    return graph.with_config(recursion_limit=RECURSION_LIMIT)
