"""A workflow run's graph state, and how a step reads it: its lane's previous output, templates, text.

Inside a parallel block each branch runs in its own *lane*: the "previous step's output" a step
without ``input`` receives is ``last`` at the top level and the private ``lanes`` channel in a
branch, so concurrent branches never overwrite each other's (see :mod:`framework.compiler.workflow`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypedDict, TypeVar, cast, get_type_hints

from langchain.agents.middleware.types import AgentMiddleware
from langchain_core.messages import AnyMessage, BaseMessage
from langgraph.graph.message import add_messages
from langgraph.runtime import get_runtime

from framework.compiler.templates import input_text, render_template
from framework.spec.workflow import is_template

_V = TypeVar("_V")


def merge(left: dict[str, _V] | None, right: dict[str, _V] | None) -> dict[str, _V]:
    """Reducer for ``outputs`` / ``loops``: concurrent branches each add their keys; ``None`` clears."""
    return {} if right is None else {**(left or {}), **right}


class WorkflowState(TypedDict):
    """The state of a workflow run; the input is ``{"messages": [HumanMessage(text)]}``."""

    messages: Annotated[list[AnyMessage], add_messages]
    outputs: NotRequired[Annotated[dict[str, str], merge]]
    """Step id -> output text."""
    loops: NotRequired[Annotated[dict[str, int], merge]]
    """Loop id -> iterations done."""
    last: NotRequired[str]
    """The output of the most recent top-level step (a parallel block's: its branches', joined)."""


class RunState(WorkflowState):
    lanes: NotRequired[Annotated[dict[str, str], merge]]
    """Parallel branch lane -> the output of the most recent step in that branch."""


Update = dict[str, Any]
_AGENT_LOOP_KEYS = frozenset({"jump_to", "structured_response"})
"""Keys of an agent's state that only its own model loop uses; a workflow does not take them."""


def state_schema(middleware: Sequence[AgentMiddleware[Any, Any]]) -> type[RunState]:
    """``RunState`` plus the keys the middleware keep in graph state (e.g. governance counters)."""
    fields = get_type_hints(RunState, include_extras=True)
    for layer in middleware:
        for key, hint in get_type_hints(layer.state_schema, include_extras=True).items():
            if key not in fields and key not in _AGENT_LOOP_KEYS:
                fields[key] = hint
    return cast("type[RunState]", TypedDict("WorkflowRunState", fields))  # type: ignore[operator]


def read_lane(state: RunState, lane: str) -> str:
    return state.get("last", "") if not lane else state.get("lanes", {}).get(lane, "")


def write_lane(lane: str, text: str) -> Update:
    return {"last": text} if not lane else {"lanes": {lane: text}}


def current_request() -> Mapping[str, Any]:
    """The request of the running graph (``RunContext.request``), or nothing outside a run."""
    try:
        context = get_runtime().context
    except RuntimeError:  # called outside a graph run (a unit test of a node)
        return {}
    request = getattr(context, "request", None)
    return request if isinstance(request, Mapping) else {}


def render(text: str, state: RunState) -> str:
    return render_template(
        text, input=input_text(state["messages"]), outputs=state.get("outputs", {}), request=current_request()
    )


def render_value(value: Any, state: RunState) -> Any:
    """``value`` with every string in it rendered (artifact data)."""
    if isinstance(value, str):
        return render(value, state)
    if isinstance(value, dict):
        return {key: render_value(item, state) for key, item in value.items()}
    if isinstance(value, list):
        return [render_value(item, state) for item in value]
    return value


def tested_text(on: str, state: RunState) -> str:
    """What a router's or loop's ``on`` names: a step's output, or a rendered template."""
    return render(on, state) if is_template(on) else state.get("outputs", {}).get(on, "")


def as_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, BaseMessage):
        return result.text
    try:
        return json.dumps(result, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(result)
