"""The one exception tree of CleverAgents, and the typed failure a run ends with.

    class                        code                 what the user meets
    CAError                      run_failed           anything the framework reports to a user
    ├── SpecError                spec_invalid         the project's files are invalid; carries every Diagnostic
    ├── UsageError               usage_error          a wrong CLI argument or option value
    ├── ModelError               run_failed           a model cannot be built (missing extra, unset key)
    │   └── ProviderError        provider_error       a model call failed (the provider answered an error,
    │                                                 or cannot be reached)
    ├── ToolError                tool_failed          a tool cannot be loaded, or a workflow's tool step failed
    │                                                 (a model's tool calls get their failures back as results)
    │   └── McpServerFailed      tool_failed          an MCP server could not start or list its tools
    ├── StoreError               store_damaged        a state database under .ca/ is damaged or not one
                                                      (exit 2: the file is to move aside)
    ├── StoreUnreachable         store_unreachable    store.url's server cannot be reached or used (down, no
    │                                                 such database, its driver not installed; exit 2)
    ├── StoreBusy                store_busy           another process held a database's write lock past
    │                                                 store.lock_timeout (retryable: nothing was written)
    └── RunError                 run_failed           a run cannot start or failed; its subclasses say why
        ├── AgentNotFound        agent_not_found      no agent of that name (exit 2: the name is to change)
        ├── SkillNotFound        run_failed           the agent has no skill of that id (exit 2)
        ├── TaskNotWaiting       task_not_waiting     a decision for a task that waits for none
        ├── ConversationBusy     conversation_busy    another turn of the conversation ran past the wait limit
                                                      (retryable: send the message again later)
        ├── ConversationTooLarge conversation_too_large  the conversation holds store.max_conversation_bytes
                                                      (start a new conversation)
        ├── BudgetExceeded       budget_exceeded      a budget with on_exceed: fail was spent
        ├── PolicyDenied         policy_denied        a capability, contract or profile rule refused an action
        │   ├── PathRefused      policy_denied        a path no capability can allow (outside the root, ...)
        │   │   └── PathChanged  policy_denied        a checked path became a symbolic link before it was opened
        │   ├── UrlRefused       policy_denied        a URL refused before the allowlist is consulted
        │   └── ConversationNotYours policy_denied    a message into a conversation another caller started
        ├── ContractViolation    contract_violation   the answer broke the agent's contract
        └── ApprovalRejected     approval_rejected    a person rejected a gate or an approval, or declined an ask
            │                                         (the task ends ``rejected``, not ``failed``)
            └── ApprovalTimedOut approval_rejected    an approval expired under ``on_timeout: fail`` (ends failed)

    Signal                                            control flow, not a failure: generic handlers re-raise it
    └── Cancelled                cancelled            the user or a transport stopped the run

(A pause for a decision is LangGraph's own signal, ``GraphInterrupt``; it never becomes a failure.)

Foreign exceptions are translated where they enter (``raise SpecError(...) from exc``; the runner
turns a provider package's exception into ``ProviderError``). A run that fails ends with a
:class:`Failure` built from the exception's type: ``kind`` (the class), ``code`` (stable, for
machines), the message and structured ``data``. Each transport maps ``code`` through one table:
JSON-RPC numbers in ``framework.protocols.jsonrpc``, A2A task states in ``framework.protocols.a2a.statuses``, ACP stop
reasons in the ACP prompt turn, exit codes in the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

Severity = Literal["error", "warning"]
ErrorCode = Literal[
    "run_failed",
    "usage_error",
    "spec_invalid",
    "provider_error",
    "tool_failed",
    "store_damaged",
    "store_busy",
    "store_unreachable",
    "agent_not_found",
    "task_not_waiting",
    "conversation_busy",
    "conversation_too_large",
    "budget_exceeded",
    "policy_denied",
    "contract_violation",
    "approval_rejected",
]
"""The stable machine code of each failure class (never reworded: clients act on it)."""
FailureCode = ErrorCode | Literal["cancelled"]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` did you mean 'x'?`` for the closest candidate, or an empty string."""
    import difflib  # off the start-up path: a message of a mistake needs it

    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f"did you mean {matches[0]!r}?" if matches else ""


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a user's file, pointing at the exact place to change.

    ``line`` and ``column`` are 1-based; 0 means "the whole file".
    """

    file: str
    line: int
    column: int
    message: str
    key_path: str = ""
    hint: str = ""
    severity: Severity = "error"
    source_line: str | None = field(default=None, compare=False)

    def location(self) -> str:
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.column}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source_line")
        return data

    def render(self) -> str:
        """``path:line:col: message``, then the offending line with a caret, key path and hint."""
        head = f"{self.location()}: {self.severity}: {self.message}"
        lines = [head]
        if self.source_line is not None and self.line > 0:
            text = self.source_line.rstrip("\n").expandtabs(1)
            lines.append(f"    {text}")
            lines.append("    " + " " * max(self.column - 1, 0) + "^")
        if self.key_path:
            lines.append(f"    at: {self.key_path}")
        if self.hint:
            lines.append(f"    hint: {self.hint}")
        return "\n".join(lines)


class CAError(Exception):
    """Base of every error CleverAgents reports to a user (never shown with a traceback).

    ``data`` holds what a program needs besides the message (a budget's limit, a rule's name).
    """

    code: ClassVar[ErrorCode] = "run_failed"
    exit_code: ClassVar[int] = 1
    rejects: ClassVar[bool] = False
    """Whether a run that fails with it ends ``rejected`` (a person said no to it), not ``failed``."""

    def __init__(self, message: str = "", *, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data: dict[str, Any] = dict(data or {})


class UsageError(CAError):
    """A command-line argument or option the user must change."""

    code = "usage_error"
    exit_code = 2


class ModelError(CAError):
    """A chat model cannot be built (a missing package, an unset key); the message says what to
    install or set. The run cannot start, so its code is the generic ``run_failed``."""


class ProviderError(ModelError):
    """A model call failed: the provider answered with an error or could not be reached.

    Raised from the provider package's own exception, which is never parsed: a provider whose
    text says "Access denied" is a provider error, not a policy decision.
    """

    code = "provider_error"


class ToolError(CAError):
    """A tool cannot be loaded or built (a python tool that fails to import), or a workflow's
    tool step failed."""

    code = "tool_failed"


class McpServerFailed(ToolError):
    """An MCP server declared in ``ca.yaml`` could not be started or would not list its tools."""


class StoreError(CAError):
    """A state database cannot be used as it is (corrupt, not a database, a table missing).

    Raised where the database driver's error enters, so no caller sees ``sqlite3`` errors.
    """

    code: ClassVar[ErrorCode] = "store_damaged"
    exit_code = 2


class StoreUnreachable(CAError):
    """The database server of ``store.url`` cannot be used: it does not answer, refuses the login,
    has no such database, or the driver for it is not installed. The message says which, with the
    URL (password hidden) and what to change.
    """

    code = "store_unreachable"
    exit_code = 2


class StoreBusy(CAError):
    """Another process held the write lock of a state database longer than ``store.lock_timeout``.

    Retryable: the statement (or transaction) that waited wrote nothing; the same request later
    goes through once the lock is given back.
    """

    code = "store_busy"


class RunError(CAError):
    """A run cannot start or failed for a reason the user can act on."""


class AgentNotFound(RunError):
    """No agent of that name in the project (the message suggests the closest)."""

    code = "agent_not_found"
    exit_code = 2

    @classmethod
    def among(cls, name: str, agents: Iterable[str], hint: str = "") -> AgentNotFound:
        """The error for ``name`` missing from ``agents``: the closest name and every name, so a
        command, the bundle and ``ca run --stdio`` word it alike; ``hint`` is added after them."""
        names = sorted(agents)
        near = did_you_mean(name, names)
        known = ", ".join(names) or "none"
        return cls(f"agent {name!r} not found{f' ({near})' if near else ''}; agents: {known}{hint}")


class SkillNotFound(RunError):
    """The agent has no skill of that id (the message lists its skills)."""

    exit_code = 2


class TaskNotWaiting(RunError):
    """A decision was sent to a task (or conversation) that waits for none."""

    code = "task_not_waiting"


class ConversationBusy(RunError):
    """A message waited longer than the wait limit for the running turn of its conversation to end.

    Retryable: nothing of the message ran; sending it again later starts its turn.
    """

    code = "conversation_busy"


class TaskTakenOver(RunError):
    """This process no longer owns the task it runs: it missed its lease (its event loop held longer
    than ``store.task_lease``) and another replica took the task over. The run stops before its next
    tool runs and records nothing more of the task (see ``framework.runtime.fence``)."""


class BudgetExceeded(RunError):
    """A budget with ``on_exceed: fail`` was spent."""

    code = "budget_exceeded"


class PolicyDenied(RunError):
    """A capability, contract or profile rule refused an action, and the run could not go on
    without it (a workflow's tool step; a model's tool call gets the refusal as its result)."""

    code = "policy_denied"


class PathRefused(PolicyDenied):
    """A path that no capability can allow: it leaves the project root or does not read as itself."""


class PathChanged(PathRefused):
    """A path checked by ``confine`` became a symbolic link before it was opened."""


class UrlRefused(PolicyDenied):
    """A URL refused before the allowlist is consulted."""


class ConversationTooLarge(RunError):
    """A message that would take its conversation past ``store.max_conversation_bytes``.

    Nothing of the message ran; the conversation is as it was. A new conversation (no
    ``contextId``, a new ACP session) starts from empty.
    """

    code = "conversation_too_large"


class ConversationNotYours(PolicyDenied):
    """A message into a conversation another caller started (a conversation has one caller)."""


class ContractViolation(RunError):
    """The final answer broke the agent's contract (``on_violation: fail``, or no retry left)."""

    code = "contract_violation"


