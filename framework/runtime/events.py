"""The one stream of run events. Every transport translates this stream, nothing else.

    A2A                                   ACP session/update
    ─────────────────────────────────     ──────────────────────────────
    TextChunk        artifact chunk       agent_message_chunk
    ThoughtChunk     (not sent)           agent_thought_chunk
    ToolCallStarted  status message       tool_call
    ToolCallFinished status message       tool_call_update
    StepUpdate       status message       plan (entry status)
    ArtifactOut      artifact             agent_message_chunk (text, resource, resource_link)
    MessageOut       a Message reply*     (the reply text carries it)
    PlanUpdate       status message       plan
    UsageUpdate      metadata             (budget display)
    Paused           input-required       session/request_permission (pause: its typed variant)
    RunFinished      its end state**      stopReason, or the JSON-RPC error of failure.code

*When a run's only output is message steps; otherwise a status message of the task.
**completed, failed, canceled, or rejected (a person rejected a gate, a step's approval or an ask).
A failed run's ``failure`` (``framework.errors.Failure``) is mapped by each transport's one table.

``source`` is the path of nested agents that produced an event: ``()`` for the agent
that was asked, ``("release", "summary")`` for the ``summary`` step of ``release``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from framework.errors import ApprovalRejected, CAError, Cancelled, Failure, RunError, Signal
from framework.runtime.pauses import Pause

RunState = Literal["completed", "input-required", "failed", "canceled", "rejected"]
StepStatus = Literal["pending", "started", "completed", "failed"]


@dataclass(frozen=True, slots=True)
class TextChunk:
    text: str
    source: tuple[str, ...] = ()
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ThoughtChunk:
    """Model reasoning, where a model gives it (ACP agent_thought_chunk)."""

    text: str
    source: tuple[str, ...] = ()
    kind: Literal["thought"] = "thought"


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    call_id: str
    tool: str
    """The spec name (``fs.read``), not the model-facing one (``fs_read``)."""
    args: dict[str, Any]
    source: tuple[str, ...] = ()
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    call_id: str
    tool: str
    result: str
    is_error: bool = False
    source: tuple[str, ...] = ()
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class StepUpdate:
    step: str
    status: StepStatus
    title: str = ""
    step_kind: str = ""
    source: tuple[str, ...] = ()
    kind: Literal["step"] = "step"
    ended_by: Literal["", "until", "max"] = ""
    """How a completed loop ended: its ``until`` held, or it ran ``max`` times without that ('' otherwise)."""


@dataclass(frozen=True, slots=True)
class ArtifactOut:
    """An artifact a step produced. ``parts``: ``{"text": str}``, ``{"data": JSON}`` or
    ``{"file": {"name"?, "media_type"?, "content" | "url"}}`` (``content`` is text sent as bytes)."""

    artifact_id: str
    name: str
    parts: tuple[dict[str, Any], ...]
    description: str = ""
    source: tuple[str, ...] = ()
    kind: Literal["artifact"] = "artifact"


@dataclass(frozen=True, slots=True)
class MessageOut:
    """A message step's text: over A2A, the run answers with a Message when this is all it produced."""

    text: str
    source: tuple[str, ...] = ()
    kind: Literal["message"] = "message"


@dataclass(frozen=True, slots=True)
class PlanEntry:
    step: str
    title: str
    status: StepStatus = "pending"


@dataclass(frozen=True, slots=True)
class PlanUpdate:
    entries: tuple[PlanEntry, ...]
    source: tuple[str, ...] = ()
    kind: Literal["plan"] = "plan"


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, int]:
        """The counts and their total, as events and task metadata carry them."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "total_tokens": self.total_tokens,
        }

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.model_calls + other.model_calls,
            self.tool_calls + other.tool_calls,
        )


@dataclass(frozen=True, slots=True)
class UsageUpdate:
    """Cumulative usage of this run so far."""

    usage: Usage
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class Paused:
    """The run waits for a person: ``pause`` says for what (typed); ``payload`` is its wire form."""

    interrupt_id: str
    payload: dict[str, Any]
    pause: Pause
    source: tuple[str, ...] = ()
    kind: Literal["paused"] = "paused"


StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run's end. A failed, canceled or rejected run carries its ``failure``, typed (always: one
    built without gets a RunError, Cancelled or ApprovalRejected of its ``error``); ``error`` is its
    message. ``rejected``: a person rejected a gate, a workflow step's approval or an ask."""

    state: RunState
    output: str = ""
    error: str = ""
    failure: Failure | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = "end_turn"
    """Why a completed turn ended (ACP's stopReason): a budget stops it as max_tokens / max_turn_requests."""
    task_id: str = ""
    kind: Literal["finished"] = "finished"

    def __post_init__(self) -> None:
        # A run that did not complete always says why, typed: transports branch on ``failure``.
        if self.failure is None and self.state in ("failed", "canceled", "rejected"):
            error: CAError | Signal = RunError(self.error)
            if self.state == "canceled":
                error = Cancelled(self.error or "cancelled")
            elif self.state == "rejected":
                error = ApprovalRejected(self.error)
            object.__setattr__(self, "failure", Failure.of(error))

    @classmethod
    def failed(cls, failure: Failure, usage: Usage | None = None) -> RunFinished:
        """The end of a run that failed (or was cancelled) with ``failure``."""
        state: RunState = "canceled" if failure.code == "cancelled" else "rejected" if failure.rejected else "failed"
        return cls(state, error=failure.message, failure=failure, usage=usage or Usage())


RunEvent = (
    TextChunk
    | ThoughtChunk
    | ToolCallStarted
    | ToolCallFinished
    | StepUpdate
    | ArtifactOut
    | MessageOut
    | PlanUpdate
    | UsageUpdate
    | Paused
    | RunFinished
)


def event_to_json(event: RunEvent) -> dict[str, Any]:
    """A JSON-ready dict (``ca run --json`` prints one per line)."""
    data = asdict(event)
    if isinstance(event, Paused):
        del data["pause"]  # the payload is its wire form
    if isinstance(event, UsageUpdate | RunFinished):
        data["usage"] = event.usage.to_json()
    return {"kind": data.pop("kind"), **data}
