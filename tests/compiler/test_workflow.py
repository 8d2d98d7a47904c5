"""Workflow agents compiled to LangGraph graphs: sequence, parallel, router, loop, gate, progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from framework.compiler.workflow import compile_workflow, render_template
from framework.errors import RunError
from framework.spec.agent import WorkflowAgent


class Agents:
    """A fake ``call_agent``: records each call and answers with ``reply(name, text)``."""

    def __init__(self, reply: Callable[[str, str], str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.reply = reply or (lambda name, text: f"{name}({text})")

    async def __call__(self, name: str, text: str) -> str:
        self.calls.append((name, text))
        return self.reply(name, text)

    def called(self, name: str) -> list[str]:
        return [text for agent, text in self.calls if agent == name]


def workflow(steps: list[dict[str, Any]], **extra: Any) -> WorkflowAgent:
    return WorkflowAgent.model_validate({"name": "flow", "kind": "workflow", "steps": steps, **extra})


def run(graph: Any, text: str = "hello", config: dict[str, Any] | None = None) -> dict[str, Any]:
    result: dict[str, Any] = asyncio.run(graph.ainvoke({"messages": [HumanMessage(text)]}, config))
    return result


def answer(state: dict[str, Any]) -> str:
    message = state["messages"][-1]
    assert isinstance(message, AIMessage)
    return str(message.content)


def events(graph: Any, text: str = "hello", config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [e async for e in graph.astream({"messages": [HumanMessage(text)]}, config, stream_mode="custom")]

    return asyncio.run(collect())


# -- sequence and templates --------------------------------------------------------------


def test_sequence_renders_templates_and_chains_the_previous_output() -> None:
    agents = Agents()
    spec = workflow(
        [
            {"id": "first", "agent": "a"},
            {"id": "second", "agent": "b"},
            {"id": "third", "agent": "c", "input": "{{ input }} / {{steps.first.output}}"},
        ]
    )
    state = run(compile_workflow(spec, call_agent=agents, tools={}), "hi")
    assert agents.calls == [("a", "hi"), ("b", "a(hi)"), ("c", "hi / a(hi)")]
    assert state["outputs"] == {"first": "a(hi)", "second": "b(a(hi))", "third": "c(hi / a(hi))"}
    assert answer(state) == "c(hi / a(hi))"


def test_output_template_makes_the_final_message() -> None:
    spec = workflow(
        [{"id": "one", "agent": "a"}, {"id": "two", "agent": "b"}],
        output="{{ steps.one.output }} then {{ steps.two.output }}",
    )
    state = run(compile_workflow(spec, call_agent=Agents(), tools={}), "x")
    assert answer(state) == "a(x) then b(a(x))"
    assert [type(m) for m in state["messages"]] == [HumanMessage, AIMessage]


def test_render_template_fills_input_and_outputs_and_blanks_steps_not_run() -> None:
    text = "{{input}}|{{ steps.a.output }}|{{ steps.missing.output }}"
    assert render_template(text, input="in", outputs={"a": "A"}) == "in|A|"


def test_a_new_turn_on_the_same_thread_starts_with_no_outputs() -> None:
    spec = workflow(
        [
            {"id": "check", "agent": "checker"},
            {
                "id": "route",
                "router": {
                    "on": "check",
                    "routes": [{"when": {"contains": "yes"}, "steps": [{"id": "extra", "agent": "e"}]}],
                },
            },
        ]
    )
    graph = compile_workflow(spec, call_agent=Agents(lambda name, text: text), tools={}, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    assert "extra" in run(graph, "yes", config)["outputs"]
    assert "extra" not in run(graph, "no", config)["outputs"]


# -- tool steps --------------------------------------------------------------------------


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    return text.upper()


def test_tool_step_renders_string_args_and_outputs_the_result() -> None:
    spec = workflow(
        [{"id": "loud", "tool": "shell", "args": {"text": "say {{ input }}"}}, {"id": "after", "agent": "a"}]
    )
    agents = Agents()
    state = run(compile_workflow(spec, call_agent=agents, tools={"shell": shout}), "hi")
    assert state["outputs"]["loud"] == "SAY HI"
    assert agents.calls == [("a", "SAY HI")]


@tool
def stats(path: str) -> dict[str, Any]:
    """Describe a file."""
    return {"path": path, "lines": 3}


def test_tool_step_output_of_structured_result_is_json() -> None:
    spec = workflow([{"id": "info", "tool": "fs.read", "args": {"path": "{{ input }}"}}])
    state = run(compile_workflow(spec, call_agent=Agents(), tools={"fs.read": stats}), "a.txt")
    assert state["outputs"]["info"] == '{"path": "a.txt", "lines": 3}'


def test_tool_step_without_the_tool_raises_run_error() -> None:
    spec = workflow([{"id": "loud", "tool": "shell", "args": {"text": "x"}}])
    with pytest.raises(RunError, match="step 'loud': tool 'shell' is not available"):
        run(compile_workflow(spec, call_agent=Agents(), tools={}))


# -- parallel ----------------------------------------------------------------------------


def test_parallel_branches_run_concurrently_and_the_join_sees_both() -> None:
    ready: dict[str, asyncio.Event] = {}

    async def call_agent(name: str, text: str) -> str:
        if name in ("left", "right"):
            # Each branch waits for the other one to have started: only true concurrency finishes.
            ready.setdefault(name, asyncio.Event()).set()
            other = "right" if name == "left" else "left"
            await asyncio.wait_for(ready.setdefault(other, asyncio.Event()).wait(), timeout=5)
            return f"{name} saw {text}"
        return f"after got [{text}]"

    spec = workflow(
        [
            {"id": "start", "agent": "first"},
            {"parallel": [{"id": "l", "agent": "left"}, {"id": "r", "agent": "right"}]},
            {"id": "after", "agent": "summary"},
        ]
    )
    state = run(compile_workflow(spec, call_agent=call_agent, tools={}), "go")
    joined = "left saw after got [go]\n\nright saw after got [go]"
    assert state["outputs"]["l"] == "left saw after got [go]"
    assert state["outputs"]["r"] == "right saw after got [go]"
    assert answer(state) == f"after got [{joined}]"


def test_a_branch_with_several_steps_keeps_its_own_previous_output() -> None:
    agents = Agents()
    loop = {
        "id": "refine",
        "loop": {"steps": [{"id": "a1", "agent": "a1"}, {"id": "a2", "agent": "a2"}], "until": {"contains": "a2"}},
    }
    spec = workflow([{"id": "top", "parallel": [loop, {"id": "b", "agent": "b"}]}, {"id": "after", "agent": "z"}])
    state = run(compile_workflow(spec, call_agent=agents, tools={}), "in")
    assert agents.called("a2") == ["a1(in)"]
    assert state["outputs"]["top"] == "a2(a1(in))\n\nb(in)"
    assert agents.called("z") == ["a2(a1(in))\n\nb(in)"]


# -- router ------------------------------------------------------------------------------

ROUTES = [
    {"when": {"contains": "LGTM"}, "steps": [{"id": "ship", "agent": "shipper"}]},
    {"when": {"regex": r"bug #\d+"}, "steps": [{"id": "fix", "agent": "fixer"}]},
    {"when": {"json_path": "verdict.kind", "equals": "reject"}, "steps": [{"id": "deny", "agent": "denier"}]},
    {"when": {"json_path": "items.1"}, "steps": [{"id": "many", "agent": "lister"}]},
]


@pytest.mark.parametrize(
    ("review", "chosen"),
    [
        ("LGTM, merge it", "shipper"),
        ("found bug #42 here", "fixer"),
        ('```json\n{"verdict": {"kind": "reject"}}\n```', "denier"),
        ('{"verdict": {"kind": "accept"}, "items": [1, 2]}', "lister"),
        ('{"verdict": {"kind": "accept"}, "items": [1]}', "fallback"),
        ("not json, no match", "fallback"),
    ],
    ids=["contains", "regex", "json-path-equals-in-fence", "json-path-exists", "json-no-match", "default"],
)
def test_router_takes_the_first_matching_route_or_the_default(review: str, chosen: str) -> None:
    agents = Agents(lambda name, text: review if name == "reviewer" else f"{name}!")
    spec = workflow(
        [
            {"id": "review", "agent": "reviewer"},
            {
                "id": "triage",
                "router": {"on": "review", "routes": ROUTES, "default": [{"id": "other", "agent": "fallback"}]},
            },
            {"id": "after", "agent": "closer"},
        ]
    )
    state = run(compile_workflow(spec, call_agent=agents, tools={}))
    assert [name for name, _ in agents.calls] == ["reviewer", chosen, "closer"]
    assert state["outputs"]["triage"] == f"{chosen}!"
    assert agents.called("closer") == [f"{chosen}!"]


def test_router_without_a_match_or_default_continues_after_it() -> None:
    agents = Agents()
    spec = workflow(
        [
            {"id": "review", "agent": "reviewer"},
            {"id": "triage", "router": {"on": "review", "routes": ROUTES[:1]}},
            {"id": "after", "agent": "closer"},
        ]
    )
    run(compile_workflow(spec, call_agent=agents, tools={}), "x")
    assert agents.calls == [("reviewer", "x"), ("closer", "reviewer(x)")]


LABELLED = {
    "on": "review",
    "classify": {"labels": ["bug", "feature"]},
    "routes": [
        {"when": {"label": "bug"}, "steps": [{"id": "fix", "agent": "fixer"}]},
        {"when": {"label": "feature"}, "steps": [{"id": "build", "agent": "builder"}]},
    ],
}


def test_router_label_uses_the_classify_callable_once() -> None:
    asked: list[tuple[str, list[str]]] = []

    async def classify(text: str, labels: list[str]) -> str:
        asked.append((text, labels))
        return "feature"

    agents = Agents()
    spec = workflow([{"id": "review", "agent": "reviewer"}, {"id": "triage", "router": LABELLED}])
    run(compile_workflow(spec, call_agent=agents, tools={}, classify=classify), "x")
    assert asked == [("reviewer(x)", ["bug", "feature"])]
    assert [name for name, _ in agents.calls] == ["reviewer", "builder"]


def test_router_label_defaults_to_the_first_label_found_in_the_output() -> None:
    agents = Agents(lambda name, text: "Looks like a FEATURE request" if name == "reviewer" else "ok")
    spec = workflow([{"id": "review", "agent": "reviewer"}, {"id": "triage", "router": LABELLED}])
    run(compile_workflow(spec, call_agent=agents, tools={}))
    assert [name for name, _ in agents.calls] == ["reviewer", "builder"]


# -- loop --------------------------------------------------------------------------------


def test_loop_stops_when_until_holds_and_feeds_each_round_the_last_output() -> None:
    agents = Agents(lambda name, text: f"{text}+" if text.count("+") < 2 else f"{text} done")
    spec = workflow(
        [{"id": "polish", "loop": {"steps": [{"id": "edit", "agent": "editor"}], "until": {"contains": "done"}}}]
    )
    state = run(compile_workflow(spec, call_agent=agents, tools={}), "v")
    assert agents.called("editor") == ["v", "v+", "v++"]
    assert state["loops"] == {"polish": 3}
    assert answer(state) == "v++ done"


def test_loop_stops_after_max_iterations() -> None:
    agents = Agents(lambda name, text: "again")
    spec = workflow(
        [
            {
                "id": "polish",
                "loop": {"steps": [{"id": "edit", "agent": "editor"}], "until": {"contains": "done"}, "max": 3},
            }
        ]
    )
    state = run(compile_workflow(spec, call_agent=agents, tools={}))
    assert len(agents.calls) == 3
    assert state["loops"] == {"polish": 3}


def test_loop_tests_the_step_named_in_on() -> None:
    agents = Agents(lambda name, text: "verdict: ok" if name == "judge" else "draft")
    body = [{"id": "write", "agent": "writer"}, {"id": "judge", "agent": "judge", "input": "{{ steps.write.output }}"}]
    spec = workflow(
        [{"id": "polish", "loop": {"steps": body, "on": "judge", "until": {"regex": "verdict: ok"}, "max": 4}}]
    )
    state = run(compile_workflow(spec, call_agent=agents, tools={}))
    assert state["loops"] == {"polish": 1}


def test_loop_label_without_a_classifier_holds_when_the_label_appears() -> None:
    agents = Agents(lambda name, text: "APPROVED" if text.endswith("++") else f"{text}+")
    loop = {"steps": [{"id": "edit", "agent": "editor"}], "until": {"label": "approved"}, "max": 5}
    state = run(compile_workflow(workflow([{"id": "polish", "loop": loop}]), call_agent=agents, tools={}), "v")
    assert agents.called("editor") == ["v", "v+", "v++"]
    assert state["loops"] == {"polish": 3}


def test_a_long_loop_is_not_cut_short_by_the_default_recursion_limit() -> None:
    agents = Agents(lambda name, text: "again")
    body = [{"id": "one", "agent": "a"}, {"id": "two", "agent": "b"}]
    spec = workflow([{"id": "grind", "loop": {"steps": body, "until": {"contains": "never"}, "max": 30}}])
    state = run(compile_workflow(spec, call_agent=agents, tools={}))
    assert state["loops"] == {"grind": 30}
    assert len(agents.calls) == 60


# -- gate --------------------------------------------------------------------------------

GATED = [
    {"id": "draft", "agent": "writer"},
    {"id": "check", "gate": {"message": "Publish?\n{{ steps.draft.output }}"}},
    {"id": "publish", "agent": "publisher"},
]


def _paused(agents: Agents) -> tuple[Any, dict[str, Any]]:
    graph = compile_workflow(workflow(GATED), call_agent=agents, tools={}, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "gate"}}
    state = run(graph, "notes", config)
    (pending,) = state["__interrupt__"]
    assert pending.value == {"kind": "gate", "step": "check", "message": "Publish?\nwriter(notes)"}
    assert agents.calls == [("writer", "notes")]
    return graph, config


@pytest.mark.parametrize("decision", [{"approved": True, "reason": None}, True, "approve"])
def test_gate_interrupts_and_an_approval_resumes_it(decision: Any) -> None:
    agents = Agents()
    graph, config = _paused(agents)
    state = asyncio.run(graph.ainvoke(Command(resume=decision), config))
    assert agents.calls == [("writer", "notes"), ("publisher", "writer(notes)")]
    assert state["outputs"]["check"] == "approved"
    assert answer(state) == "publisher(writer(notes))"


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        ({"approved": False, "reason": "typo in title"}, "gate 'check' rejected: typo in title"),
        ("reject", "gate 'check' rejected"),
    ],
)
def test_gate_rejection_raises_run_error(decision: Any, message: str) -> None:
    agents = Agents()
    graph, config = _paused(agents)
    with pytest.raises(RunError) as raised:
        asyncio.run(graph.ainvoke(Command(resume=decision), config))
    assert str(raised.value) == message  # LangGraph adds a note naming the task; the message stays clean
    assert agents.calls == [("writer", "notes")]


def test_a_gate_in_a_branch_pauses_the_block_without_redoing_the_other_branch() -> None:
    agents = Agents()
    spec = workflow(
        [
            {"id": "draft", "agent": "writer"},
            {"parallel": [{"id": "ok", "gate": {"message": "Go?", "timeout": "10m"}}, {"id": "b", "agent": "b"}]},
        ]
    )
    graph = compile_workflow(spec, call_agent=agents, tools={}, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    (pending,) = run(graph, "x", config)["__interrupt__"]
    assert pending.value == {"kind": "gate", "step": "ok", "message": "Go?", "timeout": 600.0}
    state = asyncio.run(graph.ainvoke(Command(resume=True), config))
    assert agents.calls == [("writer", "x"), ("b", "writer(x)")]
    assert answer(state) == "writer(x)\n\nb(writer(x))"  # a gate passes its branch's input through


# -- progress and failures ---------------------------------------------------------------


def test_plan_comes_first_then_started_and_completed_per_step() -> None:
    spec = workflow(
        [
            {"id": "draft", "agent": "writer"},
            {"parallel": [{"id": "l", "agent": "left"}, {"id": "r", "agent": "right"}]},
            {"id": "check", "gate": {"message": "Publish these notes?\n{{ steps.draft.output }}"}},
        ]
    )
    graph = compile_workflow(spec, call_agent=Agents(), tools={}, checkpointer=InMemorySaver())
    seen = events(graph, "x", {"configurable": {"thread_id": "t"}})
    assert seen[0] == {
        "ca_event": "plan",
        "entries": [
            {"step": "draft", "title": "agent writer", "status": "pending"},
            {"step": "parallel-1", "title": "parallel: l, r", "status": "pending"},
            {"step": "check", "title": "gate: Publish these notes?", "status": "pending"},
        ],
    }
    steps = [(e["step"], e["status"]) for e in seen[1:]]
    assert steps[:2] == [("draft", "started"), ("draft", "completed")]
    assert steps[2] == ("parallel-1", "started")
    assert sorted(steps[3:7]) == [("l", "completed"), ("l", "started"), ("r", "completed"), ("r", "started")]
    assert steps[7:] == [("parallel-1", "completed"), ("check", "started")]
    assert seen[1] == {
        "ca_event": "step",
        "step": "draft",
        "kind": "agent",
        "status": "started",
        "title": "agent writer",
    }


def test_a_failing_agent_step_reports_failed_and_propagates() -> None:
    async def call_agent(name: str, text: str) -> str:
        if name == "broken":
            raise ValueError("model exploded")
        return "ok"

    spec = workflow([{"id": "fine", "agent": "good"}, {"id": "bad", "agent": "broken"}, {"id": "never", "agent": "x"}])
    graph = compile_workflow(spec, call_agent=call_agent, tools={})
    seen: list[dict[str, Any]] = []

    async def collect() -> None:
        async for event in graph.astream({"messages": [HumanMessage("x")]}, stream_mode="custom"):
            seen.append(event)

    with pytest.raises(ValueError, match="model exploded"):
        asyncio.run(collect())
    assert seen[0]["ca_event"] == "plan"
    assert [(e["step"], e["status"]) for e in seen[1:]] == [
        ("fine", "started"),
        ("fine", "completed"),
        ("bad", "started"),
        ("bad", "failed"),
    ]


def test_mermaid_drawing_names_every_step() -> None:
    spec = workflow(
        [
            {"id": "draft", "agent": "writer"},
            {"id": "triage", "router": {"on": "draft", "routes": ROUTES[:1]}},
            {"id": "polish", "loop": {"steps": [{"id": "edit", "agent": "e"}], "until": {"contains": "ok"}}},
            {"parallel": [{"id": "l", "agent": "left"}, {"id": "r", "agent": "right"}]},
        ]
    )
    drawing = compile_workflow(spec, call_agent=Agents(), tools={}).get_graph().draw_mermaid()
    for label in (
        "(plan)",
        "(step.draft)",
        "(step.triage)",
        "(step.ship)",
        "(triage.end)",
        "(step.polish)",
        "(step.edit)",
        "(polish.check)",
        "(polish.end)",
        "(step.parallel-1)",
        "(parallel-1.join)",
        "(output)",
    ):
        assert label in drawing


# -- the request, ask, artifact and message steps ------------------------------------------


def _with_request(
    graph: Any, request: dict[str, Any], text: str = "hello", resume: Any = None, config: Any = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run (or resume) ``graph`` with a RunContext carrying ``request``: (final state, custom events)."""
    from framework.compiler.agent import RunContext

    async def go() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        custom: list[dict[str, Any]] = []
        state: dict[str, Any] = {}
        start: Any = Command(resume=resume) if resume is not None else {"messages": [HumanMessage(text)]}
        async for mode, data in graph.astream(
            start, config, stream_mode=["custom", "values"], context=RunContext(request=request)
        ):
            if mode == "custom":
                custom.append(data)
            else:
                state = data
        return state, custom

    return asyncio.run(go())


