"""The Bundle: everything compiled from one version of a project, immutable and hashable.

Graphs and cards are built on first use, so an agent whose model needs a missing
key fails when it is run, not when its neighbours are, and running an agent never
pays for a2a's types. Rebuilding a Bundle is cheap: reload swaps in a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.errors import GraphBubbleUp
from langgraph.graph.state import CompiledStateGraph
from pydantic import BaseModel, Field

from framework import __version__
from framework.compiler.agent import CALL_CONTEXT, RunContext, compile_llm_agent
from framework.compiler.confine import Access
from framework.compiler.mcp_tools import (
    CLIENT_MCP,
    ClientServer,
    McpServers,
    build_mcp_tools,
    client_tools,
    mcp_refs,
    takes_clients,
)
from framework.compiler.models import ModelHook, build_model
from framework.compiler.tool_context import ToolContext
from framework.compiler.tool_names import model_facing_name, yaml_name
from framework.compiler.tools import ToolHook, build_tools
from framework.compiler.workflow import compile_workflow
from framework.errors import AgentNotFound, CAError, Failure, RunError, SkillNotFound
from framework.spec.agent import AgentSpec, LlmAgent
from framework.spec.capabilities import Capabilities
from framework.spec.common import did_you_mean
from framework.spec.interpolate import load_dotenv
from framework.spec.mcp_lock import read_lock
from framework.spec.project import Project
from framework.spec.tools import AgentSelector, AgentTool, BuiltinTool, PythonTool

if TYPE_CHECKING:
    from framework.compiler.card import AgentCard  # the card builder is the compiler's one user of a2a-sdk

Graph = CompiledStateGraph[Any, Any, Any, Any]
_GraphKey = tuple[str, bool, tuple[ClientServer, ...]]
"""A compiled graph's agent, whether it is nested, and the editor's MCP servers it takes (ACP)."""


def _settle_from(work: Callable[[], Graph], loop: asyncio.AbstractEventLoop, done: asyncio.Future[Graph]) -> None:
    """Run ``work`` (on a thread) and settle ``done`` on ``loop`` with what it gave or raised; what
    is not an Exception (a tool file raising KeyboardInterrupt at import) is given as a RunError."""
    try:
        outcome: Graph | BaseException = work()
    except Exception as exc:
        outcome = exc
    except BaseException as exc:
        outcome = RunError(f"compiling the agent failed: {type(exc).__name__}: {exc}")

    def settle() -> None:
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    with contextlib.suppress(RuntimeError):  # the loop closed: the process is stopping
        loop.call_soon_threadsafe(settle)


@dataclass(frozen=True)
class RemoteSkill:
    """A skill a remote agent's card (or its registry) lists."""

    id: str
    name: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemoteAgent:
    """An agent found in a registry."""

    name: str
    url: str
    description: str = ""
    tags: tuple[str, ...] = ()
    registry: str = ""
    skills: tuple[RemoteSkill, ...] = ()


class CallHooks(Protocol):
    """What the runtime does around an in-process agent call."""

    async def started(self, agent: str, text: str, context: RunContext) -> RunContext:
        """Record the callee's task; the context to run it with (its own task id)."""
        ...

    async def finished(
        self,
        context: RunContext,
        *,
        state: str,
        output: str = "",
        error: str = "",
        usage: Mapping[str, float] | None = None,
    ) -> None:
        """Record how the callee's task ended (or that it waits for input)."""
        ...


RemoteCaller = Callable[[str, str], Awaitable[tuple[str, dict[str, Any]]]]


class MiddlewareFactory(Protocol):
    """An agent's middleware (the runtime's policies); ``nested``: for its graph as another agent's tool."""

    def __call__(
        self, agent: AgentSpec, project: Project, *, nested: bool = False
    ) -> Sequence[AgentMiddleware[Any, Any]]: ...


AccessFactory = Callable[[Capabilities | None], Access]
"""An agent's capabilities -> the rules its builtin tools apply to every file and URL they reach."""


