"""Translating LangGraph's stream into run events."""

from __future__ import annotations

from langchain_core.messages import AIMessageChunk

from framework.runtime.events import TextChunk, ThoughtChunk
from framework.runtime.runner import _Translator


def test_reasoning_becomes_thought_chunks_and_text_stays_text() -> None:
    chunk = AIMessageChunk(content=[{"type": "reasoning", "reasoning": "let me see"}, {"type": "text", "text": "hi"}])
    events = _Translator().part({"type": "messages", "ns": (), "data": (chunk, {})})
    assert events == [ThoughtChunk("let me see"), TextChunk("hi")]


def test_anthropic_thinking_blocks_are_thoughts_too() -> None:
    chunk = AIMessageChunk(content=[{"type": "thinking", "thinking": "deep"}])
    assert _Translator().part({"type": "messages", "ns": (), "data": (chunk, {})}) == [ThoughtChunk("deep")]


def test_nested_agents_are_named_in_the_source() -> None:
    chunk = AIMessageChunk(content="from below")
    events = _Translator().part({"type": "messages", "ns": ("tools:abc", "model:def"), "data": (chunk, {})})
    assert events == [TextChunk("from below", ("tools", "model"))]