ROUTED = [
    {
        "id": "kind",
        "router": {
            "on": "{{ request.message_id }}",
            "routes": [
                {"when": {"regex": "^file-"}, "steps": [{"id": "file", "agent": "files"}]},
                {"when": {"contains": "{{"}, "steps": [{"id": "never", "agent": "never"}]},
            ],
            "default": [{"id": "other", "agent": "other"}],
        },
    },
    {"id": "tag", "agent": "tagger", "input": "{{ request.metadata.team.name }}/{{ request.metadata.missing }}"},
]


@pytest.mark.parametrize(("message_id", "agent"), [("file-1", "files"), ("note-2", "other"), ("", "other")])
def test_a_router_routes_on_the_request_message_id(message_id: str, agent: str) -> None:
    agents = Agents()
    graph = compile_workflow(workflow(ROUTED), call_agent=agents, tools={})
    _with_request(graph, {"message_id": message_id, "metadata": {"team": {"name": "ops"}}})
    assert agents.calls[0][0] == agent
    assert agents.called("tagger") == ["ops/"]  # a field the message did not carry renders empty


def test_request_templates_render_empty_without_a_request() -> None:
    agents = Agents()
    run(compile_workflow(workflow(ROUTED), call_agent=agents, tools={}))
    assert [name for name, _ in agents.calls] == ["other", "tagger"]


