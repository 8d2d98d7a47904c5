"""Budgets: caps on tokens, cost, tool calls, turns, wall time and call depth."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from framework.spec.common import Duration, Money, PositiveInt, Spec


class BudgetLimits(Spec):
    """Caps that apply together; any one reached stops the run (see ``on_exceed``)."""

    max_input_tokens: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    max_tokens: PositiveInt | None = Field(default=None, description="Input plus output tokens.")
    max_cost_usd: Money | None = Field(default=None, description="Cost from the price table, in US dollars.")
    max_tool_calls: PositiveInt | None = None
    max_turns: PositiveInt | None = Field(default=None, description="Model calls.")
    max_duration: Duration | None = Field(default=None, description="Wall time, e.g. '10m'.")
    max_depth: int | None = Field(default=None, ge=1, le=32, description="Nested agent-call depth.")


class Budget(BudgetLimits):
    """Per-task caps, plus optional caps over a whole conversation."""

    on_exceed: Literal["stop", "fail", "ask"] = Field(
        default="stop",
        description="stop: end the task with what it has; fail: fail it; ask: request approval of an extension.",
    )
    extend_by: float = Field(
        default=0.5,
        gt=0,
        le=10,
        description="With on_exceed: ask, the size of one approved extension as a fraction of each cap.",
    )
    conversation: BudgetLimits | None = Field(default=None, description="Caps summed over a conversation.")