def project_digest(project: Project) -> str:
    """Content hash of every spec of the project (and the framework version)."""
    parts = {
        "version": __version__,
        "config": project.config.model_dump(mode="json"),
        "agents": {n: a.model_dump(mode="json") for n, a in sorted(project.agents.items())},
        "profiles": {n: p.model_dump(mode="json") for n, p in sorted(project.profiles.items())},
        "skills": {n: s.model_dump(mode="json") for n, s in sorted(project.skills.items())},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def final_text(state: Mapping[str, Any]) -> str:
    """The text of the last AI message of a graph's state (its answer)."""
    for message in reversed(state.get("messages", [])):
        if isinstance(message, AIMessage):
            return message.text
    return ""


class _AgentInput(BaseModel):
    input: str = Field(description="What to ask the agent, in plain language.")


@dataclass(frozen=True, eq=False)
class Bundle:
    """One compiled version of a project. Equal bundles have equal digests."""

    project: Project
    digest: str
    base_url: str | None = None
    middleware: MiddlewareFactory | None = field(default=None, repr=False)
    access: AccessFactory | None = field(default=None, repr=False)
    """The capability rules for each llm agent's builtin tools (the runtime's governance provides them)."""
    mask: Callable[[str], str] = field(default=str, repr=False)
    """Masks known secrets out of what a builtin tool cuts short (the runtime provides it)."""
    remote: RemoteCaller | None = field(default=None, repr=False)
    call_hooks: CallHooks | None = field(default=None, repr=False)
    directory: tuple[RemoteAgent, ...] = ()
    """Agents of the registries in ca.yaml, as discovered when the bundle was built."""
    """Records in-process agent calls as tasks of their own (the runtime provides it)."""
    """Calls a remote A2A agent (URL, input) -> (answer, artifact); the runtime provides it."""
    """Policies for each llm agent (the runtime plugs governance in here)."""
    mcp: McpServers | None = field(default=None, repr=False)
    """The MCP client side (the runtime provides it): the tools of ``mcp_servers``."""
    checkpointer: Any = field(default=None, repr=False)
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    model_hook: ModelHook | None = field(default=None, repr=False)
    """Wraps how each agent's model is built (``ca test``'s cassettes)."""
    tool_hook: ToolHook | None = field(default=None, repr=False)
    """Wraps each tool of an agent (``ca test``'s cassettes keep the results of those leaving the process)."""
    tool_names: dict[str, str] = field(default_factory=dict, repr=False)
    """Model-facing tool name -> its name in the YAML (``notes_list_notes`` -> ``notes.list_notes``),
    for every tool of the agents compiled so far: events, traces and metrics show the YAML's name."""
    _graphs: dict[_GraphKey, Graph] = field(default_factory=dict, repr=False)
    _compiling: dict[_GraphKey, threading.Lock] = field(default_factory=dict, repr=False)
    _pending: dict[tuple[_GraphKey, asyncio.AbstractEventLoop], asyncio.Future[Graph]] = field(
        default_factory=dict, repr=False
    )
    """:meth:`agraph`'s compiles under way, on each event loop."""
    _cards: dict[str, AgentCard] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Bundle) and other.digest == self.digest

    @property
    def agents(self) -> Mapping[str, AgentSpec]:
        return self.project.agents

    def agent(self, name: str) -> AgentSpec:
        """The spec of ``name``, or an AgentNotFound that suggests the closest name."""
        if name not in self.project.agents:
            raise AgentNotFound.among(name, self.project.agents)
        return self.project.agents[name]

    def check_skill(self, agent: str, skill: str) -> None:
        """Raise SkillNotFound (listing the agent's skills) unless ``agent`` has the skill ``skill``."""
        ids = [s.id for s in self.project.skills_of(self.agent(agent))]
        if skill not in ids:
            hint = did_you_mean(skill, ids)
            raise SkillNotFound(
                f"agent {agent!r} has no skill {skill!r}{f' ({hint})' if hint else ''}; "
                f"skills: {', '.join(ids) or 'none'}"
            )

    def card(self, name: str) -> AgentCard:
        """The Agent Card of ``name`` (built on first use: a2a's types are not needed to run)."""
        with self._lock:
            if name not in self._cards:
                from framework.compiler.card import build_card

                self._cards[name] = build_card(self.agent(name), self.project, base_url=self.base_url)
            return self._cards[name]

    def _graph_key(self, name: str, nested: bool) -> tuple[AgentSpec, _GraphKey]:
        spec = self.agent(name)
        # The MCP servers an editor passed (ACP) make a graph of their own for the agents that take them.
        clients = CLIENT_MCP.get() if isinstance(spec, LlmAgent) and takes_clients(self._caps(spec)) else ()
        return spec, (name, nested, clients)

    def graph(self, name: str, *, nested: bool = False) -> Graph:
        """The compiled graph of an agent (with the checkpointer; ``nested`` graphs inherit their caller's)."""
        spec, key = self._graph_key(name, nested)
        if (graph := self._graphs.get(key)) is not None:
            return graph
        with self._lock:  # one lock per graph: one agent's compile does not wait for another's
            compiling = self._compiling.setdefault(key, threading.Lock())
        with compiling:
            if (graph := self._graphs.get(key)) is None:
                graph = self._graphs[key] = self._compile(spec, nested=nested, clients=key[2])
            return graph

    async def agraph(self, name: str, *, nested: bool = False) -> Graph:
        """:meth:`graph` for the event loop. The first time, the graph is compiled in a thread of its
        own (with this context, so an editor's MCP servers), so that the compile — a python tool's
        import, a model's client — stops neither the loop (the server's other requests, its probes)
        nor anything else: the callers that ask meanwhile await that one compile, and its failure
        (each asks again after it). The thread is a daemon: a process stopping does not wait for a
        tool whose import hangs."""
        _, key = self._graph_key(name, nested)
        if (graph := self._graphs.get(key)) is not None:
            return graph
        loop = asyncio.get_running_loop()
        with self._lock:
            compiling = self._pending.get((key, loop))
            if compiling is None:
                compiling = self._pending[(key, loop)] = loop.create_future()
                compiling.add_done_callback(functools.partial(self._compiled, (key, loop)))
                context = contextvars.copy_context()
                work = functools.partial(context.run, self.graph, name, nested=nested)
                threading.Thread(target=_settle_from, args=(work, loop, compiling), daemon=True).start()
        return await asyncio.shield(compiling)  # a caller that gives up leaves it to the others

    def _compiled(self, pending: tuple[_GraphKey, asyncio.AbstractEventLoop], done: asyncio.Future[Graph]) -> None:
        """A compile for :meth:`agraph` ended: the next caller finds the graph, or compiles again."""
        with self._lock:
            if self._pending.get(pending) is done:
                del self._pending[pending]
        if not done.cancelled():
            done.exception()  # retrieved: every caller may have given up

    def _caps(self, spec: AgentSpec) -> Capabilities | None:
        return spec.capabilities or self.project.config.defaults.capabilities

    def _compile(self, spec: AgentSpec, *, nested: bool, clients: tuple[ClientServer, ...] = ()) -> Graph:
        checkpointer = None if nested else self.checkpointer
        middleware = self.middleware(spec, self.project, nested=nested) if self.middleware else ()
        capabilities = spec.capabilities or self.project.config.defaults.capabilities
        context = ToolContext(
            root=self.project.root,
            agent=spec.name,
            capabilities=capabilities,
            access=self.access(capabilities) if self.access else None,
            sources=self.project.tool_files,
            mask=self.mask,
        )
        if isinstance(spec, LlmAgent):
            config = spec.model or self.project.config.defaults.model
            tools: list[BaseTool] = [*build_tools(spec, context), *self._agent_tools(spec)]
            if mcp_refs(spec):
                tools.extend(build_mcp_tools(spec, self.mcp, read_lock(self.project.root)))
            tools.extend(client_tools(capabilities, self.mcp, clients))
            if self.tool_hook is not None:
                tools = [self.tool_hook(tool, spec.name) for tool in tools]
            for tool in tools:  # a dotted name the model cannot call (SERVER.TOOL): the model's has '_'
                if named := yaml_name(tool.name, (tool.metadata or {}).get("ca_name")):
                    self.tool_names[tool.name] = named
            skills = {s.id: s for s in (self.project.skills[s] if isinstance(s, str) else s for s in spec.skills)}
            return compile_llm_agent(
                spec,
                model=build_model(
                    config,
                    agent=spec.name,
                    environ=self.environ,
                    tools=[t.name for t in tools],
                    hook=self.model_hook,
                ),
                tools=tools,
                skills=skills,
                middleware=middleware,
                checkpointer=checkpointer,
            )
        from framework.compiler.builtin_tools import builtin_tools

        # Tool steps get the same tools, capabilities and policies as a model's tool calls.
        steps_tools = builtin_tools(context)
        if self.tool_hook is not None:
            steps_tools = {name: self.tool_hook(tool, spec.name) for name, tool in steps_tools.items()}
        return compile_workflow(
            spec,
            call_agent=self.call_agent,
            tools=steps_tools,
            checkpointer=checkpointer,
            middleware=middleware,
        )

    async def prepare(self, name: str) -> None:
        """Start the MCP servers ``name`` uses (off the event loop) before its graph is compiled."""
        spec = self.agent(name)
        if self.mcp is None or not isinstance(spec, LlmAgent):
            return
        servers = [r.mcp for r in mcp_refs(spec)]
        if takes_clients(self._caps(spec)) and (clients := CLIENT_MCP.get()):
            self.mcp.add_clients(clients)
            servers.extend(c.name for c in clients)
        if servers:
            await self.mcp.prepare(dict.fromkeys(servers))

    async def call_agent(self, name: str, text: str) -> str:
        """Run another agent of the project in-process, nested in the current run; its answer."""
        answer, _ = await self.call_agent_with_usage(name, text)
        return answer

    async def call_agent_with_usage(self, name: str, text: str) -> tuple[str, dict[str, float]]:
        """Like :meth:`call_agent`, also returning what the callee used (its caller pays for it)."""
        context = CALL_CONTEXT.get() or RunContext(source="agent-call", depth=1)
        _announce_callee(name)
        hooks = self.call_hooks
        if hooks is not None:
            context = await hooks.started(name, text, context)
        try:
            await self.prepare(name)
            graph = await self.agraph(name, nested=True)
            state = await graph.ainvoke({"messages": [HumanMessage(text)]}, context=context)
        except GraphBubbleUp:
            if hooks is not None:
                await hooks.finished(context, state="input-required")
            raise
        except BaseException as exc:
            if hooks is not None:
                canceled = isinstance(exc, asyncio.CancelledError)
                rejected = isinstance(exc, CAError) and exc.rejects
                state = "canceled" if canceled else "rejected" if rejected else "failed"
                await hooks.finished(context, state=state, error=str(exc))
            raise
        answer, usage = final_text(state), dict(state.get("ca_usage") or {})
        stopped = (state.get("ca_stop") or {}).get("failure")
        if stopped:  # the callee's policies ended it failed (its answer broke its contract): the same kind here
            failure = Failure.from_json(stopped)
            if hooks is not None:
                await hooks.finished(context, state="failed", error=failure.message, usage=usage)
            raise failure.error()
        if hooks is not None:
            await hooks.finished(context, state="completed", output=answer, usage=usage)
        return answer, usage

    def _agent_refs(self, spec: LlmAgent) -> list[AgentTool]:
        """The agent's agent tools, tag selectors expanded (each callee once)."""
        refs: list[AgentTool] = []
        for ref in spec.tools:
            if isinstance(ref, AgentTool):
                refs.append(ref)
            elif isinstance(ref, AgentSelector):
                refs.extend(self.select(ref.agents.tags, exclude=spec.name))
        seen: set[str] = set()
        unique: list[AgentTool] = []
        for ref in refs:
            if ref.agent not in seen:
                seen.add(ref.agent)
                unique.append(ref)
        return unique

    def _agent_tools(self, spec: LlmAgent) -> list[BaseTool]:
        return [self._agent_tool(ref) for ref in self._agent_refs(spec)]

    def tool_list(self, name: str) -> list[dict[str, str]]:
        """Agent ``name``'s tools as the model gets them, without building any: ``name`` (what a
        model calls, e.g. ``fs_read``), ``tool`` (the spec's name: ``fs.read``, a python function,
        an agent's name or URL) and ``kind``. A workflow has none (its steps name their tools)."""
        spec = self.agent(name)
        if not isinstance(spec, LlmAgent):
            return []
        tools: list[dict[str, str]] = []
        for ref in spec.tools:
            if isinstance(ref, BuiltinTool):
                tools.append({"name": model_facing_name(ref.builtin), "tool": ref.builtin, "kind": "builtin"})
            elif isinstance(ref, PythonTool):
                tool_name = ref.name or ref.function
                tools.append({"name": model_facing_name(tool_name), "tool": ref.python, "kind": "python"})
        for ref in self._agent_refs(spec):
            tool_name = ref.name or (remote_tool_name(ref.agent) if ref.is_remote else ref.agent)
            tools.append({"name": model_facing_name(tool_name), "tool": ref.agent, "kind": "agent"})
        return tools

    def select(self, tags: Sequence[str], *, exclude: str = "") -> list[AgentTool]:
        """Every agent — of the project or of a registry — whose skills carry all ``tags``."""
        wanted = set(tags)
        found: list[AgentTool] = []
        for name, agent in sorted(self.project.agents.items()):
            skills = [self.project.skills[s] if isinstance(s, str) else s for s in agent.skills]
            if name != exclude and wanted <= {t for s in skills for t in s.tags}:
                found.append(AgentTool(agent=name))
        for entry in self.directory:
            if wanted <= set(entry.tags):
                found.append(
                    AgentTool(agent=entry.url, name=remote_tool_name(entry.name), description=entry.description)
                )
        return found

    def _agent_tool(self, ref: AgentTool) -> BaseTool:
        name = ref.name or (remote_tool_name(ref.agent) if ref.is_remote else ref.agent)
        if ref.is_remote:
            url = ref.agent

            async def remote(input: str) -> tuple[str, dict[str, Any]]:
                if self.remote is None:
                    raise ToolException(f"remote agent calls ({url}) need the runtime")
                return await self.remote(url, input)

            description = ref.description or f"The remote A2A agent at {url}"
            coroutine = remote
        else:
            callee = self.project.agents[ref.agent]
            description = ref.description or callee.description or f"Ask the {ref.agent} agent"

            async def local(input: str) -> tuple[str, dict[str, Any]]:
                answer, usage = await self.call_agent_with_usage(ref.agent, input)
                return answer, {"usage": usage}

            coroutine = local
        return StructuredTool.from_function(
            coroutine=coroutine,
            name=model_facing_name(name),
            description=description,
            args_schema=_AgentInput,
            response_format="content_and_artifact",
            # Governance judges the callee: a local name, or a remote URL (its host must be allowed).
            metadata={"ca_name": ref.agent, "capability": "agent"},
            handle_tool_error=True,
        )


