"""Workflow steps: sequence, parallel, router, loop and gate, with ``{{ steps.ID.output }}`` templating."""

from __future__ import annotations

import re
from typing import Annotated, Any, Self

from pydantic import Discriminator, Field, Tag, model_validator

from framework.spec.common import Duration, Name, Regex, Spec, fail

TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
"""A ``{{ expression }}`` in a step's input, args or gate message."""
STEP_OUTPUT = re.compile(r"^steps\.([a-z][a-z0-9_-]*)\.output$")


class Condition(Spec):
    """A test on a step's output: ``contains``, ``regex``, ``json_path`` (+ ``equals``) or a ``label``."""

    contains: str | None = None
    regex: Regex | None = None
    json_path: str | None = Field(default=None, description="Dotted path into JSON output, e.g. 'verdict'.")
    equals: Any = None
    label: str | None = Field(default=None, description="A label chosen by the router's `classify`.")

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [k for k in ("contains", "regex", "json_path", "label") if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail("condition", "a condition needs exactly one of contains, regex, json_path, label")
        if self.equals is not None and self.json_path is None:
            raise fail("condition", "'equals' goes with 'json_path'")
        return self


class AgentStep(Spec):
    id: Name
    agent: str = Field(description="An agent of this project.")
    input: str | None = Field(default=None, description="Template; default: the previous step's output.")


class ToolStep(Spec):
    id: Name
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class Gate(Spec):
    message: str
    timeout: Duration | None = None


class GateStep(Spec):
    id: Name
    gate: Gate


class ParallelStep(Spec):
    id: Name | None = None
    parallel: list[Step] = Field(min_length=2)


class Classify(Spec):
    labels: list[str] = Field(min_length=2)
    model: str | None = Field(default=None, description="Model for the classification (default: offline).")


class Route(Spec):
    when: Condition
    steps: list[Step] = Field(min_length=1)


class Router(Spec):
    on: str = Field(description="The id of an earlier step whose output is tested.")
    classify: Classify | None = None
    routes: list[Route] = Field(min_length=1)
    default: list[Step] = Field(default_factory=list)


class RouterStep(Spec):
    id: Name
    router: Router


class Loop(Spec):
    steps: list[Step] = Field(min_length=1)
    until: Condition
    on: str | None = Field(default=None, description="Step whose output `until` tests (default: the last).")
    max: int = Field(default=5, ge=1, le=100)


class LoopStep(Spec):
    id: Name
    loop: Loop


_STEP_KEYS = ("agent", "tool", "gate", "parallel", "router", "loop")


def _step_kind(value: Any) -> str | None:
    """The union member for raw YAML data (validation) or a model instance (serialisation)."""
    if isinstance(value, Spec):
        return _STEP_CLASSES.get(type(value))
    if isinstance(value, dict):
        for key in _STEP_KEYS:
            if key in value:
                return key
    return None


_STEP_CLASSES: dict[type[Spec], str] = {
    AgentStep: "agent",
    ToolStep: "tool",
    GateStep: "gate",
    ParallelStep: "parallel",
    RouterStep: "router",
    LoopStep: "loop",
}


Step = Annotated[
    Annotated[AgentStep, Tag("agent")]
    | Annotated[ToolStep, Tag("tool")]
    | Annotated[GateStep, Tag("gate")]
    | Annotated[ParallelStep, Tag("parallel")]
    | Annotated[RouterStep, Tag("router")]
    | Annotated[LoopStep, Tag("loop")],
    Discriminator(
        _step_kind,
        custom_error_type="step",
        custom_error_message="a step needs one of: agent, tool, gate, parallel, router, loop",
    ),
]

for _model in (ParallelStep, Route, Router, Loop, LoopStep, RouterStep):
    _model.model_rebuild()
