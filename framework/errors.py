"""The one exception tree of CleverAgents.

    CAError                      anything the framework reports to a user
    ├── SpecError                the project's files are invalid; carries every Diagnostic
    ├── UsageError               a wrong CLI argument or option value
    ├── ModelError               a model cannot be built or called (missing extra, unset key, server down)
    ├── ToolError                a tool cannot be loaded (bad python tool); at run time tool failures
    │                            go back to the model as error results instead
    ├── RunError                 a run failed (unknown agent, workflow step failed, ...)
    └── StoreError               a state database under .ca/ is damaged (not a database, corrupt,
                                 a table missing); the message names the file and what to do

Foreign exceptions are translated where they enter (``raise SpecError(...) from exc``);
the CLI maps this tree to messages and exit codes in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


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
    """Base of every error CleverAgents reports to a user (never shown with a traceback)."""

    exit_code = 1


class UsageError(CAError):
    """A command-line argument or option the user must change."""

    exit_code = 2


class ModelError(CAError):
    """A chat model cannot be built or reached; the message says what to install or set."""

    exit_code = 1


class ToolError(CAError):
    """A tool cannot be loaded or built (e.g. a python tool that fails to import)."""

    exit_code = 1


class RunError(CAError):
    """A run cannot start or failed for a reason the user can act on."""

    exit_code = 1


class StoreError(CAError):
    """A state database cannot be used as it is (corrupt, not a database, a table missing).

    Raised where the database driver's error enters, so no caller sees ``sqlite3`` errors.
    """

    exit_code = 1


class SpecError(CAError):
    """The project's YAML is invalid. Carries every diagnostic found, not just the first."""

    exit_code = 2

    def __init__(self, diagnostics: Iterable[Diagnostic]) -> None:
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        super().__init__(self.summary())

    @property
    def errors(self) -> Sequence[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    def summary(self) -> str:
        n = len(self.errors)
        first = self.errors[0].render() if self.errors else ""
        return f"{n} error{'s' if n != 1 else ''} in the project\n{first}"
