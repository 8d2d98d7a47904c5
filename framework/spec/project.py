"""A project: ``ca.yaml`` (the optional project file) and :class:`Project`, the validated whole."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from framework.errors import Diagnostic
from framework.spec.agent import AgentSpec
from framework.spec.budget import Budget
from framework.spec.capabilities import Capabilities, EnvName
from framework.spec.common import Duration, Money, Name, Spec, Version, fail
from framework.spec.mcp import McpServer
from framework.spec.model import ModelConfig
from framework.spec.profile import Profile
from framework.spec.skill import Skill, SkillFile
from framework.spec.urls import hidden


def _check_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise fail("url", "expected an http(s) URL, got {value!r}", value=value)
    return value.rstrip("/")


HttpUrl = Annotated[str, AfterValidator(_check_url)]


def _check_origin_url(value: str) -> str:
    """An http(s) URL with a host and a valid port, and no credentials in it (its origin is where headers go)."""
    value = _check_url(value)
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:  # the message must not repeat a password
        raise fail(
            "url",
            "a registry URL must not hold a user name or password (before '@'): name the variable "
            "holding the credential in headers_env instead",
        )
    try:
        port = parts.port  # urlsplit checks the port only when it is read
    except ValueError:
        port = 0  # out of range or not a number: reported just below
    if port == 0:
        raise fail("url", "{value!r} has no valid port (a number from 1 to 65535 after the host)", value=value)
    if not parts.hostname:
        raise fail("url", "{value!r} has no host", value=value)
    return value


OriginUrl = Annotated[str, AfterValidator(_check_origin_url)]


class Defaults(Spec):
    """Values for agents that do not set their own."""

    model: ModelConfig | None = None
    profile: Name | None = None
    budget: Budget | None = None
    capabilities: Capabilities | None = None


class Price(Spec):
    input_per_mtok: Money = Field(description="US dollars per million input tokens.")
    output_per_mtok: Money = Field(description="US dollars per million output tokens.")


Role = Literal["caller", "approver"]
"""What a credential may do: a ``caller`` sends messages and sees its own tasks; an ``approver`` lists
and decides every task's pending approvals and reads the whole audit."""

RESERVED_CALLERS = ("acp", "anonymous")
"""Names the server gives callers that present no credential (the editor over ACP, a server without auth)."""


def _only_caller() -> list[Role]:
    return ["caller"]


class Credential(Spec):
    """One named caller of ``ca serve``: where its secret is, and what it may do."""

    name: Name = Field(description="Who the caller is: the owner of its tasks and the name in the audit.")
    token_env: EnvName | None = Field(
        default=None, description="Variable holding its bearer token (comma-separated to rotate)."
    )
    api_key_env: EnvName | None = Field(
        default=None, description="Variable holding its API key (comma-separated to rotate)."
    )
    roles: list[Role] = Field(default_factory=_only_caller, min_length=1, description="caller, approver.")

    @model_validator(mode="after")
    def _one_secret(self) -> Self:
        if (self.token_env is None) == (self.api_key_env is None):
            raise fail("auth", "credential {name!r} needs exactly one of 'token_env' or 'api_key_env'", name=self.name)
        return self


@dataclass(frozen=True)
class Identity:
    """A credential as the server checks it: the caller's name, the variable, the header kind, the roles."""

    name: str
    env: str
    kind: Literal["bearer", "api_key"]
    roles: tuple[Role, ...]
    declared: str
    """Where it is declared, for messages (``server.auth.credentials[0].token_env``)."""


