"""Eval files: ``evals/*.yaml``, the cases ``ca test`` runs and what each must show.

A case names an agent, what to send it (one message, or a conversation of several), files to
put in its scratch copy of the project, how its approvals are answered, and its expectations:
tools called (as a set or in order, argument globs, counts), tools not called, the final state
(and failure code), the output (contains / matches / equals / a JSON Schema), the contract held,
the budget used under limits, and workflow steps reached.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Self

from pydantic import Discriminator, Field, Tag, WithJsonSchema, field_validator, model_validator

from framework.spec.common import Duration, Money, Name, PositiveInt, Regex, Spec, Version, fail, string_form
from framework.spec.contract import check_json_schema
from framework.spec.model import ModelConfig

Decision = Literal["approve", "reject", "edit", "always", "answer"]


class Answer(Spec):
    """How one pause is answered: ``approve``, ``reject`` (with a ``reason`` the agent sees),
    ``edit`` (new ``args`` for the tool call), ``always``, or ``answer`` (``text`` for an ask step)."""

    model_config = string_form("approve", "reject")

    decision: Decision
    reason: str | None = None
    args: dict[str, Any] | None = Field(default=None, description="With decision: edit, the new arguments.")
    text: str | None = Field(default=None, description="With decision: answer, the answer to an ask step.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"decision": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.decision == "edit" and self.args is None:
            raise fail("answer", "decision 'edit' needs `args:`, the tool call's new arguments")
        if self.decision == "answer" and self.text is None:
            raise fail("answer", "decision 'answer' needs `text:`, the answer to give")
        if self.args is not None and self.decision != "edit":
            raise fail("answer", "`args:` belongs with decision 'edit'")
        return self

    def to_decision(self) -> dict[str, Any]:
        """The decision as :meth:`framework.runtime.runtime.Runtime.decide` takes it."""
        out: dict[str, Any] = {"decision": self.decision}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.args is not None:
            out["args"] = dict(self.args)
        if self.text is not None:
            out["text"] = self.text
        return out


class ToolCallExpectation(Spec):
    """A tool call: its name (a glob, ``fs.*``), argument globs, and how many times (``count``)."""

    model_config = string_form("shell", "fs.*")

    tool: str = Field(min_length=1, description="Tool name or glob, e.g. 'shell' or 'fs.*'.")
    args: dict[str, str] = Field(default_factory=dict, description="Argument name -> glob on its value.")
    count: int | None = Field(default=None, ge=0, le=10_000, description="Exactly this many matching calls.")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        return {"tool": value} if isinstance(value, str) else value

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.args.items())
        times = f" x{self.count}" if self.count is not None else ""
        return f"{self.tool}({args}){times}"


class BudgetExpectation(Spec):
    """Upper bounds on what the case used (each inclusive)."""

    max_tokens: PositiveInt | None = Field(default=None, description="Input plus output tokens.")
    max_input_tokens: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    max_cost_usd: Money | None = Field(default=None, description="Cost from the price table, in US dollars.")
    max_tool_calls: int | None = Field(default=None, ge=0)
    max_model_calls: int | None = Field(default=None, ge=0)
    max_duration: Duration | None = Field(default=None, description="Wall time of the case, e.g. '5s'.")


State = Literal["completed", "failed", "rejected", "input-required", "canceled"]


class Expectations(Spec):
    """What the case must show; every key given is checked."""

    state: State | None = Field(default=None, description="How the last run ended.")
    failure_code: str | None = Field(default=None, description="The failure's code, e.g. budget_exceeded.")
    tools_called: list[ToolCallExpectation] = Field(default_factory=list)
    in_order: bool = Field(default=False, description="tools_called happen in this order (others may come between).")
    tools_not_called: list[ToolCallExpectation] = Field(default_factory=list)
    output_contains: Annotated[
        list[str],
        WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}),
    ] = Field(default_factory=list, description="Text the output holds (one, or a list of them).")
    output_matches: Regex | None = None
    output_equals: str | None = None
    output_schema: dict[str, Any] | None = Field(default=None, description="The output is JSON valid under it.")
    contract_held: bool | None = Field(default=None, description="true: no contract rule was broken or enforced.")
    budget: BudgetExpectation | None = None
    steps_reached: list[str] = Field(default_factory=list, description="Workflow step ids that started.")
    judged: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="Criteria a judge model (ca.yaml evals.judge) checks the answer against, e.g. "
        "'the answer names the failing test'.",
    )

    @field_validator("output_contains", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("output_schema")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_json_schema(value)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.failure_code is not None and self.state not in (None, "failed", "rejected"):
            raise fail("expect", "failure_code goes with state: failed or rejected (or no state)")
        if self.in_order and not self.tools_called:
            raise fail("expect", "in_order needs tools_called")
        return self


def _check_file_path(value: str) -> str:
    path = PurePosixPath(value)
    if not value or path.is_absolute() or ".." in path.parts or value.startswith("~"):
        raise fail("file", "{value!r} must be a path inside the project, like 'src/app.py'", value=value)
    if path.parts[0] == ".ca":
        raise fail("file", "{value!r} is under .ca/, the project's state: put files elsewhere", value=value)
    return value


def _approvals_form(value: Any) -> str:
    return "in-order" if isinstance(value, list) else "by-name"


Approvals = Annotated[
    Annotated[list[Answer], Tag("in-order")] | Annotated[dict[str, Answer], Tag("by-name")],
    Discriminator(_approvals_form),
]
"""Answers in order (a list), or by tool name / step id / 'budget' / '*' (a mapping)."""


class EvalCase(Spec):
    """One case: a fresh scratch copy of the project, a conversation, and expectations."""

    name: Name
    description: str = ""
    agent: Name | None = Field(default=None, description="The agent to ask (default: the project's default agent).")
    input: str | list[str] = Field(description="A message, or a conversation: messages sent one after another.")
    model: ModelConfig | None = Field(
        default=None, description="Run the agent on this model instead of its own (e.g. scripted replies)."
    )
    files: dict[str, str] = Field(default_factory=dict, description="Path -> content, written into the scratch copy.")
    approvals: Approvals = Field(
        default_factory=list,
        description="Answers to pauses: a list (in order), or tool name / step id / 'budget' / '*' -> answer. "
        "A pause with no answer ends the case input-required.",
    )
    expect: Expectations = Field(default_factory=Expectations)
    timeout: Duration = Field(default=120.0, description="The case fails if it runs longer.")

    @field_validator("input")
    @classmethod
    def _some_input(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and not value:
            raise fail("input", "a conversation needs at least one message")
        return value

    @field_validator("files")
    @classmethod
    def _paths(cls, value: dict[str, str]) -> dict[str, str]:
        for path in value:
            _check_file_path(path)
        return value

    @property
    def messages(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class EvalFile(Spec):
    """``evals/NAME.yaml``: cases that run against this project."""

    version: Version = 1
    description: str = ""
    exclude: list[str] = Field(
        default_factory=list,
        description="Globs of project paths not copied into the cases' scratch copies (e.g. 'data/**').",
    )
    cases: list[EvalCase] = Field(min_length=1)
