"""Deployment settings from the environment: ``CA_STORE_URL``, ``CA_HOST``, ``CA_PORT`` …

One pydantic-settings model, :class:`Deployment`. ``ca.yaml`` holds the defaults, a variable
set here wins over it, and a command-line flag (``ca serve --port``) wins over both. The loader
applies the variables to the project's config once, when the project is loaded
(:func:`deployed`), so every reader of ``project.config.store.url`` or ``server.*`` sees them.
``CA_LOG_FORMAT`` has no ``ca.yaml`` key: how a process logs is not a fact of the project.

Telemetry has no variable of ours: the standard ``OTEL_*`` variables switch it
(framework.runtime.otel_switch, docs/observability.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from framework.errors import Diagnostic, SpecError
from framework.spec.common import Duration
from framework.spec.project import SETTINGS_PREFIX, HttpUrl, LogFormat, Port, ProjectConfig, StoreUrl
from framework.spec.urls import hidden


class Deployment(BaseSettings):
    """What a deployment sets per process; unset (or empty) leaves ``ca.yaml``'s value."""

    model_config = SettingsConfigDict(env_prefix=SETTINGS_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True)

    store_url: StoreUrl | None = Field(
        default=None,
        description="Where the state is kept: sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB.",
        json_schema_extra={"overrides": "store.url"},
    )
    host: str | None = Field(
        default=None,
        min_length=1,
        description="Address `ca serve` binds (0.0.0.0 in a container: then server.auth is required).",
        json_schema_extra={"overrides": "server.host"},
    )
    port: Port | None = Field(
        default=None, description="Port `ca serve` listens on.", json_schema_extra={"overrides": "server.port"}
    )
    public_url: HttpUrl | None = Field(
        default=None,
        description="The URL clients use (the load balancer's), advertised in the agent cards.",
        json_schema_extra={"overrides": "server.public_url"},
    )
    shutdown_timeout: Duration | None = Field(
        default=None,
        description="On SIGTERM, how long running tasks may take to finish (e.g. 30s) before they are canceled.",
        json_schema_extra={"overrides": "server.shutdown_timeout"},
    )
    task_lease: Duration | None = Field(
        default=None,
        description="How long a running task's lease lasts (e.g. 15s); renewed every third of it, and a dead"
        " replica's tasks are ended failed by another once it expired.",
        json_schema_extra={"overrides": "store.task_lease"},
    )
    log_format: LogFormat = Field(
        default="human",
        description="human: lines for people; json: one JSON object per line on stderr (`--log-format`).",
    )


def variable(field: str) -> str:
    """The environment variable of a :class:`Deployment` field (``store_url`` -> ``CA_STORE_URL``)."""
    return SETTINGS_PREFIX + field.upper()


def overrides(field: str) -> str | None:
    """The ``ca.yaml`` key a field overrides (``store.url``), or None for a process setting."""
    extra = Deployment.model_fields[field].json_schema_extra
    found = extra.get("overrides") if isinstance(extra, dict) else None
    return str(found) if found is not None else None


class _Environment(EnvSettingsSource):
    """pydantic-settings' own environment source, reading a given mapping instead of ``os.environ``
    (``load_project(environ=...)`` checks a project against an environment other than the process's)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(Deployment)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


def read(environ: Mapping[str, str]) -> Deployment:
    """The settings ``environ`` gives; a bad value raises SpecError naming its variable."""
    try:
        return Deployment(_build_sources=((_Environment(environ),), {}))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            name = variable(str(error["loc"][0]))
            value = environ.get(name, "")
            shown = hidden(value)  # a store URL may carry a password: the message reaches a terminal or a log
            message = f"{name}={shown!r}: {error['msg'].replace(value, shown)}; fix or unset {name}"
            problems.append(Diagnostic("environment", 0, 0, message))
        raise SpecError(problems) from None


def deployed(config: ProjectConfig, environ: Mapping[str, str]) -> ProjectConfig:
    """``config`` with the values the environment sets (validated: they meet ``ca.yaml``'s rules)."""
    settings = read(environ)
    sections: dict[str, dict[str, Any]] = {}
    for field in settings.model_fields_set:
        key = overrides(field)
        if key is not None:
            section, name = key.split(".")
            sections.setdefault(section, {})[name] = getattr(settings, field)
    if not sections:
        return config
    update = {section: getattr(config, section).model_copy(update=values) for section, values in sections.items()}
    return config.model_copy(update=update)
