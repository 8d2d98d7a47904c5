"""The secret values of a project as the loader knows them, masked out of every diagnostic it reports.

A config error quotes the value it refuses (``base_url must be an http(s) URL, got '…'``), and
that value may have come from ``${FAKE_KEY}``: the loader masks every diagnostic before it
reaches a terminal, ``--json``, an editor (ACP) or a log. It runs before any runtime opens, so
the process's set of secrets (``framework.runtime.governance.secrets.KNOWN``) is not filled yet.
:func:`secret_values` is the one rule of what a project's secrets are: the runtime fills ``KNOWN``
with it when it opens the project.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from framework.errors import Diagnostic
from framework.spec.interpolate import SECRET_NAME

if TYPE_CHECKING:
    from framework.spec.project import Project

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter values are never masked: masking ``"1"`` or ``"on"`` would mangle text, hiding nothing."""
MIN_AMBIENT_CHARS = 8
"""Shorter values of secret-looking variables the project does not name are left alone."""


@functools.lru_cache(maxsize=64)
def pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    """One regular expression matching every value of ``secrets`` long enough to mask, the longest
    first (a secret holding another is masked whole); None for none."""
    values = sorted((s for s in secrets if len(s) >= MIN_SECRET_CHARS), key=lambda s: (-len(s), s))
    if not values:
        return None
    return re.compile("|".join(re.escape(v) for v in values))


def _named(environ: Mapping[str, str], name: str | None) -> list[str]:
    """The value(s) of variable ``name``: comma-separated lists (``server.auth``) count one by one."""
    raw = environ.get(name or "", "")
    return [raw, *(part.strip() for part in raw.split(","))] if raw else []


def secret_values(project: Project, environ: Mapping[str, str], dotenv: Mapping[str, str]) -> set[str]:
    """Every secret value of ``project`` read in ``environ`` (the process environment over ``dotenv``):
    the interpolated ones, those of secret-looking variables, and those of the variables the
    project names as credentials (also of a project whose files have errors: what of it is valid)."""
    found = set(project.secrets)
    found |= {value for name, value in dotenv.items() if SECRET_NAME.search(name)}
    found |= {value for name, value in environ.items() if SECRET_NAME.search(name) and len(value) >= MIN_AMBIENT_CHARS}
    config = project.config
    auth = config.server.auth
    if auth is not None:
        for identity in auth.identities():
            found.update(_named(environ, identity.env))
    for registry in config.registries:
        for variable in registry.headers_env.values():
            found.update(_named(environ, variable))
    for server in config.mcp_servers.values():
        for variable in server.headers_env.values():
            found.update(_named(environ, variable))
        found |= {value for name, value in server.env.items() if SECRET_NAME.search(name)}
    models = [config.defaults.model, config.evals.judge, *(getattr(a, "model", None) for a in project.agents.values())]
    for model in models:
        if model is not None and model.api_key_env:
            found.update(_named(environ, model.api_key_env))
    return {value for value in found if len(value) >= MIN_SECRET_CHARS}


def masked(diagnostics: Iterable[Diagnostic], secrets: Iterable[str]) -> list[Diagnostic]:
    """``diagnostics`` with every secret value in their message, hint, key path and source line as
    ``***`` (the longest first, so a secret holding another is masked whole). Their place and wording
    stay: on a source line where a secret written out before the caret was masked, the caret still
    names the column of the file, a few characters off the text shown."""
    diagnostics = list(diagnostics)
    found = pattern(frozenset(secrets))
    if found is None:
        return diagnostics

    def hide(text: str) -> str:
        return found.sub(MASK, text)

    return [
        replace(
            d,
            message=hide(d.message),
            hint=hide(d.hint),
            key_path=hide(d.key_path),
            source_line=None if d.source_line is None else hide(d.source_line),
        )
        for d in diagnostics
    ]