class AuthConfig(Spec):
    """Credentials are never written here, only the names of variables holding them.

    ``bearer_tokens_env`` and ``api_keys_env`` are the shared forms: every token (key) in the
    variable is one caller named after the variable, with both roles.
    """

    credentials: list[Credential] = Field(default_factory=list, description="Named callers, each with roles.")
    bearer_tokens_env: EnvName | None = Field(
        default=None, description="Variable with comma-separated tokens: one caller named after it, both roles."
    )
    api_keys_env: EnvName | None = Field(
        default=None, description="Variable with comma-separated API keys: one caller named after it, both roles."
    )
    api_key_header: str = "X-API-Key"

    @model_validator(mode="after")
    def _named_once(self) -> Self:
        if not self.credentials and self.bearer_tokens_env is None and self.api_keys_env is None:
            raise fail(
                "auth",
                "server.auth declares no credential: add 'credentials' (name, token_env or api_key_env, roles)"
                " or 'bearer_tokens_env' / 'api_keys_env'",
            )
        seen: set[str] = set()
        for index, credential in enumerate(self.credentials):
            where = ["credentials", index, "name"]
            if credential.name in RESERVED_CALLERS:
                raise fail(
                    "auth",
                    "credential name {name!r} is reserved for callers without a credential: choose another",
                    name=credential.name,
                    path=where,
                )
            if credential.name in seen:
                raise fail("auth", "duplicate credential name {name!r}", name=credential.name, path=where)
            seen.add(credential.name)
        return self

    def identities(self) -> list[Identity]:
        """Every credential, the shared forms included (each a caller named after its variable)."""
        both: tuple[Role, ...] = ("caller", "approver")
        found = [
            Identity(
                c.name,
                c.token_env or c.api_key_env or "",
                "bearer" if c.token_env else "api_key",
                tuple(dict.fromkeys(c.roles)),
                f"credentials[{i}].{'token_env' if c.token_env else 'api_key_env'}",
            )
            for i, c in enumerate(self.credentials)
        ]
        if self.bearer_tokens_env:
            found.append(Identity(self.bearer_tokens_env, self.bearer_tokens_env, "bearer", both, "bearer_tokens_env"))
        if self.api_keys_env:
            found.append(Identity(self.api_keys_env, self.api_keys_env, "api_key", both, "api_keys_env"))
        return found