def _announce_callee(name: str) -> None:
    """Tell the caller's stream which agent this tool call runs, so the callee's events carry its
    name as their source (not the graph node's, ``tools``)."""
    from langgraph.config import get_config, get_stream_writer

    try:
        writer, config = get_stream_writer(), get_config()
    except RuntimeError:  # not inside a graph run (a direct call): nobody to tell
        return
    namespace = config.get("configurable", {}).get("checkpoint_ns", "")
    writer({"ca_event": "callee", "agent": name, "ns": namespace})


def remote_tool_name(url: str) -> str:
    """A tool name for a remote agent: the last segment of its URL (``.../agents/writer/`` -> ``writer``)."""
    segments = [s for s in url.split("://", 1)[-1].split("/")[1:] if s]
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", segments[-1] if segments else url.split("://", 1)[-1])
    return name.strip("_") or "remote_agent"


def build_bundle(
    project: Project,
    *,
    middleware: MiddlewareFactory | None = None,
    access: AccessFactory | None = None,
    mask: Callable[[str], str] = str,
    remote: RemoteCaller | None = None,
    call_hooks: CallHooks | None = None,
    directory: Sequence[RemoteAgent] = (),
    mcp: McpServers | None = None,
    checkpointer: Any = None,
    environ: Mapping[str, str] | None = None,
    base_url: str | None = None,
    model_hook: ModelHook | None = None,
    tool_hook: ToolHook | None = None,
) -> Bundle:
    """Compile a loaded project. Graphs and cards are built on first use.

    ``environ`` is where API keys are looked up: by default the process environment
    over the project's ``.env``.
    """
    if environ is None:
        environ = {**load_dotenv(project.root), **os.environ}
    return Bundle(
        project=project,
        digest=project_digest(project),
        base_url=base_url,
        middleware=middleware,
        access=access,
        mask=mask,
        remote=remote,
        call_hooks=call_hooks,
        directory=tuple(directory),
        mcp=mcp,
        checkpointer=checkpointer,
        environ=environ,
        model_hook=model_hook,
        tool_hook=tool_hook,
    )
