"""Agents served as an MCP server (``ca mcp serve``): each agent a tool, its skills prompts.

A tool call is a task like any other (``Runtime.send``; the same task record, audit and
governance every entry point uses). Its arguments: ``message``, and optionally ``context_id``
to continue a conversation, ``skill``, and ``decision`` (``approve`` / ``reject``) to answer the
task a conversation waits on. A run that pauses for a person asks through elicitation when the
client declared it can answer (inline on a 2025 session; an input-required result with the task
id as request state on the 2026 protocol, answered by the client's retry). Otherwise the call
ends with a result that says what it waits for and how to decide it (this tool with
``decision``, ``ca approve TASK``, or A2A); the task stays ``input-required`` for whichever comes
first. Each tool call and result of the run is a progress notification when the client sent a
progress token, and a cancelled request cancels its task.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any, BinaryIO

from mcp.server import Server, ServerRequestContext
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    GetPromptRequestParams,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptMessage,
    TextContent,
    Tool,
)

from framework import __version__
from framework.compiler.mcp_tools import model_name
from framework.errors import CAError
from framework.protocols.a2a.auth import Caller
from framework.protocols.stdio_loop import LINE_LIMIT, LineReader
from framework.runtime.events import Paused, RunFinished, TextChunk, ToolCallFinished, ToolCallStarted
from framework.runtime.runtime import Runtime

logger = logging.getLogger(__name__)
CANCELLED = "cancelled: the MCP client cancelled the request, or the server was stopped (Ctrl-C or SIGTERM)"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask the agent, in plain language."},
        "context_id": {
            "type": "string",
            "description": "Continue this conversation (the context_id of an earlier result); omit to start one.",
        },
        "skill": {"type": "string", "description": "A skill of the agent to use for this message."},
        "decision": {
            "type": "string",
            "enum": ["approve", "reject"],
            "description": "Answer the approval the conversation context_id waits for (message: a reason).",
        },
    },
    "required": ["message"],
}


class AgentTools:
    """The MCP handlers over one Runtime: list agents as tools, run them, list skills as prompts."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def names(self) -> dict[str, str]:
        """Tool name -> agent name."""
        return {model_name(name): name for name in sorted(self.runtime.bundle.agents)}

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = []
        for tool, agent in self.names().items():
            spec = self.runtime.bundle.agent(agent)
            tools.append(
                Tool(name=tool, description=spec.description or f"The {agent} agent.", input_schema=INPUT_SCHEMA)
            )
        return ListToolsResult(tools=tools)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult | InputRequiredResult:
        agent = self.names().get(params.name)
        if agent is None:
            return _error(f"no agent {params.name!r}; agents: {', '.join(self.names()) or 'none'}")
        args = params.arguments or {}
        message, context_id = args.get("message"), args.get("context_id")
        decision, skill = args.get("decision"), args.get("skill")
        if not isinstance(message, str):
            return _error("`message` (a string) is required")
        meta: Any = params.meta or {}
        token = meta.get("progress_token", meta.get("progressToken")) if isinstance(meta, dict) else None
        progress = _Progress(ctx, token)
        asked = (params.input_responses or {}).get(APPROVAL)
        # ca serve's /mcp: the request's Caller (server.auth); None over stdio (ca mcp serve: the local user).
        request = getattr(ctx, "request", None)
        user = request.scope.get("user") if request is not None else None
        caller = user if isinstance(user, Caller) else None
        by = caller.name if caller is not None else "mcp"
        owner = None if caller is None or caller.approver else caller.name  # None: sees every task
        try:
            if isinstance(asked, ElicitResult) and params.request_state:  # the answer to our elicitation
                task = await self.runtime.tasks.afind(params.request_state)
                if task is None or owner not in (None, task.caller):
                    return _error(f"task {params.request_state!r} not found")
                events = self.runtime.decide(task.id, _answer(asked), by=by)
                return await self._drive(ctx, events, task.conversation, progress, task.id)
            if decision is not None:
                if not isinstance(context_id, str) or decision not in ("approve", "reject"):
                    return _error("`decision` is approve or reject, with the `context_id` of the waiting conversation")
                waiting = [
                    t
                    for t in await self.runtime.tasks.alist(pending_only=True, limit=1000, caller=owner)
                    if t.conversation == context_id
                ]
                if not waiting:
                    return _error(f"conversation {context_id!r} waits for no decision")
                task_id = waiting[0].id
                answer = {"decision": decision, **({"reason": message} if message and decision == "reject" else {})}
                events = self.runtime.decide(task_id, answer, by=by)
                conversation = context_id
            else:
                conversation = context_id if isinstance(context_id, str) and context_id else uuid.uuid4().hex[:12]
                if caller is not None and "caller" not in caller.roles:
                    return _error(f"credential {caller.name!r} has no role 'caller': it may not send messages")
                task_id = uuid.uuid4().hex  # known before the run starts, so a cancel can name it
                events = self.runtime.send(
                    agent,
                    message,
                    conversation=conversation,
                    skill=skill if isinstance(skill, str) else None,
                    task_id=task_id,
                    caller=caller.name if caller is not None else None,
                )
            return await self._drive(ctx, events, conversation, progress, task_id)
        except CAError as exc:
            return _error(str(exc), code=exc.code)

    async def _drive(
        self, ctx: ServerRequestContext[Any], events: Any, conversation: str, progress: _Progress, task_id: str
    ) -> CallToolResult | InputRequiredResult:
        """Run ``events`` to their end. A pause is asked through elicitation when the client can answer
        one: inline on a legacy session, as an input-required result (the client calls again with the
        answer) on the 2026 protocol; otherwise the result says how to decide it."""
        while True:
            text: list[str] = []
            pauses: list[Paused] = []
            finished = await self._events(events, text, pauses, progress, task_id)
            if finished is None:
                return _error("the run ended without a result")
            if finished.state != "input-required" or not _elicits(ctx):
                return _finished(finished, "".join(text), pauses, conversation)
            message = "; ".join(p.pause.message for p in pauses) or "approve this task?"
            if not str(ctx.protocol_version or "").startswith("2025"):
                form = ElicitRequestFormParams(message=message, requested_schema=DECISION_SCHEMA)
                return InputRequiredResult(
                    input_requests={APPROVAL: ElicitRequest(params=form)}, request_state=finished.task_id
                )
            answer = await ctx.session.elicit_form(message, DECISION_SCHEMA, related_request_id=ctx.request_id)
            events = self.runtime.decide(finished.task_id, _answer(answer), by="mcp")

    async def _events(
        self, events: Any, text: list[str], pauses: list[Paused], progress: _Progress, task_id: str
    ) -> RunFinished | None:
        finished: RunFinished | None = None
        try:
            async for event in events:
                if isinstance(event, TextChunk) and not event.source:
                    text.append(event.text)
                elif isinstance(event, ToolCallStarted):
                    await progress.note(f"calling {event.tool}")
                elif isinstance(event, ToolCallFinished):
                    await progress.note(f"{event.tool} {'failed' if event.is_error else 'done'}")
                elif isinstance(event, Paused):
                    pauses.append(event)
                elif isinstance(event, RunFinished):
                    finished = event  # the last event; the stream ends after it, giving back the turn
        except asyncio.CancelledError:  # the client cancelled the request, or the server stops: the task is canceled
            await self.runtime.amark_canceled(task_id, CANCELLED)
            raise
        return finished

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        prompts = []
        for agent in sorted(self.runtime.bundle.agents):
            for skill in self.runtime.bundle.project.skills_of(self.runtime.bundle.agent(agent)):
                prompts.append(
                    Prompt(name=f"{agent}.{skill.id}", description=skill.description or skill.name or skill.id)
                )
        return ListPromptsResult(prompts=prompts)

    async def get_prompt(self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams) -> GetPromptResult:
        agent, _, skill_id = params.name.partition(".")
        spec = self.runtime.bundle.agent(agent)
        for skill in self.runtime.bundle.project.skills_of(spec):
            if skill.id == skill_id:
                example = (skill.examples or [skill.description or skill.id])[0]
                text = f"Ask the {agent} agent (tool {model_name(agent)}, skill {skill.id!r}): {example}"
                return GetPromptResult(
                    description=skill.description or None,
                    messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))],
                )
        raise ValueError(f"no prompt {params.name!r}")