def test_an_artifact_step_emits_its_parts_rendered_and_passes_its_input_on() -> None:
    agents = Agents()
    spec = workflow(
        [
            {"id": "draft", "agent": "writer"},
            {
                "id": "report",
                "artifact": {
                    "name": "report.txt",
                    "description": "the draft",
                    "parts": [
                        {"text": "for {{ request.message_id }}"},
                        {"data": {"draft": "{{ steps.draft.output }}", "n": [1, "{{ input }}"], "ok": True}},
                        {"file": {"name": "a.txt", "media_type": "text/plain", "content": "{{ steps.draft.output }}"}},
                        {"file": {"url": "https://example.com/{{ input }}.pdf"}},
                    ],
                },
            },
            {"id": "publish", "agent": "publisher"},
        ]
    )
    graph = compile_workflow(spec, call_agent=agents, tools={})
    state, custom = _with_request(graph, {"message_id": "m-1"}, text="x")
    (artifact,) = [e for e in custom if e.get("ca_event") == "artifact"]
    assert artifact == {
        "ca_event": "artifact",
        "step": "report",
        "name": "report.txt",
        "description": "the draft",
        "parts": [
            {"text": "for m-1"},
            {"data": {"draft": "writer(x)", "n": [1, "x"], "ok": True}},
            {"file": {"name": "a.txt", "media_type": "text/plain", "content": "writer(x)"}},
            {"file": {"url": "https://example.com/x.pdf"}},
        ],
    }
    assert agents.called("publisher") == ["writer(x)"]  # the step after it sees what it saw
    assert state["outputs"]["report"] == "report.txt"


