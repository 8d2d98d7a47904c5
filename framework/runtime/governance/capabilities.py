"""The capability check, deny by default: a call runs only if the agent's capabilities list it.

One entry point, :func:`check_capabilities`, dispatching on the call's capability class:

* ``fs.read`` / ``fs.write`` (``fs.list`` and ``fs.search`` are reads): the path is confined to
  the project root and its real location matched against ``capabilities.fs`` globs; a read is
  allowed by a ``read`` or a ``write`` glob, a write only by a ``write`` glob
  (:mod:`.paths`);
* ``shell``: the command line against ``capabilities.shell.allow`` (:mod:`.shell`);
* ``network`` (``http.get``): the URL's host against ``capabilities.network.allow``
  (:mod:`.network`);
* ``agent``: a callee of the project must be named in ``capabilities.agents``; a remote agent
  (``tool`` is its ``http(s)://`` URL) must have its host in ``capabilities.network.allow``;
* ``mcp``: the tool (``SERVER.TOOL``) must match a glob of ``capabilities.mcp.allow``
  (:mod:`.mcp`), and be as reviewed in ``ca.mcp.lock`` when the project has one;
* ``python``: allowed. A python tool is code the author declared in the agent's ``tools:``
  list; declaring it is the grant, and no capability key could narrow what it does.

``caps=None`` (no ``capabilities:`` in the agent nor as a project default) allows nothing but
python tools. A builtin tool called with a capability class other than its own is denied: the
class decides which globs apply, so a mismatch must not let a write pass as a read.
"""

from __future__ import annotations

from pathlib import Path

from framework.runtime.governance.calls import Decision, ToolCall, allow, deny
from framework.runtime.governance.mcp import check_mcp
from framework.runtime.governance.network import check_url
from framework.runtime.governance.paths import check_fs
from framework.runtime.governance.shell import check_shell
from framework.spec.capabilities import Capabilities
from framework.spec.common import did_you_mean
from framework.spec.tools import BUILTIN_TOOLS


def check_capabilities(
    call: ToolCall, caps: Capabilities | None, *, root: Path, root_is_real: bool = False
) -> Decision:
    """Whether ``call`` is within ``caps``; paths are resolved against the project ``root``
    (``root_is_real``: its links are resolved already, e.g. :attr:`Policy.real_root`).

    Returns ``allow`` or ``deny`` (never ``ask``: asking is the profile's business). A denial's
    reason says what to add to the agent's YAML to allow the call; ``rule`` names the
    capability key that decided, e.g. ``"capabilities.fs.read"``.
    """
    expected = BUILTIN_TOOLS.get(call.tool)
    if expected is not None and expected != call.capability:
        return deny(
            f"builtin tool {call.tool!r} needs capability {expected!r}, but the call is classed as "
            f"{call.capability!r}; this is a bug in the tool's metadata, not in the YAML",
            "capabilities",
        )
    match call.capability:
        case "fs.read" | "fs.write":
            return check_fs(call, caps, root, root_is_real=root_is_real)
        case "shell":
            return check_shell(call, caps)
        case "network":
            allowed = None if caps is None else caps.network.allow
            return check_url(call.args.get("url"), allowed, what=call.tool)
        case "agent":
            return check_agent(call.tool, caps)
        case "mcp":
            return check_mcp(call, caps)
        case "python":
            return allow(f"python tool {call.tool!r} is declared code in the agent's tools", "capabilities.python")
    return deny(f"unknown capability class {call.capability!r}; nothing unlisted is allowed", "capabilities")


def check_agent(callee: str, caps: Capabilities | None) -> Decision:
    """Whether an agent may call ``callee``: a name of the project, or a remote agent's URL."""
    if callee.startswith(("http://", "https://")):
        allowed = None if caps is None else caps.network.allow
        return check_url(callee, allowed, what="remote agent")
    rule = "capabilities.agents"
    if caps is None:
        return deny(
            f"agent {callee!r} may not be called: the agent declares no capabilities; "
            f"add capabilities: {{agents: [{callee}]}}",
            rule,
        )
    if callee in caps.agents:
        return allow(f"agent {callee!r} is listed in {rule}", rule)
    near = did_you_mean(callee, caps.agents)
    listed = ", ".join(map(repr, caps.agents)) or "none"
    return deny(
        f"agent {callee!r} is not in {rule} ({listed}); add {callee!r} to {rule}" + (f" ({near})" if near else ""),
        rule,
    )
