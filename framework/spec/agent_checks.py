"""Checks that an agent's parts fit together: its skills, tools, capabilities, contract and model.

Errors are contradictions a run cannot get past (a contract that demands a tool the agent does
not have, a tag selector nothing can match); warnings are what depends on the environment (an
unset variable, a registry found at run time) or is refused at run time without stopping the
agent (a tool its capabilities never allow: the model is told "denied").
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Protocol

from framework.errors import Severity
from framework.spec.agent import AgentSpec, LlmAgent
from framework.spec.capabilities import Capabilities
from framework.spec.common import did_you_mean, text_glob
from framework.spec.model import ModelConfig
from framework.spec.prices import known_price
from framework.spec.project import Project, auth_variables
from framework.spec.tools import BUILTIN_TOOLS, AgentSelector, AgentTool, BuiltinTool, PythonTool

Path_ = tuple[str | int, ...]
OFFLINE = ModelConfig(provider="offline")
AZURE_VERSION_VARIABLE = "OPENAI_API_VERSION"
"""Where the Azure OpenAI client looks for the API version when ``params`` has none."""


class Reporter(Protocol):
    def report(
        self,
        owner: str,
        path: Path_,
        message: str,
        *,
        hint: str = "",
        key: bool = False,
        severity: Severity = "error",
        offset: int = 0,
    ) -> None: ...


def tool_names(agent: LlmAgent) -> set[str] | None:
    """The names the agent's tools are called by (as contracts and profiles match them); None when
    a tag selector makes the set known only at run time."""
    names: set[str] = set()
    for tool in agent.tools:
        if isinstance(tool, AgentSelector):
            return None
        if isinstance(tool, PythonTool):
            names.add(tool.name or tool.function)
        elif isinstance(tool, AgentTool):
            names.add(tool.agent)
        elif isinstance(tool, BuiltinTool):
            names.add(tool.builtin)
    return names


def check_skill_ids(r: Reporter, owner: str, agent: AgentSpec) -> None:
    """Two skills of one agent with the same id would be two identical entries in its card."""
    first: dict[str, int] = {}
    for i, skill in enumerate(agent.skills):
        skill_id, path = (skill, ("skills", i)) if isinstance(skill, str) else (skill.id, ("skills", i, "id"))
        if skill_id in first:
            r.report(
                owner,
                path,
                f"duplicate skill id {skill_id!r} in this agent",
                hint=f"skills[{first[skill_id]}] has it already; give each skill its own id",
            )
        first.setdefault(skill_id, i)


def check_contract(r: Reporter, owner: str, agent: AgentSpec, names: Set[str] | None) -> None:
    """``tool_called`` must name a tool the agent has; a required pattern must require something."""
    for i, rule in enumerate(agent.contract.must_always):
        path = ("contract", "must_always", i)
        if rule.tool_called is not None and names is not None:
            pattern = text_glob(rule.tool_called)
            if not any(pattern.fullmatch(name) for name in names):
                r.report(
                    owner,
                    (*path, "tool_called"),
                    f"the contract requires a call of {rule.tool_called!r}, a tool the agent does not have, "
                    "so every run would break it",
                    hint=did_you_mean(rule.tool_called, names)
                    or f"the agent's tools: {', '.join(sorted(names)) or 'none'}",
                )
        if rule.output_matches is not None and rule.output_matches.search(""):
            r.report(
                owner,
                (*path, "output_matches"),
                f"must_always `output_matches` {rule.output_matches.pattern!r} matches an empty text, "
                "so every output satisfies it",
                hint="make the pattern need what the output must contain (e.g. '+' instead of '*')",
                severity="warning",
            )


def check_selectors(r: Reporter, owner: str, agent: LlmAgent, project: Project, complete: bool) -> None:
    """A tag selector that no agent of the project matches.

    ``complete``: every agent file validated in full (otherwise a match may be in a broken file).
    """
    if not complete:
        return
    for i, tool in enumerate(agent.tools):
        if not isinstance(tool, AgentSelector):
            continue
        wanted = set(tool.agents.tags)
        if any(name != agent.name and wanted <= _tags(other, project) for name, other in project.agents.items()):
            continue
        tags = ", ".join(tool.agents.tags)
        if project.config.registries:
            r.report(
                owner,
                ("tools", i, "agents", "tags"),
                f"no other agent of the project has skills tagged [{tags}]; only an agent of a registry "
                "can match, if one lists it when the agent starts",
                hint="check the tags against `ca agents list`",
                severity="warning",
            )
        else:
            r.report(
                owner,
                ("tools", i, "agents", "tags"),
                f"no other agent has skills tagged [{tags}], so this selector gives no tool",
                hint="tag a skill of the agent to call (skills: [{id: ..., tags: [...]}]) or add a registry to ca.yaml",
            )


def _tags(agent: AgentSpec, project: Project) -> set[str]:
    skills = [project.skills.get(s) if isinstance(s, str) else s for s in agent.skills]
    return {tag for skill in skills if skill is not None for tag in skill.tags}


def check_capabilities(
    r: Reporter, owner: str, agent: LlmAgent, caps: Capabilities | None, agents: Set[str] | Mapping[str, object]
) -> None:
    """Warn about each tool the capabilities in force never allow (every call would be denied).

    ``agents``: the project's agents (a call to an unknown one is reported as unknown instead)."""
    for i, tool in enumerate(agent.tools):
        path: Path_ = ("tools", i)
        if isinstance(tool, BuiltinTool):
            check_builtin(r, owner, path, tool.builtin, caps, own=agent.capabilities is not None)
        elif isinstance(tool, AgentTool) and not tool.is_remote:
            if tool.agent in agents and (caps is None or tool.agent not in caps.agents):
                r.report(
                    owner,
                    (*path, "agent"),
                    f"agent {tool.agent!r} is not in capabilities.agents, so every call to it is denied",
                    hint=f"add it: capabilities: {{agents: [{tool.agent}]}}",
                    severity="warning",
                )
        elif isinstance(tool, AgentTool) and (caps is None or not caps.network.allow):
            r.report(
                owner,
                (*path, "agent"),
                f"remote agent {tool.agent!r} can never be called: no network host is allowed",
                hint="add its host to capabilities.network.allow",
                severity="warning",
            )