APPROVAL = "approval"
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["approve", "reject"], "description": "Run it, or refuse it."},
        "reason": {"type": "string", "description": "Why (the agent reads it when you reject)."},
    },
    "required": ["decision"],
}


def _elicits(ctx: ServerRequestContext[Any]) -> bool:
    """Whether the client said it answers elicitation requests."""
    caps = getattr(ctx.session, "client_capabilities", None)
    return caps is not None and caps.elicitation is not None


def _answer(result: ElicitResult) -> dict[str, Any]:
    """A decision from an elicitation's answer: only an accepted ``approve`` approves."""
    content = result.content or {}
    if result.action == "accept" and content.get("decision") == "approve":
        return {"decision": "approve"}
    reason = content.get("reason") if result.action == "accept" else f"the MCP client answered {result.action}"
    return {"decision": "reject", **({"reason": str(reason)} if reason else {})}


class _Progress:
    def __init__(self, ctx: ServerRequestContext[Any], token: Any) -> None:
        self.ctx, self.token, self.count = ctx, token, 0

    async def note(self, message: str) -> None:
        if self.token is None:
            return
        self.count += 1
        await self.ctx.session.send_progress_notification(self.token, self.count, None, message)


def _finished(event: RunFinished, text: str, pauses: list[Paused], conversation: str) -> CallToolResult:
    facts = {"context_id": conversation, "task_id": event.task_id, "state": event.state}
    if event.state == "completed":
        return CallToolResult(content=[TextContent(type="text", text=event.output or text)], structured_content=facts)
    if event.state == "input-required":
        asked = "; ".join(p.pause.message for p in pauses) or "a decision"
        said = (
            f"The task waits for a person: {asked}. Decide it by calling this tool again with "
            f"context_id {conversation!r} and decision approve or reject, or with `ca approve "
            f"{event.task_id[:12]}` (`--reject --reason ...`), or over A2A."
        )
        return CallToolResult(content=[TextContent(type="text", text=said)], structured_content=facts)
    code = event.failure.code if event.failure is not None else "run_failed"
    return CallToolResult(
        content=[TextContent(type="text", text=event.error or event.state)],
        structured_content={**facts, "code": code},
        is_error=True,
    )


