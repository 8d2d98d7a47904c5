"""Discovery: the agents of the registries listed in ``ca.yaml``.

A registry is either a CleverAgents server (asked with ``_cleveragents/registry/list``) or
a single A2A agent (its card). Discovery runs when a runtime opens (and on reload); an
unreachable registry is reported, not fatal: its agents are simply absent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
from a2a.types import AgentCard

from framework.compiler.bundle import RemoteAgent, RemoteSkill
from framework.runtime.remote import Discovery
from framework.spec.project import Registry

TIMEOUT = 5.0

HttpFor = Callable[[str], httpx.AsyncClient]
"""URL -> the HTTP client of its origin (the A2A client's pinned clients)."""
CardAt = Callable[[str], Awaitable[AgentCard]]
"""URL -> the agent card served there (the A2A client's cached reader)."""


async def _from_server(http: HttpFor, name: str, url: str) -> list[RemoteAgent] | None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "_cleveragents/registry/list"}
    response = await http(url).post(url + "/", json=request, timeout=TIMEOUT)
    if response.status_code != 200:
        return None
    body: Any = response.json()
    agents = body.get("result", {}).get("agents") if isinstance(body, dict) else None
    if not isinstance(agents, list):
        return None
    found = []
    for agent in agents:
        if isinstance(agent, dict) and isinstance(agent.get("url"), str):
            listed = agent.get("skills")
            skills = tuple(_skill(s) for s in listed if isinstance(s, dict)) if isinstance(listed, list) else ()
            tags = tuple(t for s in skills for t in s.tags)
            description = str(agent.get("description") or "")
            found.append(RemoteAgent(str(agent.get("name", "")), agent["url"], description, tags, name, skills))
    return found


def _skill(listed: dict[str, Any]) -> RemoteSkill:
    """A skill as ``_cleveragents/registry/list`` lists it (``{id, name, tags}``); odd values are dropped."""
    tags = listed.get("tags")
    return RemoteSkill(
        str(listed.get("id", "")),
        str(listed.get("name") or listed.get("id", "")),
        tuple(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else (),
    )


async def _one(http: HttpFor, card_at: CardAt, name: str, url: str) -> list[RemoteAgent]:
    agents = await _from_server(http, name, url)
    if agents is not None:
        return agents
    card = await card_at(url)
    skills = tuple(RemoteSkill(s.id, s.name or s.id, tuple(s.tags)) for s in card.skills)
    tags = tuple(t for skill in skills for t in skill.tags)
    return [RemoteAgent(card.name, url + "/", card.description, tags, name, skills)]


async def discover(registries: Sequence[Registry], http: HttpFor, card_at: CardAt) -> Discovery:
    """Every agent of every registry, and a line per registry that could not be read.

    ``http`` and ``card_at`` are the A2A client's (:class:`~framework.protocols.a2a.client.Peers`),
    so the requests carry the credentials of each registry's origin and the cards are cached.
    """
    result = Discovery()

    async def read(registry: Registry) -> None:
        try:
            async with asyncio.timeout(TIMEOUT * 2):
                result.agents.extend(await _one(http, card_at, registry.name, registry.url))
        except Exception as exc:  # a registry that is down or answers garbage is reported, not fatal
            result.problems.append(f"registry {registry.name!r} ({registry.url}) unreachable: {exc}")

    await asyncio.gather(*(read(r) for r in registries))
    return result
