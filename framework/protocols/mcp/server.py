"""Agents served as an MCP server (``ca mcp serve``): each agent a tool, its skills prompts.

A tool call is a task like any other (``Runtime.send``; the same task record, audit and
governance every entry point uses). Its arguments: ``message``, and optionally ``context_id``
to continue a conversation, ``skill``, and ``decision`` (``approve`` / ``reject``) to answer the
task a conversation waits on. A run that pauses for a person ends the call with a result that
says what it waits for and how to decide it (this call with ``decision``, ``ca approve TASK``,
or A2A); the task stays ``input-required`` for whichever comes first. Each tool call and each
tool result of the run is a progress notification when the client sent a progress token, and a
cancelled request cancels its task. Approvals through MCP elicitation are not built.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
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
from framework.runtime.events import Paused, RunFinished, TextChunk, ToolCallFinished, ToolCallStarted
from framework.runtime.runtime import Runtime

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

    async def call_tool(self, ctx: ServerRequestContext[Any], params: CallToolRequestParams) -> CallToolResult:
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
        try:
            if decision is not None:
                if not isinstance(context_id, str) or decision not in ("approve", "reject"):
                    return _error("`decision` is approve or reject, with the `context_id` of the waiting conversation")
                waiting = [
                    t for t in self.runtime.tasks.list(pending_only=True, limit=1000) if t.conversation == context_id
                ]
                if not waiting:
                    return _error(f"conversation {context_id!r} waits for no decision")
                task_id = waiting[0].id
                answer = {"decision": decision, **({"reason": message} if message and decision == "reject" else {})}
                events = self.runtime.decide(task_id, answer, by="mcp")
                conversation = context_id
            else:
                conversation = context_id if isinstance(context_id, str) and context_id else uuid.uuid4().hex[:12]
                task_id = uuid.uuid4().hex  # known before the run starts, so a cancel can name it
                events = self.runtime.send(
                    agent,
                    message,
                    conversation=conversation,
                    skill=skill if isinstance(skill, str) else None,
                    task_id=task_id,
                )
            return await self._drive(events, conversation, progress, task_id)
        except CAError as exc:
            return _error(str(exc), code=exc.code)

    async def _drive(self, events: Any, conversation: str, progress: _Progress, task_id: str) -> CallToolResult:
        text: list[str] = []
        pauses: list[Paused] = []
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
                    return _finished(event, "".join(text), pauses, conversation)
        except asyncio.CancelledError:  # the client cancelled the request: the task is canceled too
            self.runtime.mark_canceled(task_id, "cancelled by the MCP client")
            raise
        return _error("the run ended without a result")

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        from framework.compiler.card import agent_skills

        prompts = []
        for agent in sorted(self.runtime.bundle.agents):
            for skill in agent_skills(self.runtime.bundle.agent(agent), self.runtime.bundle.project):
                prompts.append(
                    Prompt(name=f"{agent}.{skill.id}", description=skill.description or skill.name or skill.id)
                )
        return ListPromptsResult(prompts=prompts)

    async def get_prompt(self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams) -> GetPromptResult:
        from framework.compiler.card import agent_skills

        agent, _, skill_id = params.name.partition(".")
        spec = self.runtime.bundle.agent(agent)
        for skill in agent_skills(spec, self.runtime.bundle.project):
            if skill.id == skill_id:
                example = (skill.examples or [skill.description or skill.id])[0]
                text = f"Ask the {agent} agent (tool {model_name(agent)}, skill {skill.id!r}): {example}"
                return GetPromptResult(
                    description=skill.description or None,
                    messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))],
                )
        raise ValueError(f"no prompt {params.name!r}")


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


async def serve_stdio(runtime: Runtime) -> None:
    """Speak MCP on stdin/stdout until the client closes stdin."""
    from mcp.server.stdio import stdio_server

    server = agent_server(runtime)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
