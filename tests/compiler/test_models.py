"""The chat models of the compiler: the offline model, the scripted model and the model factory."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool

from framework.compiler.models import build_model
from framework.compiler.offline import OfflineChatModel
from framework.compiler.scripted import ScriptedChatModel
from framework.compiler.tool_names import model_facing_name, spec_name
from framework.errors import ModelError
from framework.spec.model import ModelConfig


def _stream(model: Any, messages: list[BaseMessage]) -> list[AIMessageChunk]:
    return list(model.stream(messages))


def _astream(model: Any, messages: list[BaseMessage]) -> list[AIMessageChunk]:
    async def collect() -> list[AIMessageChunk]:
        return [chunk async for chunk in model.astream(messages)]

    return asyncio.run(collect())


def _merge(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total


def _tool_turn(call: dict[str, Any], result: str, status: str = "success") -> list[BaseMessage]:
    """The messages a tool loop appends after the model asked for ``call``."""
    return [
        AIMessage("", tool_calls=[call]),
        ToolMessage(result, tool_call_id=call["id"], name=call["name"], status=status),
    ]


# --- offline model ---------------------------------------------------------------------------


def test_offline_reply_mentions_the_agent_and_the_user_text() -> None:
    reply = OfflineChatModel(agent="reviewer").invoke([SystemMessage("Secret rules."), HumanMessage("hello there")])
    assert reply.content == "[reviewer] You said: hello there"


def test_offline_streams_word_chunks_that_add_up_to_the_full_reply() -> None:
    model = OfflineChatModel(agent="reviewer")
    messages: list[BaseMessage] = [HumanMessage("please review the last commit")]
    chunks = _stream(model, messages)
    words = [c.content for c in chunks if c.content]
    assert words == ["[reviewer] ", "You ", "said: ", "please ", "review ", "the ", "last ", "commit"]
    assert "".join(words) == model.invoke(messages).content


def test_offline_async_stream_matches_sync_stream() -> None:
    model = OfflineChatModel(agent="reviewer")
    messages: list[BaseMessage] = [HumanMessage("one two three")]
    assert [c.content for c in _astream(model, messages)] == [c.content for c in _stream(model, messages)]


def test_offline_reports_the_same_positive_usage_streamed_or_not() -> None:
    model = OfflineChatModel(agent="reviewer")
    messages: list[BaseMessage] = [SystemMessage("Be brief."), HumanMessage("hello there, model")]
    usage = model.invoke(messages).usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert model.invoke(messages).usage_metadata == usage
    streamed = _merge(_stream(model, messages))
    assert streamed.usage_metadata == usage
    assert streamed.response_metadata["model_name"] == "offline"
    assert streamed.response_metadata["finish_reason"] == "stop"


def test_offline_counts_the_system_prompt_as_input_but_does_not_echo_it() -> None:
    model = OfflineChatModel(agent="a")
    short = model.invoke([HumanMessage("hi")])
    long = model.invoke([SystemMessage("x" * 400), HumanMessage("hi")])
    assert long.content == short.content
    assert long.usage_metadata is not None and short.usage_metadata is not None
    assert long.usage_metadata["input_tokens"] == short.usage_metadata["input_tokens"] + 100


def test_offline_truncates_a_long_message_to_200_characters() -> None:
    reply = OfflineChatModel(agent="a").invoke([HumanMessage("word " * 100)])
    assert reply.content == "[a] You said: " + ("word " * 40).strip()


def test_offline_makes_one_tool_call_per_turn_in_order_then_summarises() -> None:
    model = OfflineChatModel(agent="reviewer")
    messages: list[BaseMessage] = [
        HumanMessage('check these\n@tool fs.read {"path": "a.txt"}\n@tool shell {"command": "ls"}\n@tool fs.list')
    ]
    calls = []
    results = {"fs_read": "alpha\nbeta", "shell": "x.py", "fs_list": "a.txt"}
    for _ in range(3):
        reply = model.invoke(messages)
        assert reply.content == ""
        assert len(reply.tool_calls) == 1
        call = reply.tool_calls[0]
        calls.append((call["name"], call["args"]))
        messages += _tool_turn(dict(call), results[call["name"]])
    assert calls == [("fs_read", {"path": "a.txt"}), ("shell", {"command": "ls"}), ("fs_list", {})]
    final = model.invoke(messages)
    assert final.tool_calls == []
    assert final.content == "[reviewer] You said: check these\nfs.read: alpha beta\nshell: x.py\nfs.list: a.txt"


def test_offline_tool_call_ids_are_deterministic_and_distinct_per_call() -> None:
    model = OfflineChatModel(agent="a")
    messages: list[BaseMessage] = [HumanMessage("@tool fs.read {}\n@tool fs.read {}")]
    first = model.invoke(messages).tool_calls[0]
    assert model.invoke(messages).tool_calls[0]["id"] == first["id"]
    assert str(first["id"]).startswith("call_1_")
    second = model.invoke(messages + _tool_turn(dict(first), "ok")).tool_calls[0]
    assert str(second["id"]).startswith("call_2_")


def test_offline_streams_a_tool_call_as_a_tool_call_chunk() -> None:
    chunks = _stream(OfflineChatModel(agent="a"), [HumanMessage('@tool fs.read {"path": "x"}')])
    merged = _merge(chunks)
    assert merged.content == ""
    assert [(c["name"], c["args"]) for c in merged.tool_calls] == [("fs_read", {"path": "x"})]
    assert merged.response_metadata["finish_reason"] == "tool_calls"
    assert merged.usage_metadata is not None and merged.usage_metadata["output_tokens"] > 0


def test_offline_marks_failed_tool_results() -> None:
    model = OfflineChatModel(agent="a")
    messages: list[BaseMessage] = [HumanMessage("go\n@tool shell {}")]
    call = model.invoke(messages).tool_calls[0]
    final = model.invoke(messages + _tool_turn(dict(call), "denied: shell is not allowed", status="error"))
    assert final.content == "[a] You said: go\nshell failed: denied: shell is not allowed"


def test_offline_explains_a_tool_line_with_bad_json_instead_of_crashing() -> None:
    reply = OfflineChatModel(agent="a").invoke([HumanMessage('@tool fs.read {"path": }')])
    assert reply.tool_calls == []
    assert "could not parse the line '@tool fs.read {\"path\": }'" in str(reply.content)
    assert "not valid JSON" in str(reply.content)


def test_offline_explains_tool_arguments_that_are_not_an_object() -> None:
    reply = OfflineChatModel(agent="a").invoke([HumanMessage("@tool fs.read [1, 2]")])
    assert reply.tool_calls == []
    assert "must be a JSON object" in str(reply.content)


def test_offline_refuses_a_tool_that_was_not_bound() -> None:
    @tool
    def fs_read(path: str) -> str:
        """Read a file."""
        return path

    model = OfflineChatModel(agent="a").bind_tools([fs_read])
    reply = model.invoke([HumanMessage("@tool fs.write {}")])
    assert reply.tool_calls == []
    assert reply.content == "[a] I cannot call 'fs.write': this agent has no such tool (its tools: fs_read)"


def test_a_local_model_binds_the_same_tools_to_the_same_copy_and_each_copy_to_its_own() -> None:
    """Bound once per set of tools (a new copy per model call described itself each time), but a copy
    of the model (one agent's, with its own callbacks) never gets another copy's bound model."""
    from langchain_core.callbacks import BaseCallbackHandler

    @tool
    def fs_read(path: str) -> str:
        """Read a file."""
        return path

    shared = ScriptedChatModel(replies=["hi"])
    first, second = BaseCallbackHandler(), BaseCallbackHandler()
    mine = shared.model_copy(update={"callbacks": [first]})
    yours = shared.model_copy(update={"callbacks": [second]})
    bound = mine.bind_tools([fs_read])
    assert mine.bind_tools([fs_read]) is bound
    theirs = yours.bind_tools([fs_read])
    assert theirs is not bound
    assert (bound.callbacks, theirs.callbacks) == ([first], [second])  # type: ignore[attr-defined]
    assert mine.bind_tools([]) is not bound


def test_offline_delay_paces_the_stream() -> None:
    model = OfflineChatModel(agent="a", delay=0.01)
    elapsed = asyncio.run(_timed_astream(model))
    assert elapsed >= 0.05  # "[a] You said: one two" is five words: four pauses between them, one before the end


async def _timed_astream(model: OfflineChatModel) -> float:
    loop = asyncio.get_running_loop()
    began = loop.time()
    async for _ in model.astream([HumanMessage("one two")]):
        pass
    return loop.time() - began


def test_offline_model_drives_create_agent_tools_end_to_end() -> None:
    seen: list[str] = []

    @tool
    def fs_read(path: str) -> str:
        """Read a file of the project."""
        seen.append(path)
        return f"# Title of {path}"

    agent = create_agent(OfflineChatModel(agent="reader"), tools=[fs_read], system_prompt="You read files.")
    out = agent.invoke({"messages": [HumanMessage('please\n@tool fs.read {"path": "README.md"}')]})
    assert seen == ["README.md"]
    final = out["messages"][-1]
    assert isinstance(final, AIMessage)
    assert final.content == "[reader] You said: please\nfs.read: # Title of README.md"


# --- scripted model --------------------------------------------------------------------------


def test_scripted_picks_the_reply_by_the_number_of_ai_messages() -> None:
    model = ScriptedChatModel(replies=[{"tool_calls": [{"name": "fs.read", "args": {"path": "a"}}]}, "all done"])
    first = model.invoke([HumanMessage("go")])
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("fs_read", {"path": "a"})]
    # A conversation replayed elsewhere continues with the next reply, whatever the model saw before.
    history: list[BaseMessage] = [HumanMessage("go"), *_tool_turn(dict(first.tool_calls[0]), "text")]
    assert ScriptedChatModel(replies=model.replies).invoke(history).content == "all done"


def test_scripted_streams_words_and_reports_usage() -> None:
    model = ScriptedChatModel(replies=["hello brave world"])
    chunks = _stream(model, [HumanMessage("hi")])
    assert [c.content for c in chunks if c.content] == ["hello ", "brave ", "world"]
    merged = _merge(chunks)
    assert merged.response_metadata["model_name"] == "scripted"
    assert merged.usage_metadata is not None and merged.usage_metadata["output_tokens"] > 0


def test_scripted_raises_model_error_when_its_replies_are_used_up() -> None:
    model = ScriptedChatModel(replies=["only one"])
    with pytest.raises(ModelError, match="no reply left: 1 replies were given and all are used"):
        model.invoke([HumanMessage("hi"), AIMessage("only one"), HumanMessage("again")])


def test_scripted_model_runs_a_tool_loop_in_create_agent() -> None:
    @tool
    def shell(command: str) -> str:
        """Run a command."""
        return f"ran {command}"

    model = ScriptedChatModel(
        replies=[{"tool_calls": [{"name": "shell", "args": {"command": "pytest"}}]}, "tests pass"]
    )
    out = create_agent(model, tools=[shell]).invoke({"messages": [HumanMessage("test it")]})
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["ran pytest"]
    assert out["messages"][-1].content == "tests pass"


# --- model factory ---------------------------------------------------------------------------


def test_no_model_config_means_the_offline_model() -> None:
    model = build_model(None, agent="helper")
    assert isinstance(model, OfflineChatModel)
    assert model.invoke([HumanMessage("hi")]).content == "[helper] You said: hi"


def test_scripted_config_builds_a_scripted_model() -> None:
    config = ModelConfig.model_validate({"provider": "scripted", "replies": ["hi"]})
    assert build_model(config, agent="a").invoke([HumanMessage("x")]).content == "hi"


def test_unset_api_key_says_which_variable_to_set() -> None:
    config = ModelConfig.model_validate("openai:gpt-4o-mini")
    with pytest.raises(ModelError) as caught:
        build_model(config, agent="a", environ={})
    assert str(caught.value) == (
        "model 'openai:gpt-4o-mini' needs an API key: set OPENAI_API_KEY (in the environment or .env)"
    )


def test_missing_integration_package_says_what_to_install() -> None:
    if importlib.util.find_spec("langchain_mistralai") is not None:
        pytest.skip("langchain-mistralai is installed here, so the missing-package path cannot be exercised")
    config = ModelConfig.model_validate("mistralai:mistral-large-latest")
    with pytest.raises(ModelError) as caught:
        build_model(config, agent="a", environ={"MISTRAL_API_KEY": "sk-test"})
    assert str(caught.value) == (
        "model 'mistralai:mistral-large-latest' needs the package langchain-mistralai: pip install langchain-mistralai"
    )


def test_missing_package_with_an_extra_names_the_extra() -> None:
    if importlib.util.find_spec("langchain_anthropic") is not None:
        pytest.skip("langchain-anthropic is installed here, so the missing-package path cannot be exercised")
    config = ModelConfig.model_validate("anthropic:claude-sonnet-4-0")
    with pytest.raises(ModelError, match=r"pip install 'cleveragents\[anthropic\]'"):
        build_model(config, agent="a", environ={"ANTHROPIC_API_KEY": "sk-test"})


def test_tool_names_map_between_spec_and_model() -> None:
    assert model_facing_name("fs.read") == "fs_read"
    assert spec_name("fs_read", ["shell", "fs.read"]) == "fs.read"
    assert spec_name("unknown_tool", ["fs.read"]) == "unknown_tool"


def test_offline_agent_without_tools_answers_a_tool_line_in_text() -> None:
    # create_agent binds no tools for an agent without any: the model must not ask for a call nobody runs.
    model = build_model(None, agent="plain", tools=[])
    out = create_agent(model, tools=[]).invoke({"messages": [HumanMessage("@tool fs.read {}")]})
    assert (
        out["messages"][-1].content == "[plain] I cannot call 'fs.read': this agent has no such tool (its tools: none)"
    )


def test_a_provider_model_streams_its_answer_even_when_nobody_follows_the_tokens() -> None:
    config = ModelConfig.model_validate("openai:gpt-4o-mini")
    model = build_model(config, agent="a", environ={"OPENAI_API_KEY": "sk-test"})
    assert model._should_stream(async_api=True, run_manager=None)  # the decision LangChain takes per call
    told = ModelConfig.model_validate({"provider": "openai", "name": "gpt-4o-mini", "params": {"streaming": False}})
    assert not build_model(told, agent="a", environ={"OPENAI_API_KEY": "sk-test"})._should_stream(async_api=True)
