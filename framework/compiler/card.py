"""An agent spec becomes an A2A Agent Card (a2a-sdk's protobuf ``AgentCard``)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from a2a.types import (
    AgentCapabilities,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.types import AgentCard as AgentCard  # re-exported: the type of a built card, for the Bundle's cache
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from framework import __version__
from framework.spec.agent import AgentSpec, LlmAgent
from framework.spec.project import Project
from framework.spec.skill import Skill
from framework.spec.tools import AgentSelector, AgentTool, BuiltinTool, McpTool, PythonTool

EXTENSION_URI = "urn:cleveragents:extensions:v1"
"""Declares the `_cleveragents/*` platform methods and the approval payload of input-required tasks."""
PROTOCOL_VERSION = "1.0"
LEGACY_PROTOCOL_VERSION = "0.3.0"
"""The older A2A version the same endpoints also answer (a2a-sdk's v0.3 compatibility)."""


def agent_digest(agent: AgentSpec) -> str:
    """A short content hash of the agent's spec: changes whenever its YAML means something else."""
    data = json.dumps(agent.model_dump(mode="json"), sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:12]


def agent_url(base_url: str, name: str) -> str:
    """Where an agent's JSON-RPC endpoint is under a server's base URL."""
    return f"{base_url.rstrip('/')}/agents/{name}/"


def security(project: Project) -> dict[str, Any]:
    """Card fields declaring ``server.auth``: securitySchemes and the requirement (either scheme)."""
    auth = project.config.server.auth
    if auth is None:
        return {}
    schemes: dict[str, SecurityScheme] = {}
    kinds = {identity.kind for identity in auth.identities()}
    if "bearer" in kinds:
        schemes["bearer"] = SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer", description="A bearer token")
        )
    if "api_key" in kinds:
        schemes["apiKey"] = SecurityScheme(
            api_key_security_scheme=APIKeySecurityScheme(
                location="header", name=auth.api_key_header, description="An API key"
            )
        )
    requirements = [SecurityRequirement(schemes={name: StringList(list=[])}) for name in schemes]
    return {"security_schemes": schemes, "security_requirements": requirements}


def public_card(card: AgentCard) -> AgentCard:
    """What unauthenticated callers see when auth is on: no examples, no extension params."""
    public = AgentCard()
    public.CopyFrom(card)
    for skill in public.skills:
        del skill.examples[:]
    for extension in public.capabilities.extensions:
        extension.ClearField("params")
    public.capabilities.extended_agent_card = True
    return public


def build_card(agent: AgentSpec, project: Project, *, base_url: str | None = None) -> AgentCard:
    """The card of one agent. ``base_url`` is where the server is reached (default: ca.yaml's server)."""
    server = project.config.server
    base = base_url or server.public_url or f"http://{server.host}:{server.port}"
    url = agent_url(base, agent.name)
    skills = project.skills_of(agent) or [
        Skill(id=agent.name, name=agent.name, description=agent.description or f"Talk to {agent.name}")
    ]
    output_modes = ["text/plain"]
    if any(rule.output_schema is not None for rule in agent.contract.must_always):
        output_modes.append("application/json")
    params = Struct()
    params.update(_extension_params(agent, project))
    return AgentCard(
        name=agent.name,
        description=agent.description or f"The {agent.name} agent",
        version=f"{__version__}+{agent_digest(agent)}",
        supported_interfaces=interfaces(url),
        capabilities=AgentCapabilities(
            streaming=True,
            push_notifications=False,
            extensions=[
                AgentExtension(
                    uri=EXTENSION_URI,
                    description="CleverAgents platform methods (_cleveragents/*) and approval payloads",
                    required=False,
                    params=params,
                )
            ],
        ),
        default_input_modes=["text/plain"],
        default_output_modes=output_modes,
        **security(project),
        skills=[
            AgentSkill(
                id=s.id,
                name=s.name or s.id,
                description=s.description or s.name or s.id,
                tags=list(s.tags) or [agent.name],  # A2A requires at least one tag
                examples=list(s.examples),
            )
            for s in skills
        ],
    )


def interfaces(url: str) -> list[AgentInterface]:
    """The interfaces of an agent whose JSON-RPC endpoint is ``url``: v1.0 first, then v0.3.

    Both versions answer on the same endpoints (v0.3 for requests without ``A2A-Version: 1.0``).
    The v0.3 entries make a2a-sdk's card route add the v0.3 top-level fields (``url``,
    ``preferredTransport``, ``protocolVersion``, ``additionalInterfaces``), so a v0.3 client
    reads the card too; a v1.0 client picks the 1.0 entries.
    """
    rest = f"{url}rest"
    return [
        AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION),
        AgentInterface(url=rest, protocol_binding="HTTP+JSON", protocol_version=PROTOCOL_VERSION),
        AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=LEGACY_PROTOCOL_VERSION),
        AgentInterface(url=rest, protocol_binding="HTTP+JSON", protocol_version=LEGACY_PROTOCOL_VERSION),
    ]


def _extension_params(agent: AgentSpec, project: Project) -> dict[str, Any]:
    config = project.config
    params: dict[str, Any] = {
        "kind": agent.kind,
        "profile": agent.profile or config.defaults.profile or "",
    }
    if isinstance(agent, LlmAgent):
        model = agent.model or config.defaults.model
        params["model"] = model.label() if model else "offline"
        params["tools"] = [_tool_label(t) for t in agent.tools]
    return params


def _tool_label(tool: BuiltinTool | PythonTool | AgentTool | AgentSelector | McpTool) -> str:
    if isinstance(tool, BuiltinTool):
        return tool.builtin
    if isinstance(tool, PythonTool):
        return tool.name or tool.function
    if isinstance(tool, AgentTool):
        return f"agent:{tool.agent}"
    if isinstance(tool, McpTool):
        return f"mcp:{tool.mcp}"
    return "agents:" + ",".join(tool.agents.tags)


def card_to_json(card: AgentCard) -> dict[str, Any]:
    """The card as served: A2A v1.0 JSON (camelCase keys) with the v0.3 fields a v0.3 client reads.

    The v0.3 form (a2a-sdk's ``to_compat_agent_card``) fills in what v1.0 lacks: the top-level
    ``url``, ``preferredTransport``, ``protocolVersion`` and ``additionalInterfaces``, and the v0.3
    shape of each security scheme, as a2a-sdk's card route does.
    """
    from a2a.compat.v0_3.conversions import to_compat_agent_card  # 0.25 s: only where a card is printed

    result: dict[str, Any] = json_format.MessageToDict(card)
    legacy = to_compat_agent_card(card).model_dump(mode="json", by_alias=True, exclude_none=True)
    if not legacy.get("supportsAuthenticatedExtendedCard"):
        legacy.pop("supportsAuthenticatedExtendedCard", None)
    _fill_missing(result, legacy)
    return result


def _fill_missing(target: Any, extra: Any) -> None:
    """Add to ``target`` what ``extra`` has and ``target`` lacks, in nested objects and lists alike."""
    if isinstance(target, dict) and isinstance(extra, dict):
        for key, value in extra.items():
            if key not in target:
                target[key] = value
            else:
                _fill_missing(target[key], value)
    elif isinstance(target, list) and isinstance(extra, list):
        for mine, theirs in zip(target, extra, strict=False):
            _fill_missing(mine, theirs)
