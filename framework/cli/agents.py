"""``ca agents list`` (the registry view, the same as ``_cleveragents/registry/list``), ``ca agents
show NAME`` and the agent lines of ``ca validate --verbose``: what an agent is and the names its
tools reach the model under."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from framework.cli.options import AgentArg, ProjectOpt, project_dir

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


agents_app = typer.Typer(help="The agents a project can use: its own and its registries'.", no_args_is_help=True)


@agents_app.command("list")
def agents_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print the agents as JSON.")] = False,
    project: ProjectOpt = None,
) -> None:
    """Every agent from every source (the project, the registries in ca.yaml) with its skills and tags."""
    import asyncio

    agents = asyncio.run(list_agents(project_dir(project)))
    if as_json:
        typer.echo(json.dumps(agents, indent=2))
        return
    for agent in agents:
        tags = ", ".join(agent["tags"]) or "-"
        typer.echo(f"{agent['name']:<18} {agent['kind']:<9} {agent['source']:<18} tags: {tags}")
        if agent["skills"]:
            typer.echo(f"{'':<18} skills: {', '.join(skill['id'] for skill in agent['skills'])}")
        typer.echo(f"{'':<18} {agent['url']}")


@agents_app.command("show")
def agents_show(
    agent: AgentArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
    project: ProjectOpt = None,
) -> None:
    """One agent of the project: its kind, model, profile, skills, and each tool with the name a model calls."""
    from framework.spec import load_project

    described = describe_agent(load_project(project_dir(project)), agent)
    if as_json:
        typer.echo(json.dumps(described, indent=2))
        return
    typer.echo(f"{described['name']} ({described['kind']}): {described['description'] or '-'}")
    for key in ("model", "profile"):
        if described.get(key):
            typer.echo(f"  {key}: {described[key]}")
    if described["skills"]:
        typer.echo("  skills: " + ", ".join(s["id"] for s in described["skills"]))
    typer.echo("  tools:" if described["tools"] else "  tools: none")
    for tool in described["tools"]:
        typer.echo(f"    {tool['name']:<24} {tool['tool']}")
