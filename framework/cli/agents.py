"""``ca agents list``: the registry view, the same as ``_cleveragents/registry/list``."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any


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
