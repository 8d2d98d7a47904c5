"""The answer to ACP's ``initialize``, computed with the standard library only.

An IDE waits on this answer before it shows the agent, so it must not wait for
pydantic, LangGraph or a2a to import. The one thing that needs the project is
``authMethods``: it is advertised when the agent's model needs an API key that is not
set. The model is found where the spec lets it be set, in the spec's order (the agent's
``model``, through its ``extends:`` files, else ``ca.yaml`` ``defaults.model``, else
``offline``), by a light scan of the YAML; the key variable is the spec's own
(:func:`framework.spec.providers.key_variable`). The full check runs at ``session/new``,
which answers -32000 with guidance if the key is missing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TextIO

from framework import __version__
from framework.spec.env_file import parse_env_file
from framework.spec.providers import key_variable

PROTOCOL_VERSION = 1
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?:\s+(?P<value>.*?))?\s*$")
_COMMENT = re.compile(r"\s+#.*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MAX_EXTENDS = 8


def _dotenv(root: Path) -> dict[str, str]:
    """``.env`` read as the loader reads it; an unreadable one counts as empty (``session/new`` reports it)."""
    try:
        text = (root / ".env").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return parse_env_file(text, os.environ)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _scalar(raw: str | None, variables: dict[str, str]) -> str:
    """A YAML scalar as the loader would read it here: comment dropped, quotes off, ``${VAR}`` filled."""
    text = _COMMENT.sub("", raw or "").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return _VAR.sub(lambda m: variables.get(m.group(1), m.group(2) or ""), text).strip()


def _entries(lines: list[str], indent: int) -> dict[str, tuple[int, str | None]]:
    """The keys at exactly ``indent`` spaces in a block (stopping at a line indented less): key ->
    (line number, the raw value after the colon)."""
    found: dict[str, tuple[int, str | None]] = {}
    for number, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        width = len(line) - len(line.lstrip(" "))
        if width < indent:
            break
        match = _KEY_LINE.match(line)
        if match and width == indent:
            found.setdefault(match["key"], (number, match["value"]))
    return found


def _block(lines: list[str], at: int) -> tuple[list[str], int]:
    """The lines nested under the key on line ``at``, and their indent (-1 when none)."""
    body = lines[at + 1 :]
    for line in body:
        if line.strip() and not line.lstrip().startswith("#"):
            return body, len(line) - len(line.lstrip(" "))
    return body, -1


def _mapping(lines: list[str], indent: int, key: str, variables: dict[str, str]) -> dict[str, str] | None:
    """``key``'s value at ``indent`` as a flat mapping: ``a:b`` scalars become ``{provider, name}``,
    flow (``{provider: x}``) and block mappings their keys; None when ``key`` is not there."""
    entry = _entries(lines, indent).get(key)
    if entry is None:
        return None
    at, raw = entry
    value = _COMMENT.sub("", raw or "").strip()
    if value.startswith("{") and value.endswith("}"):
        pairs = (item.partition(":") for item in value[1:-1].split(","))
        return {k.strip(): _scalar(v, variables) for k, _, v in pairs if k.strip()}
    if value:
        provider, _, name = _scalar(value, variables).partition(":")
        return {"provider": provider.strip(), "name": name.strip()} if provider.strip() else None
    body, inner = _block(lines, at)
    if inner <= indent:
        return None
    return {k: _scalar(v, variables) for k, (_, v) in _entries(body, inner).items() if v}


def _value(lines: list[str], indent: int, key: str, variables: dict[str, str]) -> str:
    """``key``'s scalar value at ``indent`` ('' when absent or not a scalar)."""
    entry = _entries(lines, indent).get(key)
    return _scalar(entry[1], variables) if entry is not None else ""


def _agent_file(root: Path, agent: str | None) -> Path | None:
    """The file of ``agent`` (by its ``name:``, as the loader names agents), or of the first agent
    by name when None."""
    folder = root / "agents"
    guess = [folder / f"{agent}{suffix}" for suffix in (".yaml", ".yml")] if agent else []
    try:
        files = sorted(p for p in folder.rglob("*") if p.suffix in (".yaml", ".yml") and not p.name.startswith("_"))
    except OSError:
        files = []
    named: dict[str, Path] = {}
    for path in [*guess, *files]:
        name = _value(_read(path).splitlines(), 0, "name", {})
        if name:
            named.setdefault(name, path)
            if name == agent:
                break
    if agent is not None:
        return named.get(agent)
    return named[min(named)] if named else None


def may_have_agent(root: Path, agent: str) -> bool:
    """Whether a light scan of ``agents/`` finds one named ``agent``. True may be wrong (the loader
    has the last word); False is the case to confirm with the loader before refusing the name."""
    return _agent_file(root, agent) is not None


def _extends(lines: list[str], variables: dict[str, str]) -> list[str]:
    """The files ``extends:`` names: one path, a flow list or a block list."""
    entry = _entries(lines, 0).get("extends")
    if entry is None:
        return []
    at, raw = entry
    value = _COMMENT.sub("", raw or "").strip()
    if value.startswith("["):
        return [_scalar(ref, variables) for ref in value.strip("[]").split(",") if ref.strip()]
    if value:
        return [_scalar(value, variables)]
    body, inner = _block(lines, at)
    refs = []
    for line in body:
        width = len(line) - len(line.lstrip(" "))
        if line.strip() and not line.lstrip().startswith("#") and width < inner:
            break
        if width == inner and line.strip().startswith("- "):
            refs.append(_scalar(line.strip()[2:], variables))
    return refs


def _agent_model(path: Path, variables: dict[str, str], depth: int = 0) -> dict[str, str] | None:
    """The agent's own ``model``, else the one its ``extends:`` files give it (a later file
    overrides an earlier one, as the loader merges them)."""
    lines = _read(path).splitlines()
    model = _mapping(lines, 0, "model", variables)
    if model is not None or depth >= _MAX_EXTENDS:
        return model
    for ref in reversed(_extends(lines, variables)):
        model = _agent_model(path.parent / ref, variables, depth + 1)
        if model is not None:
            return model
    return None


def model_of(root: Path, agent: str | None, variables: dict[str, str]) -> dict[str, str]:
    """The model ``agent`` runs on (default: the project's default agent), as the spec resolves it."""
    config = next((t for t in (_read(root / "ca.yaml"), _read(root / "ca.yml")) if t), "").splitlines()
    agent = agent or _value(config, 0, "default_agent", variables) or None
    path = _agent_file(root, agent)
    own = _agent_model(path, variables) if path is not None else None
    if own is not None:
        return own
    defaults = _entries(config, 0).get("defaults")
    if defaults is not None:
        body, inner = _block(config, defaults[0])
        model = _mapping(body, inner, "model", variables) if inner > 0 else None
        if model is not None:
            return model
    return {"provider": "offline"}


def missing_key(root: Path, agent: str | None) -> str | None:
    """The API key variable the agent's model needs and that is unset, by a light scan of the YAML."""
    variables = {**_dotenv(root), **os.environ}
    model = model_of(root, agent, variables)
    variable = key_variable(
        model.get("provider", "offline"), api_key_env=model.get("api_key_env"), base_url=model.get("base_url")
    )
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