def test_a_message_step_reports_its_text_and_makes_the_reply() -> None:
    spec = workflow([{"id": "hi", "message": "Hello, {{ input }}"}])
    graph = compile_workflow(spec, call_agent=Agents(), tools={})
    state, custom = _with_request(graph, {}, text="Ada")
    assert {"ca_event": "message", "step": "hi", "text": "Hello, Ada"} in custom
    assert state["messages"][-1].content == "Hello, Ada"


def _asking() -> tuple[Any, dict[str, Any], Agents]:
    agents = Agents()
    spec = workflow(
        [
            {"id": "q", "ask": {"message": "Which order? (you said {{ input }})", "timeout": "5m"}},
            {"id": "look", "agent": "lookup"},
        ]
    )
    graph = compile_workflow(spec, call_agent=agents, tools={}, checkpointer=InMemorySaver())
    return graph, {"configurable": {"thread_id": "t"}}, agents


def test_an_ask_step_pauses_with_its_question_and_the_answer_is_its_output() -> None:
    graph, config, agents = _asking()
    (pending,) = run(graph, "help", config)["__interrupt__"]
    assert pending.value == {"kind": "ask", "step": "q", "message": "Which order? (you said help)", "timeout": 300.0}
    state = asyncio.run(graph.ainvoke(Command(resume={"text": "order 42"}), config))
    assert agents.calls == [("lookup", "order 42")]
    assert state["outputs"]["q"] == "order 42"


