"""The conversation store: LoopSqliteSaver keeps AsyncSqliteSaver's file format and never blocks itself."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiosqlite
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

from framework.runtime.stores import CONVERSATIONS_DB, STATE_DIR, open_checkpointer


def echo_graph(checkpointer: Any) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo: {state['messages'][-1].text}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def turn(graph: Any, thread: str, text: str) -> None:
    await graph.ainvoke({"messages": [HumanMessage(text)]}, config(thread))


async def texts(graph: Any, thread: str) -> list[str]:
    state = await graph.aget_state(config(thread))
    return [m.text for m in state.values["messages"]]


def test_a_conversation_continues_across_the_two_savers(tmp_path: Path) -> None:
    async def main() -> tuple[list[str], list[str]]:
        async with open_checkpointer(tmp_path) as saver:
            await turn(echo_graph(saver), "c1", "one")
        async with aiosqlite.connect(tmp_path / STATE_DIR / CONVERSATIONS_DB) as conn:
            graph = echo_graph(AsyncSqliteSaver(conn))
            seen_by_async = await texts(graph, "c1")
            await turn(graph, "c1", "two")
        async with open_checkpointer(tmp_path) as saver:
            return seen_by_async, await texts(echo_graph(saver), "c1")

    seen_by_async, seen_after = asyncio.run(main())
    assert seen_by_async == ["one", "echo: one"]
    assert seen_after == ["one", "echo: one", "two", "echo: two"]


def test_listing_checkpoints_does_not_hold_the_store_between_items(tmp_path: Path) -> None:
    async def main() -> int:
        async with open_checkpointer(tmp_path) as saver:
            graph = echo_graph(saver)
            await turn(graph, "c1", "one")
            listed = 0
            async for _ in saver.alist(config("c1")):
                listed += 1
                await turn(graph, "c2", f"meanwhile {listed}")  # a write between two items
            return listed

    assert asyncio.run(main()) >= 2
