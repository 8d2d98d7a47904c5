"""Translating LangGraph's stream into run events."""

from __future__ import annotations

from langchain_core.messages import AIMessage, AIMessageChunk

from framework.runtime.events import RunEvent, TextChunk, ThoughtChunk, ToolCallFinished, ToolCallStarted
from framework.runtime.runner import _Translator
from tests.conftest import ProjectFactory
from tests.driving import drive, finished


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


def test_without_tokens_a_model_turn_s_text_comes_whole_with_its_update() -> None:
    turn = AIMessage(
        content=[{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "let me look"}],
        id="m1",
        tool_calls=[{"name": "fs_list", "args": {"path": "."}, "id": "c1"}],
    )
    translator = _Translator(tokens=False)
    events = translator.part({"type": "updates", "ns": (), "data": {"model": {"messages": [turn]}}})
    assert events == [ThoughtChunk("hmm"), TextChunk("let me look"), ToolCallStarted("c1", "fs.list", {"path": "."})]
    # the same turn again (updated in place, e.g. marked withheld) shows nothing twice
    assert translator.part({"type": "updates", "ns": (), "data": {"model": {"messages": [turn]}}}) == []


def test_with_tokens_a_model_turn_s_update_repeats_no_text() -> None:
    turn = AIMessage(content="streamed already", id="m1")
    assert _Translator().part({"type": "updates", "ns": (), "data": {"model": {"messages": [turn]}}}) == []


def test_the_end_of_a_run_is_the_root_graph_s_last_values() -> None:
    translator = _Translator()
    translator.part({"type": "values", "ns": ("tools:abc",), "data": {"messages": ["below"]}})
    assert translator.values is None  # a callee's state is not the run's
    translator.part({"type": "values", "ns": (), "data": {"messages": ["done"]}})
    assert translator.values == {"messages": ["done"]} and not translator.interrupted
    translator.part({"type": "updates", "ns": (), "data": {"__interrupt__": ()}})
    assert translator.interrupted


def test_a_run_without_tokens_ends_as_the_streamed_one(make_project: ProjectFactory) -> None:
    agent = """
        name: looker
        model:
          provider: scripted
          replies:
            - {text: "first I look", tool_calls: [{name: fs.list, args: {path: "."}}]}
            - "here it is"
        profile: autonomous
        tools: [fs.list]
        capabilities: {fs: {read: ["**"]}}
    """
    root = make_project({"agents/looker.yaml": agent})
    [streamed] = drive(root, "looker", ("c1", "look"))
    [whole] = drive(root, "looker", ("c2", "look"), tokens=False)

    def text(run: list[RunEvent]) -> str:
        return "".join(e.text for e in run if isinstance(e, TextChunk))

    assert finished(whole).state == finished(streamed).state == "completed"
    assert finished(whole).output == finished(streamed).output == "here it is"
    assert text(whole) == text(streamed) == "first I lookhere it is"
    assert [type(e) for e in whole if isinstance(e, ToolCallStarted | ToolCallFinished)] == [
        ToolCallStarted,
        ToolCallFinished,
    ]


def test_without_tokens_a_withheld_answer_of_an_agent_with_tools_shows_nothing(make_project: ProjectFactory) -> None:
    """Its model turn is judged inside the model call: the answer and its withheld copy come in one
    update, after the withhold signal, and the retry's release must not let the first one out."""
    agent = """
        name: careful
        model:
          provider: scripted
          replies: ["the password: hunter2", "all good now"]
        profile: autonomous
        tools: [fs.list]
        capabilities: {fs: {read: ["**"]}}
        contract:
          must_not: [{output_matches: 'password\\s*:'}]
          on_violation: {action: retry, max_retries: 1}
    """
    root = make_project({"agents/careful.yaml": agent})
    for tokens in (True, False):
        [run] = drive(root, "careful", (f"c-{tokens}", "tell me"), tokens=tokens)
        shown = "".join(e.text for e in run if isinstance(e, TextChunk))
        assert "hunter2" not in shown, tokens
        assert shown == "all good now" and finished(run).output == "all good now", (tokens, shown)
