"""One ACP prompt turn: run events become session/update notifications; pauses become
session/request_permission; the run's end becomes the stopReason."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from framework.errors import Cancelled, Failure, FailureCode
from framework.protocols.acp.permission import FULL_OPTIONS, SHORT_OPTIONS, bad_permission_answer, permission_decision
from framework.protocols.acp.preview import Before, before_write
from framework.protocols.acp.session import Connection, Session
from framework.protocols.jsonrpc import Code, JsonRpcError, failure_error
from framework.runtime.events import (
    ArtifactOut,
    Paused,
    PlanUpdate,
    RunEvent,
    RunFinished,
    StepUpdate,
    TextChunk,
    ThoughtChunk,
    ToolCallFinished,
    ToolCallStarted,
)
from framework.runtime.pauses import ToolApproval, all_questions
from framework.runtime.turn import drive_turn

KINDS = {
    "fs.read": "read",
    "fs.list": "read",
    "fs.search": "search",
    "fs.write": "edit",
    "shell": "execute",
    "http.get": "fetch",
}
PLAN_STATUS = {"pending": "pending", "started": "in_progress", "completed": "completed", "failed": "completed"}
STOP_REASONS: dict[FailureCode, str] = {"contract_violation": "refusal", "cancelled": "cancelled"}
"""The stopReason a failure ends the turn with; any other failure answers session/prompt with the
JSON-RPC error of its code (``framework.protocols.jsonrpc``)."""


def prompt_text(blocks: list[Any]) -> str:
    """The user's message from ACP content blocks (text, and embedded resources as context)."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            raise JsonRpcError(Code.INVALID_PARAMS, "prompt must be a list of content blocks")
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            if "text" in resource:
                parts.append(f"[{resource.get('uri', 'resource')}]\n{resource['text']}")
        elif kind == "resource_link":
            parts.append(f"[{block.get('name', 'file')}]({block.get('uri', '')})")
    return "\n".join(parts)


def title(tool: str, args: dict[str, Any]) -> str:
    detail = args.get("path") or args.get("command") or args.get("url") or args.get("input") or ""
    return f"{tool} {detail}".strip()


def artifact_blocks(event: ArtifactOut) -> list[dict[str, Any]]:
    """ACP content blocks for an artifact: text, data as a JSON resource, files as resources or links."""
    blocks: list[dict[str, Any]] = []
    for i, part in enumerate(event.parts):
        uri = f"artifact:{event.artifact_id}/{i}"
        if "text" in part:
            blocks.append({"type": "text", "text": str(part["text"])})
        elif "data" in part:
            text = json.dumps(part["data"], ensure_ascii=False, indent=2)
            blocks.append({"type": "resource", "resource": {"uri": uri, "mimeType": "application/json", "text": text}})
        else:
            file = part.get("file") or {}
            name = str(file.get("name") or event.name)
            if "url" in file:
                link = {"type": "resource_link", "uri": str(file["url"]), "name": name}
                blocks.append(link | ({"mimeType": file["media_type"]} if file.get("media_type") else {}))
            else:
                resource = {"uri": f"{uri}/{name}", "text": str(file.get("content", ""))}
                if file.get("media_type"):
                    resource["mimeType"] = file["media_type"]
                blocks.append({"type": "resource", "resource": resource})
    return blocks


