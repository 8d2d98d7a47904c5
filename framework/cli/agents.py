"""``ca agents list``: the registry view, the same as ``_cleveragents/registry/list``."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any


async def list_agents(project_dir: Path) -> list[dict[str, Any]]:
    from framework.runtime.runtime import Runtime
    from framework.spec import load_project
    from framework.transports.platform import Platform

    async with AsyncExitStack() as stack:
        runtime = await Runtime.open(load_project(project_dir), stack=stack)
        result = await Platform(runtime).registry_list()
    agents: list[dict[str, Any]] = result["agents"]
    return agents