def check_builtin(
    r: Reporter, owner: str, path: Path_, builtin: str, caps: Capabilities | None, *, own: bool, what: str = "tool"
) -> None:
    """Warn when ``caps`` (the agent's own, or ca.yaml's defaults) can never allow the builtin ``builtin``."""
    missing = _missing_grant(builtin, caps)
    if missing is None:
        return
    where = "the agent's capabilities" if own else "ca.yaml's defaults.capabilities"
    r.report(
        owner,
        path,
        f"{what} {builtin!r} can never run: {where} allow no {missing[0]}"
        if caps
        else f"{what} {builtin!r} can never run: the agent has no capabilities (nor has ca.yaml "
        "defaults.capabilities), and nothing unlisted is allowed",
        hint=f"add capabilities: {missing[1]}, or remove the {what}",
        severity="warning",
    )


def _missing_grant(builtin: str, caps: Capabilities | None) -> tuple[str, str] | None:
    """(what is missing, the YAML that grants it) when ``caps`` can never allow ``builtin``."""
    capability = BUILTIN_TOOLS[builtin]
    if capability == "fs.read" and not (caps and (caps.fs.read or caps.fs.write)):
        return "file reads", "{fs: {read: ['src/**']}}"
    if capability == "fs.write" and not (caps and caps.fs.write):
        return "file writes", "{fs: {write: ['out/**']}}"
    if capability == "shell" and not (caps and caps.shell.allow):
        return "commands", "{shell: {allow: ['pytest *']}}"
    if capability == "network" and not (caps and caps.network.allow):
        return "network hosts", "{network: {allow: ['api.example.com']}}"
    return None


def check_model(r: Reporter, owner: str, agent: LlmAgent, project: Project, environ: Mapping[str, str]) -> None:
    """Key variables, Azure's API version and prices of the model in force (a warning about the
    model ca.yaml sets points at ca.yaml)."""
    defaults = project.config.defaults
    model = agent.model or defaults.model or OFFLINE
    model_at: tuple[str, Path_] = (
        (owner, ("model",)) if agent.model else ("project", ("defaults", "model")) if defaults.model else (owner, ())
    )
    variable = model.key_variable
    if variable and not environ.get(variable):
        r.report(
            *model_at,
            f"{variable} is not set; model {model.label()!r} will fail at run time",
            hint=f"export {variable}=... or put it in .env",
            severity="warning",
        )
    if (
        model.provider == "azure_openai"
        and "api_version" not in model.params
        and not environ.get(AZURE_VERSION_VARIABLE)
    ):
        r.report(
            *model_at,
            f"model {model.label()!r} has no API version; Azure OpenAI refuses requests without one",
            hint=f"add params: {{api_version: '2024-10-21'}} to the model, or export {AZURE_VERSION_VARIABLE}",
            severity="warning",
        )
    budget = agent.budget or defaults.budget
    if budget and budget.max_cost_usd is not None and not known_price(model.label(), project.config.prices):
        budget_at: tuple[str, Path_] = (
            (owner, ("budget", "max_cost_usd")) if agent.budget else ("project", ("defaults", "budget", "max_cost_usd"))
        )
        r.report(
            *budget_at,
            f"no known price for model {model.label()!r}; the cost budget cannot be enforced",
            hint=f"add it to ca.yaml: prices: {{{model.label()!r}: {{input_per_mtok: ..., output_per_mtok: ...}}}}",
            severity="warning",
        )


def check_auth(r: Reporter, project: Project, environ: Mapping[str, str]) -> None:
    """Warn about each ``server.auth`` variable that is unset: `ca serve` would accept no credential."""
    auth = project.config.server.auth
    for path, variable in auth_variables(auth) if auth else []:
        if not environ.get(variable):
            r.report(
                "project",
                ("server", "auth", *path),
                f"{variable} is not set; `ca serve` refuses to start until it holds the credentials",
                hint=f"export {variable}=...{' (comma-separated values)' if len(path) == 1 else ''} or put it in .env",
                severity="warning",
            )
