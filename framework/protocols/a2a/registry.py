"""Discovery: the agents of the registries listed in ``ca.yaml``.

A registry is either a CleverAgents server (asked with ``_cleveragents/registry/list``) or
a single A2A agent (its card). Discovery runs when a runtime opens (and on reload); an
unreachable registry is reported, not fatal: its agents are simply absent.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from framework.compiler.bundle import RemoteAgent
from framework.runtime.remote import Discovery

if TYPE_CHECKING:
    from framework.protocols.a2a.client import Peers

TIMEOUT = 5.0


async def _from_server(peers: Peers, name: str, url: str) -> list[RemoteAgent] | None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "_cleveragents/registry/list"}
    response = await peers.client_for(url).post(url + "/", json=request, timeout=TIMEOUT)
    if response.status_code != 200:
        return None
    body: Any = response.json()
    agents = body.get("result", {}).get("agents") if isinstance(body, dict) else None
    if not isinstance(agents, list):
        return None
    found = []
    for agent in agents:
        if isinstance(agent, dict) and isinstance(agent.get("url"), str):
            tags = tuple(t for s in agent.get("skills", []) for t in s.get("tags", []))
            found.append(
                RemoteAgent(str(agent.get("name", "")), agent["url"], str(agent.get("description", "")), tags, name)
            )
    return found


async def _one(peers: Peers, name: str, url: str) -> list[RemoteAgent]:
    agents = await _from_server(peers, name, url)
    if agents is not None:
        return agents
    card = await peers.card(url)
    tags = tuple(t for skill in card.skills for t in skill.tags)
    return [RemoteAgent(card.name, url + "/", card.description, tags, name)]


async def discover(peers: Peers) -> Discovery:
    """Every agent of every registry, and a line per registry that could not be read."""
    result = Discovery()
    registries = peers.project.config.registries if peers.project is not None else []

    async def read(registry: Any) -> None:
        try:
            async with asyncio.timeout(TIMEOUT * 2):
                result.agents.extend(await _one(peers, registry.name, registry.url))
        except Exception as exc:  # a registry that is down or answers garbage is reported, not fatal
            result.problems.append(f"registry {registry.name!r} ({registry.url}) unreachable: {exc}")

    await asyncio.gather(*(read(r) for r in registries))
    return result