def _error(message: str, *, code: str = "usage_error") -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=message)], structured_content={"code": code}, is_error=True
    )


def agent_server(runtime: Runtime) -> Server[Any]:
    handlers = AgentTools(runtime)
    return Server(
        "cleveragents",
        version=__version__,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
    )


async def serve_stdio(runtime: Runtime, stdin: BinaryIO) -> None:
    """Speak MCP on ``stdin`` and stdout until the client closes ``stdin`` (this server's alone: it is
    read by a :class:`LineReader`, so that a stop never waits for a line)."""
    from mcp.server.stdio import stdio_server

    server = agent_server(runtime)
    lines = _TextLines(LineReader(stdin, LINE_LIMIT))
    async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type] # it only iterates
        await server.run(read, write, server.create_initialization_options())


class _TextLines:
    """The lines of a :class:`LineReader` as the MCP SDK's stdio transport iterates them (text). A
    line over :data:`LINE_LIMIT` is logged and becomes an empty line, which the transport drops."""

    def __init__(self, lines: LineReader) -> None:
        self._lines = lines

    def __aiter__(self) -> _TextLines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.read()
        if isinstance(line, int):
            logger.warning("refused an MCP message of %d bytes: longer than %d", line, LINE_LIMIT)
            return "\n"
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")  # as the SDK's own transport decodes
