"""Settings read once at start-up: a reload keeps their start-up values and says which the files change.

The Runtime applies ``pinned`` to every project it reloads and keeps ``needs_restart``'s list, which
``ca serve --reload`` prints and ``_cleveragents/diagnostics`` returns under ``restart``.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from framework.spec.project import ProjectConfig

RESTART_ONLY = (
    "server.host",
    "server.port",
    "server.public_url",
    "server.auth",
    "server.max_request_bytes",
    "store.url",
    "store.lock_timeout",
    "audit.key_env",
)
"""ca.yaml settings read once at start-up: a reload keeps their start-up values (see ``pinned``).

``server.auth`` is one of them so that an edit can never open the server: with the address it is
bound to, it decided at start-up whether serving was allowed at all."""


def _shown(value: object) -> str:
    """A setting's value for the notice: sub-sections as compact JSON (they hold variable names, never secrets)."""
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", exclude_defaults=True), separators=(",", ":"))
    return str(value)


def needs_restart(started: ProjectConfig, now: ProjectConfig) -> list[str]:
    """The settings of ``RESTART_ONLY`` that differ between the running config and the files."""
    changed = []
    for setting in RESTART_ONLY:
        section, name = setting.split(".")
        before, after = getattr(getattr(started, section), name), getattr(getattr(now, section), name)
        if before != after:
            changed.append(f"{setting} ({_shown(before)} -> {_shown(after)})")
    return changed


def pinned(started: ProjectConfig, now: ProjectConfig) -> ProjectConfig:
    """``now`` with every setting of ``RESTART_ONLY`` as it was at start-up.

    The Runtime swaps in bundles built from this config, so every reader (routes, cards, limits,
    authentication) sees the values the process actually runs with, never the files' new ones.
    """
    sections: dict[str, dict[str, object]] = {}
    for setting in RESTART_ONLY:
        section, name = setting.split(".")
        sections.setdefault(section, {})[name] = getattr(getattr(started, section), name)
    return now.model_copy(
        update={section: getattr(now, section).model_copy(update=values) for section, values in sections.items()}
    )
