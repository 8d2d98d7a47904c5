"""session/load: a conversation's history as the session/update notifications it streamed."""

from __future__ import annotations

from typing import Any

from framework.protocols.acp.prompt import KINDS, closing_update, title


async def replay(runtime: Any, agent: str, session_id: str) -> list[dict[str, Any]]:
    """The whole conversation as session/update payloads, oldest first.

    A tool call without a result was cancelled while it ran: it is replayed closed (as it was
    closed live), unless the conversation waits for a decision about it.
    """
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from framework.runtime.governance.contracts import WITHHELD
    from framework.runtime.runner import spec_tool_name

    graph = await runtime.bundle.agraph(agent)
    state = await graph.aget_state({"configurable": {"thread_id": session_id}})
    updates: list[dict[str, Any]] = []
    unfinished: dict[str, None] = {}  # tool call ids without a result yet, in order

    def close_unfinished() -> None:
        updates.extend(closing_update(call_id) for call_id in unfinished)
        unfinished.clear()

    for message in (state.values or {}).get("messages", []):
        if message.response_metadata.get(WITHHELD):  # an answer that broke the contract, and its feedback
            continue
        if isinstance(message, HumanMessage):
            close_unfinished()  # a new turn: the last one ended
            updates.append({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": message.text}})
        elif isinstance(message, AIMessage):
            if message.text:
                updates.append(
                    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": message.text}}
                )
            for call in message.tool_calls:
                tool = spec_tool_name(call["name"])
                unfinished[call.get("id") or ""] = None
                updates.append(
                    {
                        "sessionUpdate": "tool_call",
                        "toolCallId": call.get("id") or "",
                        "title": title(tool, call["args"]),
                        "kind": KINDS.get(tool, "other"),
                        "status": "in_progress",
                        "rawInput": call["args"],
                    }
                )
        elif isinstance(message, ToolMessage):
            unfinished.pop(message.tool_call_id, None)
            updates.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": message.tool_call_id,
                    "status": "failed" if message.status == "error" else "completed",
                    "content": [{"type": "content", "content": {"type": "text", "text": message.text}}],
                }
            )
    if not await runtime.tasks.awaiting_in(session_id):  # a paused call is open, not cancelled
        close_unfinished()
    return updates
