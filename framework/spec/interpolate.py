"""``${VAR}`` and ``${VAR:-default}`` in string values, from the environment and ``.env``.

``$${`` writes a literal ``${``. An undefined variable without a default is an error at
the exact column of its ``${``. Values of variables whose names look secret are
remembered so that later layers can mask them in logs and the audit.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from framework.errors import Diagnostic
from framework.spec.env_file import parse_env_file
from framework.spec.source import Loc, diag, read_text

_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE", re.IGNORECASE)
"""A variable whose name matches this holds a secret: its value is masked wherever text leaves the process."""


def load_dotenv(root: Path) -> dict[str, str]:
    """Variables from ``ROOT/.env`` (the process environment wins over them).

    Raises SourceError for a file that is not UTF-8 text or is too large.
    """
    path = root / ".env"
    if not path.is_file():
        return {}
    return parse_env_file(read_text(path), os.environ)


class Interpolator:
    """Substitutes variables; collects diagnostics and secret values as it goes."""

    def __init__(self, dotenv: Mapping[str, str], environ: Mapping[str, str] | None = None) -> None:
        self.variables = {**dotenv, **(os.environ if environ is None else environ)}
        self.diagnostics: list[Diagnostic] = []
        self.secrets: set[str] = set()
        self.used: set[str] = set()
        self.failed: set[tuple[str, int, int]] = set()
        """(file, line, column) of values left with a ``${...}`` that could not be substituted."""

    def __call__(self, value: str, loc: Loc, raw: str) -> str:
        if "$" not in value:
            return value
        return _REF.sub(lambda m: self._replace(m, loc, raw), value)

    def _replace(self, match: re.Match[str], loc: Loc, raw: str) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        body = match.group(1)
        if not token.endswith("}"):
            self._error(loc, raw, token, f"unclosed variable reference {token!r}", "close it with '}'")
            return token
        name, sep, default = body.partition(":-")
        if not _NAME.fullmatch(name):
            self._error(
                loc,
                raw,
                token,
                f"invalid variable reference {token!r}",
                "write ${NAME} or ${NAME:-default}; names are letters, digits and '_'",
            )
            return token
        self.used.add(name)
        if name in self.variables:
            result = self.variables[name]
        elif sep:
            result = default
        else:
            self._error(
                loc,
                raw,
                token,
                f"environment variable {name!r} is not set",
                f"set {name} in the environment or in .env, or give a default: ${{{name}:-value}}",
            )
            return token
        if result and SECRET_NAME.search(name):
            self.secrets.add(result)
        return result

    def _error(self, loc: Loc, raw: str, token: str, message: str, hint: str) -> None:
        self.failed.add((str(loc.file), loc.line, loc.column))
        self.diagnostics.append(diag(_token_loc(loc, raw, token), message, hint=hint))


def _token_loc(start: Loc, raw: str, token: str) -> Loc:
    """The exact position of ``token`` inside a scalar's raw source text."""
    index = raw.find(token)
    if index < 0:
        return start
    before = raw[:index]
    newlines = before.count("\n")
    if newlines == 0:
        # ``start`` is inside the quotes already; ``raw`` begins at the opening quote.
        quoted = raw[:1] in ("'", '"')
        return Loc(start.file, start.line, start.column + index - (1 if quoted else 0))
    return Loc(start.file, start.line + newlines, index - before.rfind("\n"))
