"""What a paused run waits for: one typed variant per kind of pause.

    kind       variant          raised by                       answered with
    approval   ToolApproval     governance (a tool call), or    approve / reject / edit / always
                                a remote agent's own approval   (a remote one: approve / reject)
    gate       Gate             a workflow's gate step          approve / reject
    ask        Question         a workflow's ask step           an answer (text), or reject
    budget     BudgetExtension  a budget with on_exceed: ask    approve / reject

The interrupt's payload (a dict) stays the wire form every transport sends as documented;
:func:`read_pause` reads it once into its variant (the runner for a ``Paused`` event, the task
store for a stored pending decision), and code branches on the variant's type, never on the
payload's ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PauseKind = Literal["approval", "gate", "ask", "budget"]
TWO_WAYS = ("approve", "reject")


@dataclass(frozen=True, slots=True)
class ToolApproval:
    """A tool call waits for a person."""

    message: str
    agent: str = ""
    tool: str = ""
    call_id: str = ""
    args: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""
    decisions: tuple[str, ...] = TWO_WAYS
    kind: Literal["approval"] = "approval"


@dataclass(frozen=True, slots=True)
class Gate:
    """A workflow's gate step waits for approve or reject."""

    message: str
    step: str = ""
    timeout: float | None = None
    decisions: tuple[str, ...] = TWO_WAYS
    kind: Literal["gate"] = "gate"


@dataclass(frozen=True, slots=True)
class Question:
    """A workflow's ask step waits for an answer (text); a reject declines it."""

    message: str
    step: str = ""
    timeout: float | None = None
    decisions: tuple[str, ...] = ("answer", "reject")
    kind: Literal["ask"] = "ask"


@dataclass(frozen=True, slots=True)
class BudgetExtension:
    """A spent budget (``on_exceed: ask``) waits for a person to allow more."""

    message: str
    agent: str = ""
    limit: str = ""
    used: float = 0.0
    cap: float = 0.0
    decisions: tuple[str, ...] = TWO_WAYS
    kind: Literal["budget"] = "budget"


Pause = ToolApproval | Gate | Question | BudgetExtension


def read_pause(payload: Mapping[str, Any]) -> Pause:
    """The variant of an interrupt's payload; a payload of another kind (an interrupt raised by
    other code, e.g. with a message only) is read as an approval of approve or reject."""
    message = str(payload.get("message", ""))
    options = payload.get("options")
    decisions = tuple(str(o) for o in options) if isinstance(options, list | tuple) and options else TWO_WAYS
    kind = payload.get("kind")
    if kind in ("gate", "ask"):
        timeout = payload.get("timeout")
        seconds = float(timeout) if isinstance(timeout, int | float) and timeout else None
        if kind == "ask":
            return Question(message, str(payload.get("step", "")), seconds)
        return Gate(message, str(payload.get("step", "")), seconds)
    if kind == "budget":
        return BudgetExtension(
            message,
            str(payload.get("agent", "")),
            str(payload.get("limit", "")),
            float(payload.get("used", 0) or 0),
            float(payload.get("cap", 0) or 0),
            decisions,
        )
    args = payload.get("args")
    return ToolApproval(
        message,
        str(payload.get("agent", "")),
        str(payload.get("tool", "")),
        str(payload.get("call_id", "")),
        dict(args) if isinstance(args, Mapping) else {},
        str(payload.get("reason", "") or ""),
        decisions,
    )


def all_questions(pauses: list[Pause] | tuple[Pause, ...]) -> bool:
    """Whether a run waits only for answers to questions (a turn that ends with its question)."""
    return bool(pauses) and all(isinstance(p, Question) for p in pauses)