def auth_variables(auth: AuthConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """Every environment variable ``auth`` reads credentials from: (key path below ``server.auth``, name).

    The one place that knows the shape of ``server.auth`` for checks such as "this variable is unset".
    """
    found: list[tuple[tuple[str | int, ...], str]] = []
    for index, credential in enumerate(auth.credentials):
        for key in ("token_env", "api_key_env"):
            if (name := getattr(credential, key)) is not None:
                found.append((("credentials", index, key), name))
    keys = ("bearer_tokens_env", "api_keys_env")
    return found + [((key,), name) for key in keys if (name := getattr(auth, key)) is not None]


Port = Annotated[int, Field(ge=1, le=65535)]


class ServerConfig(Spec):
    host: str = "127.0.0.1"
    port: Port = 8765
    public_url: HttpUrl | None = Field(default=None, description="External URL behind a proxy.")
    auth: AuthConfig | None = None
    max_request_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    shutdown_timeout: Duration = Field(
        default=30.0,
        description="On SIGTERM, how long running tasks may take to finish before they are canceled.",
    )
    retry_window: Duration | None = Field(
        default=86400.0,
        description=(
            "How long a message that starts a task is remembered by its messageId: a copy sent again within it"
            " (a client's retry) answers with the task the first copy started instead of running again."
            " null: every message runs."
        ),
    )


_STORE_SCHEMES = ("sqlite", "sqlite+aiosqlite", "postgresql", "postgresql+asyncpg", "postgresql+psycopg")


def _check_store_url(value: str) -> str:
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in _STORE_SCHEMES:
        raise fail(
            "store",
            "unsupported store URL {value!r}: use one of {schemes}",
            value=hidden(value),
            schemes=", ".join(f"{s}://" for s in _STORE_SCHEMES),
        )
    return value


StoreUrl = Annotated[str, AfterValidator(_check_store_url)]
"""``store.url``, and ``CA_STORE_URL`` that overrides it (framework.spec.settings)."""

SETTINGS_PREFIX = "CA_"
"""The prefix of the deployment settings' variables (framework.spec.settings)."""

SETTINGS_FIELDS = ("store_url", "host", "port", "public_url", "shutdown_timeout", "task_lease", "log_format")
"""The fields of the deployment settings (``framework.spec.settings.Deployment``; a test holds the two
equal), each read from ``CA_`` + its name in any case: the loader reads them, and imports
pydantic-settings, only when one is set. Other ``CA_`` variables (``CA_MODEL`` in a ``${...}``)
are not settings."""


def sets_deployment(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` sets a variable of the deployment settings (see :data:`SETTINGS_FIELDS`)."""
    return any(
        name[: len(SETTINGS_PREFIX)].upper() == SETTINGS_PREFIX
        and name[len(SETTINGS_PREFIX) :].lower() in SETTINGS_FIELDS
        for name in environ
    )


LogFormat = Literal["human", "json"]
"""How ``ca serve`` and ``ca run --stdio`` log (``--log-format``, ``CA_LOG_FORMAT``): see framework.runtime.logs."""


class StoreConfig(Spec):
    url: StoreUrl = Field(
        default="sqlite:///.ca/state.db",
        description=(
            "Where ca keeps every piece of state: SQLite under .ca/ by default; a postgresql:// URL puts the"
            " A2A task rows, the task records with their pending decisions, conversation turns, ACP sessions,"
            " the conversations and the audit chain in that database, shared by every `ca serve` replica"
            " that names it."
        ),
    )
    lock_timeout: Duration = Field(
        default=30.0,
        description=(
            "How long a request waits for another process's write lock on a SQLite file under .ca/ before it"
            " fails with store_busy (retryable; nothing of it is written)."
        ),
    )
    task_lease: Duration = Field(
        default=15.0,
        description=(
            "With a postgresql:// store.url: how long a running task's lease lasts; its replica renews it every"
            " third of this, and once it expired (the replica died) another replica ends the task failed."
        ),
    )
    max_conversation_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description=(
            "The most a conversation may hold (its messages and answers, in UTF-8 bytes): a message that would"
            " take it past this fails with conversation_too_large before anything runs; start a new conversation."
        ),
    )


class Registry(Spec):
    """A remote source of agents: a CleverAgents server or a single A2A agent."""

    name: Name
    url: OriginUrl
    headers_env: dict[str, EnvName] = Field(
        default_factory=dict,
        description="Header -> variable with its value; sent only to the URL's origin (scheme, host and port).",
    )


class RemoteCalls(Spec):
    """Calls to remote A2A agents."""

    timeout: Duration = Field(default=60.0, description="Deadline of one call (card, message, answer).")


class AuditConfig(Spec):
    """The audit log. Its key is never written here (nor in .env beside the log), only the variable's name."""

    key_env: EnvName | None = Field(
        default=None,
        description="Variable holding the key of a keyed (HMAC-SHA256) audit chain; unset: an unkeyed (SHA-256) chain.",
    )


class EvalSettings(Spec):
    """Settings of ``ca test``."""

    judge: ModelConfig | None = Field(
        default=None, description="The model that judges `expect.judged` criteria (recorded and replayed like any)."
    )


class ProjectConfig(Spec):
    version: Version = 1
    name: str | None = None
    description: str = ""
    default_agent: Name | None = None
    defaults: Defaults = Field(default_factory=Defaults)
    prices: dict[str, Price] = Field(
        default_factory=dict, description="'provider:model' -> price; wins over genai-prices' table."
    )
    server: ServerConfig = Field(default_factory=ServerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    registries: list[Registry] = Field(default_factory=list)
    remote: RemoteCalls = Field(default_factory=RemoteCalls)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    mcp_servers: dict[Name, McpServer] = Field(
        default_factory=dict, description="MCP servers by name; agents use them with `tools: [{mcp: NAME}]`."
    )

    @field_validator("mcp_servers")
    @classmethod
    def _not_client(cls, value: dict[str, McpServer]) -> dict[str, McpServer]:
        if "client" in value:
            raise fail(
                "mcp_server",
                "the MCP server name 'client' is reserved for the servers an editor passes (client.NAME.TOOL); "
                "choose another name",
            )
        return value

    evals: EvalSettings = Field(default_factory=EvalSettings)


@dataclass(frozen=True)
class Project:
    """A validated project: every spec, where it came from, and the warnings found."""

    root: Path
    config: ProjectConfig
    agents: Mapping[str, AgentSpec]
    profiles: Mapping[str, Profile]
    skills: Mapping[str, SkillFile]
    sources: Mapping[str, Path]
    """Agent, profile or skill name (``agent:NAME`` …) -> the file that defined it."""
    warnings: tuple[Diagnostic, ...] = ()
    secrets: frozenset[str] = field(default=frozenset(), repr=False)
    """Values interpolated from secret-looking variables: mask them wherever text is shown."""
    tool_files: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    """Each python tool file (``python: FILE:function``, by FILE as written) as it was validated:
    every compile of this project runs these bytes, never a later edit of the file."""

    @property
    def default_agent(self) -> str | None:
        if self.config.default_agent:
            return self.config.default_agent
        return next(iter(sorted(self.agents)), None)

    def skills_of(self, agent: AgentSpec) -> list[Skill]:
        """The agent's skills, with references to ``skills/NAME.yaml`` resolved.

        Here, not beside the Agent Card: ACP slash commands and MCP prompts list skills too, and
        must not load a2a-sdk's types (~150 ms) to do it."""
        return [self.skills[s] if isinstance(s, str) else s for s in agent.skills]

    def summary(self) -> str:
        kinds: dict[str, int] = {}
        for agent in self.agents.values():
            kinds[agent.kind] = kinds.get(agent.kind, 0) + 1
        detail = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        parts = [
            _plural(len(self.agents), "agent") + (f" ({detail})" if detail else ""),
            _plural(len(self.profiles), "profile"),
            _plural(len(self.skills), "skill"),
        ]
        if self.warnings:
            parts.append(_plural(len(self.warnings), "warning"))
        return ", ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
