"""Budgets: what a task and a conversation have used, and which cap (if any) is spent.

Usage is a plain mapping of counters — ``input_tokens``, ``output_tokens``,
``cost_usd``, ``model_calls``, ``tool_calls`` — summed by a reducer in graph state, so
it persists with the conversation and survives a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from framework.spec.budget import Budget, BudgetLimits

COUNTERS = ("input_tokens", "output_tokens", "cost_usd", "model_calls", "tool_calls")

LIMITS: dict[str, str] = {
    "max_input_tokens": "input_tokens",
    "max_output_tokens": "output_tokens",
    "max_tokens": "tokens",
    "max_cost_usd": "cost_usd",
    "max_turns": "model_calls",
    "max_tool_calls": "tool_calls",
    "max_duration": "seconds",
}
"""Budget limit -> the measure it caps."""

TURN_LIMITS = frozenset({"max_turns", "max_tool_calls", "max_duration"})
"""Limits that stop a turn as ACP's ``max_turn_requests``; the others as ``max_tokens``."""

Usage = dict[str, float]


def add_usage(left: Mapping[str, float] | None, right: Mapping[str, float] | None) -> Usage:
    """State reducer: counters add up (concurrent tool calls each add their own)."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


def subtract(total: Mapping[str, float], base: Mapping[str, float]) -> Usage:
    return {k: total.get(k, 0) - base.get(k, 0) for k in COUNTERS}


def measure(usage: Mapping[str, float], name: str, elapsed: float) -> float:
    """The amount of ``name``'s measure used."""
    what = LIMITS[name]
    if what == "tokens":
        return usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    if what == "seconds":
        return elapsed
    return usage.get(what, 0)


@dataclass(frozen=True)
class Overrun:
    """A spent cap."""

    limit: str
    used: float
    cap: float
    scope: str
    """``task`` or ``conversation``."""

    def describe(self) -> str:
        unit = {"max_cost_usd": " USD", "max_duration": " s"}.get(self.limit, "")
        used = f"{self.used:.4g}" if isinstance(self.used, float) and not self.used.is_integer() else f"{self.used:g}"
        return f"{self.scope} budget {self.limit} reached: used {used}{unit} of {self.cap:g}{unit}"

    @property
    def stop_reason(self) -> str:
        return "max_turn_requests" if self.limit in TURN_LIMITS else "max_tokens"


def caps_of(limits: BudgetLimits | None, *, extensions: int = 0, extend_by: float = 0.0) -> dict[str, float]:
    """The caps a limits block sets, widened by approved extensions."""
    if limits is None:
        return {}
    factor = 1 + extend_by * extensions
    caps: dict[str, float] = {}
    for name in LIMITS:
        value = getattr(limits, name)
        if value is not None:
            caps[name] = float(value) * factor
    return caps


def first_overrun(
    caps: Mapping[str, float],
    usage: Mapping[str, float],
    elapsed: float,
    *,
    scope: str,
    only: frozenset[str] | None = None,
) -> Overrun | None:
    """The first cap that ``usage`` has reached (``>=``), or None."""
    for name, cap in caps.items():
        if name not in LIMITS or (only is not None and name not in only):
            continue  # max_depth is checked on each agent call, not against usage
        used = measure(usage, name, elapsed)
        if used >= cap:
            return Overrun(name, used, cap, scope)
    return None


def remaining(caps: Mapping[str, float], usage: Mapping[str, float], elapsed: float) -> dict[str, float]:
    """What is left of each cap: passed to a callee, which never gets more (``max_depth`` passes as is)."""
    return {
        name: max(cap - measure(usage, name, elapsed), 0.0) if name in LIMITS else cap for name, cap in caps.items()
    }


def task_caps(budget: Budget | None, parent: Mapping[str, float] | None, extensions: int) -> dict[str, float]:
    """This task's caps: its own (with extensions), lowered to what the caller has left.

    ``max_depth`` (the deepest agent-call depth, counted from the agent a person asked) is
    included, never extended, and inherited by callees like the other caps.
    """
    own = caps_of(budget, extensions=extensions, extend_by=budget.extend_by if budget else 0.0)
    if budget is not None and budget.max_depth is not None:
        own["max_depth"] = float(budget.max_depth)
    for name, left in (parent or {}).items():
        own[name] = min(own.get(name, left), left)
    return own
