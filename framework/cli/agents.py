"""``ca agents list`` (the registry view, the same as ``_cleveragents/registry/list``), ``ca agents
show NAME`` and the agent lines of ``ca validate --verbose``: what an agent is and the names its
tools reach the model under."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from framework.compiler.bundle import Bundle
    from framework.spec.project import Project


async def list_agents(project_dir: Path) -> list[dict[str, Any]]:
    from framework.protocols.a2a import open_remote
    from framework.protocols.a2a.platform import Platform
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project

    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(project_dir), stack=stack, remote=open_remote)
        result = await Platform(runtime).registry_list()
    agents: list[dict[str, Any]] = result["agents"]
    return agents


def describe_agent(project: Project, name: str) -> dict[str, Any]:
    """One agent: ``name``, ``kind``, ``description``, ``model``, ``profile``, ``skills`` and
    ``tools`` (each ``{name, tool, kind}``; ``name`` is what a model calls). Tag selectors list
    the project's matching agents (a registry's are known only once a run reads it)."""
    from framework.compiler.bundle import build_bundle

    return _described(build_bundle(project), name)


def _described(bundle: Bundle, name: str) -> dict[str, Any]:
    project = bundle.project
    spec = bundle.agent(name)  # AgentNotFound (exit 2) names the agents there are
    model = getattr(spec, "model", None) or (project.config.defaults.model if spec.kind == "llm" else None)
    profile = getattr(spec, "profile", None) or project.config.defaults.profile
    return {
        "name": spec.name,
        "kind": spec.kind,
        "description": spec.description,
        "model": model.label() if model is not None else ("offline" if spec.kind == "llm" else None),
        "profile": profile,
        "skills": [{"id": s.id, "name": s.name or s.id} for s in project.skills_of(spec)],
        "tools": bundle.tool_list(name),
    }


def agent_lines(project: Project) -> list[str]:
    """``ca validate --verbose``: a line per agent, then a line per tool (model name ← spec name)."""
    from framework.compiler.bundle import build_bundle

    bundle = build_bundle(project)
    lines: list[str] = []
    for name in sorted(project.agents):
        described = _described(bundle, name)
        model = f", model {described['model']}" if described["model"] else ""
        lines.append(f"agent {name} ({described['kind']}{model})")
        for tool in described["tools"]:
            lines.append(f"  tool {tool['name']:<24} {tool['tool']}")
    return lines