class ApprovalRejected(RunError):
    """A person rejected what the run needed: a workflow's gate, the approval of a workflow's tool
    step, or the answer to its ask (declined). A model's rejected tool call only tells the model."""

    code = "approval_rejected"
    rejects = True


class ApprovalTimedOut(ApprovalRejected):
    """An approval waited longer than the profile allows and ``on_timeout`` is ``fail``: the run
    fails (nobody rejected it)."""

    rejects = False


class SpecError(CAError):
    """The project's YAML is invalid. Carries every diagnostic found, not just the first."""

    code = "spec_invalid"
    exit_code = 2

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__(self.summary(), data={"diagnostics": [d.to_json() for d in self.errors]})

    @property
    def errors(self) -> Sequence[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def summary(self) -> str:
        n = len(self.errors)
        first = self.errors[0].render() if self.errors else ""
        return f"{n} error{'s' if n != 1 else ''} in the project\n{first}"


class Signal(Exception):
    """Control flow, not a failure: a handler that catches ``Exception`` re-raises it (as
    LangGraph's handlers re-raise ``GraphBubbleUp``)."""

    code: ClassVar[FailureCode] = "cancelled"


class Cancelled(Signal):
    """The user or a transport stopped the run (Ctrl-C, A2A CancelTask, ACP session/cancel, or a
    permission request the user cancelled)."""

    code = "cancelled"


@dataclass(frozen=True, slots=True)
class Failure:
    """How a run failed, built from the exception's type where it happened, never from its text.

    ``kind`` is the error class (``"PathRefused"``), ``code`` its stable machine code
    (``"policy_denied"``), ``data`` what a program needs besides the message.
    """

    kind: str
    code: FailureCode
    message: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, exc: CAError | Signal) -> Failure:
        data = exc.data if isinstance(exc, CAError) else {}
        return cls(type(exc).__name__, exc.code, str(exc), dict(data))

    @property
    def rejected(self) -> bool:
        """Whether the run ends ``rejected``: its error's class says a person said no (``rejects``)."""
        known = _error_class(self.kind)
        return known is not None and known.rejects

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "code": self.code, "message": self.message, "data": dict(self.data)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Failure:
        """A failure as :meth:`to_json` wrote it (a checkpoint may hold one without ``code``)."""
        kind = str(value.get("kind", "RunError"))
        known = _error_class(kind)
        code = value.get("code") or (known.code if known is not None else RunError.code)
        data = value.get("data")
        return cls(kind, code, str(value.get("message", "")), dict(data) if isinstance(data, Mapping) else {})

    def error(self) -> CAError:
        """The typed error again, e.g. for a caller that re-raises its callee's failure as it was."""
        known = _error_class(self.kind)
        if known is None or known.__init__ is not CAError.__init__:  # SpecError is built from diagnostics
            return RunError(self.message, data=self.data)
        return known(self.message, data=self.data)


def _error_class(name: str) -> type[CAError] | None:
    """The class of the tree named ``name`` (subclasses defined anywhere count)."""
    todo: list[type[CAError]] = [CAError]
    while todo:
        cls = todo.pop()
        if cls.__name__ == name:
            return cls
        todo.extend(cls.__subclasses__())
    return None
