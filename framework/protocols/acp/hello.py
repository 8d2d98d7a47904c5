"""The answer to ACP's ``initialize``, computed with the standard library only.

An IDE waits on this answer before it shows the agent, so it must not wait for
pydantic, LangGraph or a2a to import. The one thing that needs the project is
``authMethods``: it is advertised when the agent's model needs an API key that is not
set, read from the YAML with a light scan (the full check runs at ``session/new``,
which answers -32000 with guidance if the key is missing).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TextIO

from framework import __version__
from framework.spec.env_file import parse_env_file
from framework.spec.providers import PROVIDER_KEYS

PROTOCOL_VERSION = 1
_MODEL_LINE = re.compile(r"^model:\s*['\"]?([^'\"#\n]+?)['\"]?\s*(?:#.*)?$", re.MULTILINE)
_PROVIDER_LINE = re.compile(r"^\s+provider:\s*([\w-]+)", re.MULTILINE)
_DEFAULT_AGENT = re.compile(r"^default_agent:\s*([\w-]+)", re.MULTILINE)
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _dotenv(root: Path) -> dict[str, str]:
    """``.env`` read as the loader reads it; an unreadable one counts as empty (``session/new`` reports it)."""
    try:
        text = (root / ".env").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return parse_env_file(text, os.environ)


def _model_of(text: str, variables: dict[str, str]) -> str | None:
    match = _MODEL_LINE.search(text)
    if match:
        value = _VAR.sub(lambda m: variables.get(m.group(1), m.group(2) or ""), match.group(1).strip())
        if value:
            return value
    provider = _PROVIDER_LINE.search(text)
    return provider.group(1) if provider else None


def missing_key(root: Path, agent: str | None) -> str | None:
    """The API key variable the agent's model needs and that is unset, by a light scan of the YAML."""
    variables = {**_dotenv(root), **os.environ}
    try:
        config = (root / "ca.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        config = ""
    if agent is None:
        default = _DEFAULT_AGENT.search(config)
        agent = default.group(1) if default else None
    text = ""
    if agent is not None:
        for suffix in (".yaml", ".yml"):
            try:
                text = (root / "agents" / f"{agent}{suffix}").read_text(encoding="utf-8")
                break
            except (OSError, UnicodeDecodeError):
                continue
    model = _model_of(text, variables) or _model_of(config, variables) or "offline"
    variable = PROVIDER_KEYS.get(model.partition(":")[0].strip())
    return variable if variable and not variables.get(variable) else None


def initialize_result(params: Any, root: Path, agent: str | None) -> dict[str, Any]:
    """What this agent supports, honestly."""
    auth: list[dict[str, Any]] = []
    variable = missing_key(root, agent)
    if variable is not None:
        auth.append(
            {
                "id": f"env:{variable}",
                "name": f"Set {variable}",
                "description": f"The agent's model needs {variable}: set it in the environment or the project's .env, "
                "then restart the agent.",
            }
        )
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": True,
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},  # stdio needs no flag
        },
        "authMethods": auth,
        "agentInfo": {"name": "cleveragents", "title": "CleverAgents", "version": __version__},
    }


def answer_first(message: Any, out: TextIO, root: Path, agent: str | None) -> bool:
    """Answer the first message if it is ``initialize``; True when answered."""
    if not (isinstance(message, dict) and message.get("method") == "initialize" and "id" in message):
        return False
    if isinstance(message["id"], bool) or not isinstance(message["id"], str | int):
        return False  # the server answers the invalid id (-32600, id null)
    reply = {"jsonrpc": "2.0", "id": message["id"], "result": initialize_result(message.get("params"), root, agent)}
    out.write(json.dumps(reply) + "\n")
    out.flush()
    return True