class PromptTurn:
    """Runs one session/prompt to its stopReason."""

    def __init__(self, server: Connection, session: Session, blocks: list[Any]) -> None:
        self.server = server
        self.session = session
        self.blocks = blocks
        self.calls: dict[str, dict[str, Any]] = {}
        self.task_id = ""
        self.owns_task = False
        """Whether this turn runs its task (so may cancel it): from the start for a new task; for
        an answered question once its run streams (another decider may have answered it first)."""
        self.cancelled: Cancelled | None = None
        """Set when the person cancelled a permission request (the turn then ends cancelled)."""

    def update(self, update: dict[str, Any]) -> None:
        self.server.update(self.session.id, update)

    async def run(self) -> dict[str, Any]:
        runtime = self.server.runtime
        text = prompt_text(self.blocks)
        skill = None
        if text.startswith("/"):
            name, _, rest = text[1:].partition(" ")
            if name in {c["name"] for c in self.server.commands()}:
                skill, text = name, rest.strip() or name
        question = await runtime.tasks.aquestion_in(self.session.id)
        if question is not None:  # the prompt answers the question the last turn ended with
            self.task_id = question.id
            events = runtime.decide(question.id, {"decision": "answer", "text": text})
        else:
            # The task's id is ours from the start, so a turn that ends early can close it.
            self.task_id, self.owns_task = uuid.uuid4().hex, True
            events = runtime.send(
                self.server.agent_name, text, conversation=self.session.id, skill=skill, task_id=self.task_id
            )
        try:
            finished, pauses = await drive_turn(runtime, events, self)
        except BaseException:  # cancelled, or the editor's answer was unusable: nothing is left open
            await self.abandon()
            raise
        if finished.state != "input-required":
            return self.stop(finished)
        if self.cancelled is not None:
            await self.abandon()
            return self.stop(RunFinished.failed(Failure.of(self.cancelled)))
        # A question: the turn ends with it, and the next prompt is the answer.
        question_text = "\n".join(p.pause.message for p in pauses)
        self.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": question_text}})
        return {"stopReason": "end_turn"}

    async def abandon(self) -> None:
        """The turn ends before its run: every started tool call gets its final update (failed,
        as ACP has no cancelled status) and the task is canceled, never left working."""
        for call_id in [c for c, call in self.calls.items() if not call.get("closed")]:
            self.calls[call_id]["closed"] = True
            self.update(closing_update(call_id))
        if self.owns_task:
            await self.server.runtime.amark_canceled(self.task_id)

    async def decide(self, finished: RunFinished, pauses: list[Paused]) -> dict[str, Any] | None:
        """The turn view's decision: a permission request per pause; a question ends the turn."""
        if all_questions([p.pause for p in pauses]):
            return None
        try:
            return await self.ask(pauses)
        except Cancelled as exc:  # the person cancelled the permission request
            self.cancelled = exc
            return None

    async def show(self, event: RunEvent) -> None:
        """The turn view's display: each event as session/update (pauses are asked, not shown)."""
        self.owns_task = True
        if isinstance(event, ToolCallStarted):
            before = None
            if event.tool == "fs.write":  # the diff's old side: file I/O, so off the event loop
                before = await asyncio.to_thread(before_write, self.server.runtime.root, event.args.get("path"))
            self.started(event, before)
        elif not isinstance(event, Paused | RunFinished):
            self.render(event)

    def render(self, event: RunEvent) -> None:
        if isinstance(event, TextChunk):
            if not event.source:
                self.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": event.text}})
        elif isinstance(event, ThoughtChunk):
            if not event.source:
                self.update({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": event.text}})
        elif isinstance(event, ToolCallFinished):
            self.finished(event)
        elif isinstance(event, PlanUpdate) and not event.source:
            self.session.plan = [
                {
                    "content": e.title or e.step,
                    "priority": "medium",
                    "status": PLAN_STATUS.get(e.status, "pending"),
                    "_meta": {"step": e.step},
                }
                for e in event.entries
            ]
            self.update({"sessionUpdate": "plan", "entries": self.session.plan})
        elif isinstance(event, ArtifactOut) and not event.source:
            for block in artifact_blocks(event):
                self.update({"sessionUpdate": "agent_message_chunk", "content": block})
        elif isinstance(event, StepUpdate) and not event.source:
            for entry in self.session.plan:
                if entry["_meta"]["step"] == event.step:
                    entry["status"] = PLAN_STATUS.get(event.status, "pending")
                    self.update({"sessionUpdate": "plan", "entries": self.session.plan})

    def _location(self, path: Any) -> dict[str, Any] | None:
        if not isinstance(path, str):
            return None
        root = self.server.runtime.root
        return {"path": str((root / path).resolve())} if not Path(path).is_absolute() else {"path": path}

    def started(self, event: ToolCallStarted, before: Before | None) -> None:
        """A tool_call update; ``before``: what fs.write replaces (None: no diff is shown)."""
        args = dict(event.args)
        self.calls[event.call_id] = {"tool": event.tool, "args": args, "before": before}
        update: dict[str, Any] = {
            "sessionUpdate": "tool_call",
            "toolCallId": event.call_id,
            "title": title(event.tool, args),
            "kind": KINDS.get(event.tool, "other"),
            "status": "in_progress",
            "rawInput": args,
        }
        location = self._location(args.get("path"))
        if location is not None:
            update["locations"] = [location]
        self.update(update)

    def finished(self, event: ToolCallFinished) -> None:
        call = self.calls.setdefault(event.call_id, {})
        call["closed"] = True
        content: list[dict[str, Any]] = [{"type": "content", "content": {"type": "text", "text": event.result}}]
        args = call.get("args", {})
        before: Before | None = call.get("before")
        # The tool's name as it started: a resumed run reports the model-facing name (fs_write).
        tool = call.get("tool", event.tool)
        if tool == "fs.write" and not event.is_error and before is not None and isinstance(args.get("path"), str):
            location = self._location(args["path"]) or {"path": args["path"]}
            content = [
                {
                    "type": "diff",
                    "path": location["path"],
                    "oldText": before.text,
                    "newText": str(args.get("content", "")),
                }
            ]
        self.update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": event.call_id,
                "status": "failed" if event.is_error else "completed",
                "content": content,
                "rawOutput": {"result": event.result},
            }
        )

    async def ask(self, pauses: list[Paused]) -> dict[str, Any]:
        """session/request_permission for the first pause; Cancelled when the user cancelled it."""
        pause = pauses[0].pause
        full = isinstance(pause, ToolApproval)
        call_id = (pause.call_id if isinstance(pause, ToolApproval) else "") or pauses[0].interrupt_id
        question = pause.message or "Continue?"
        # A tool's approval updates that tool call: its title stays the tool's own ("fs.write
        # notes/hi.txt"), which a client keeps in its transcript; the question goes in _meta.
        # A gate or budget pause has no tool call: its question is all there is to show.
        tool_call: dict[str, Any] = {
            "toolCallId": call_id,
            "title": title(pause.tool, dict(pause.args)) if isinstance(pause, ToolApproval) else question,
            "status": "pending",
            "rawInput": dict(pause.args) if isinstance(pause, ToolApproval) else {},
        }
        meta: dict[str, Any] = {"question": question, "pause": pause.kind}
        if isinstance(pause, ToolApproval):
            tool_call["kind"] = KINDS.get(pause.tool, "other")
            if pause.reason:
                meta["reason"] = pause.reason
        params: dict[str, Any] = {
            "sessionId": self.session.id,
            "toolCall": tool_call,
            "options": FULL_OPTIONS if full else SHORT_OPTIONS,
            "_meta": {"cleveragents": meta},
        }
        loop = asyncio.get_running_loop()
        self.session.permission = loop.create_future()
        asked = asyncio.ensure_future(self.server.request("session/request_permission", params))
        try:
            done, _ = await asyncio.wait({asked, self.session.permission}, return_when=asyncio.FIRST_COMPLETED)
            answer = (asked if asked in done else self.session.permission).result()
        except JsonRpcError as exc:  # the editor answered with an error (or an unreadable one)
            raise bad_permission_answer(f"an error ({exc.code}: {exc.message})") from exc
        finally:
            self.session.permission = None
            asked.cancel()  # answered, or cancelled by session/cancel: a late answer is ignored
        return permission_decision(answer, params["options"])

    def stop(self, finished: RunFinished) -> dict[str, Any]:
        """The answer to session/prompt for a run's end: a stopReason, or the failure's JSON-RPC error."""
        failure = finished.failure
        if failure is None:  # completed (a turn never ends paused here)
            return {"stopReason": finished.stop_reason}
        reason = STOP_REASONS.get(failure.code)
        if reason is None:
            raise failure_error(failure)
        if reason == "refusal":
            text = f"\n[refused] {failure.message}"
            self.update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
        return {"stopReason": reason}


CLOSED_BY_CANCEL = "cancelled: the turn ended before the tool call finished"
"""The final text of a tool call whose turn ended (cancelled) while it ran, live and in a replay."""


def closing_update(call_id: str) -> dict[str, Any]:
    """The final tool_call_update of a call that never finished (ACP has no cancelled status: failed)."""
    return {
        "sessionUpdate": "tool_call_update",
        "toolCallId": call_id,
        "status": "failed",
        "content": [{"type": "content", "content": {"type": "text", "text": CLOSED_BY_CANCEL}}],
    }
