"""Workflow steps: sequence, parallel, router, loop, gate, ask, artifact and message, with templating.

Templates: ``{{ input }}``, ``{{ steps.ID.output }}``, ``{{ request.message_id }}`` and
``{{ request.metadata.KEY }}`` (the message that started or resumed the run, as A2A sent it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Self

from pydantic import Discriminator, Field, Tag, model_validator

from framework.spec.common import Duration, Name, Regex, Spec, fail

TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
"""A ``{{ expression }}`` in a step's input, args or gate message."""
STEP_OUTPUT = re.compile(r"^steps\.([a-z][a-z0-9_-]*)\.output$")
REQUEST_FIELD = re.compile(r"^request\.(message_id|metadata\.[A-Za-z0-9_.-]+)$")
"""``request.message_id`` or ``request.metadata.KEY`` (dotted: ``request.metadata.a.b``)."""


def is_template(text: str) -> bool:
    """Whether a router's or loop's ``on`` is a template (``{{ request.message_id }}``) rather than a step id."""
    return TEMPLATE.search(text) is not None


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


class Ask(Spec):
    message: str = Field(description="Template: the question. The answer, as text, is the step's output.")
    timeout: Duration | None = None


class AskStep(Spec):
    id: Name
    ask: Ask


class FilePart(Spec):
    """A file: inline ``content`` (sent as bytes, UTF-8) or a ``url``; both templates."""

    name: str | None = Field(default=None, description="The file name clients show or save as.")
    media_type: str | None = Field(default=None, description="e.g. text/plain, application/pdf.")
    content: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.content is None) == (self.url is None):
            raise fail("file", "a file part needs exactly one of content, url")
        return self


class ArtifactPart(Spec):
    """One part of an artifact: ``text`` (a template), ``data`` (any JSON; its strings are templates) or ``file``."""

    text: str | None = None
    data: Any = None
    file: FilePart | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        given = [k for k in ("text", "data", "file") if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail("part", "an artifact part needs exactly one of text, data, file")
        return self


def part_templates(part: ArtifactPart) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every string of ``part`` that is a template, with its key path inside the part."""

    def walk(value: Any, at: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
        if isinstance(value, str):
            yield at, value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield from walk(item, (*at, str(key)))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from walk(item, (*at, i))

    if part.text is not None:
        yield ("text",), part.text
    elif part.file is not None:
        for key in ("content", "url"):
            value = getattr(part.file, key)
            if value is not None:
                yield ("file", key), value
    else:
        yield from walk(part.data, ("data",))


class Artifact(Spec):
    name: str | None = Field(default=None, description="Default: the step id.")
    description: str | None = None
    parts: list[ArtifactPart] = Field(min_length=1)


class ArtifactStep(Spec):
    """Emits an artifact (A2A: an artifact of the task). Passes its input on, like a gate."""

    id: Name
    artifact: Artifact


class MessageStep(Spec):
    """Answers with this text (a template). Over A2A, a run whose only output is message steps
    answers with a Message instead of a task."""

    id: Name
    message: str


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
    on: str = Field(
        description="The id of an earlier step whose output is tested, or a template such as '{{ request.message_id }}'."
    )
    classify: Classify | None = None
    routes: list[Route] = Field(min_length=1)
    default: list[Step] = Field(default_factory=list)


class RouterStep(Spec):
    id: Name
    router: Router


class Loop(Spec):
    steps: list[Step] = Field(min_length=1)
    until: Condition
    on: str | None = Field(
        default=None, description="Step whose output `until` tests (default: the last), or a template."
    )
    max: int = Field(default=5, ge=1, le=100)


class LoopStep(Spec):
    id: Name
    loop: Loop


_STEP_KEYS = ("agent", "tool", "gate", "ask", "artifact", "message", "parallel", "router", "loop")


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
    AskStep: "ask",
    ArtifactStep: "artifact",
    MessageStep: "message",
    ParallelStep: "parallel",
    RouterStep: "router",
    LoopStep: "loop",
}


def step_kind(step: Spec) -> str:
    """The key that makes ``step`` what it is: agent, tool, gate, ask, ..."""
    return _STEP_CLASSES[type(step)]


Step = Annotated[
    Annotated[AgentStep, Tag("agent")]
    | Annotated[ToolStep, Tag("tool")]
    | Annotated[GateStep, Tag("gate")]
    | Annotated[AskStep, Tag("ask")]
    | Annotated[ArtifactStep, Tag("artifact")]
    | Annotated[MessageStep, Tag("message")]
    | Annotated[ParallelStep, Tag("parallel")]
    | Annotated[RouterStep, Tag("router")]
    | Annotated[LoopStep, Tag("loop")],
    Discriminator(
        _step_kind,
        custom_error_type="step",
        custom_error_message="a step needs one of: " + ", ".join(_STEP_KEYS),
    ),
]

for _model in (ParallelStep, Route, Router, Loop, LoopStep, RouterStep):
    _model.model_rebuild()