def test_a_declined_ask_fails_the_run_with_the_reason() -> None:
    graph, config, agents = _asking()
    run(graph, "help", config)
    with pytest.raises(RunError) as raised:
        asyncio.run(graph.ainvoke(Command(resume={"declined": True, "reason": "no order"}), config))
    assert str(raised.value) == "ask 'q' was declined: no order"
    assert agents.calls == []


def test_a_loop_asks_again_until_the_request_says_stop() -> None:
    """The loop's ``on`` is a template: each resume's request decides whether to ask again."""
    agents = Agents()
    spec = workflow(
        [
            {
                "id": "wait",
                "loop": {
                    "steps": [{"id": "q", "ask": {"message": "More?"}}],
                    "on": "{{ request.metadata.more }}",
                    "until": {"contains": "no"},
                    "max": 10,
                },
            },
            {"id": "done", "agent": "closer"},
        ]
    )
    graph = compile_workflow(spec, call_agent=agents, tools={}, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    state, _ = _with_request(graph, {}, config=config)
    assert asyncio.run(graph.aget_state(config)).interrupts
    _with_request(graph, {"metadata": {"more": "yes"}}, resume={"text": "one"}, config=config)
    assert asyncio.run(graph.aget_state(config)).interrupts  # asked again
    state, _ = _with_request(graph, {"metadata": {"more": "no"}}, resume={"text": "two"}, config=config)
    assert agents.calls == [("closer", "two")]
    assert state["loops"]["wait"] == 2
