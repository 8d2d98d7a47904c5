"""The capability dispatcher: agent calls, python tools, and calls that do not add up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from framework.runtime.governance import ToolCall, check_capabilities
from framework.spec.capabilities import Capabilities

ROOT = Path(".")
CAPS = Capabilities.model_validate({"agents": ["summarizer", "writer"], "network": {"allow": ["agents.example.org"]}})


def test_a_listed_agent_may_be_called() -> None:
    decision = check_capabilities(ToolCall("summarizer", "agent", {"text": "hi"}), CAPS, root=ROOT)
    assert decision.allowed
    assert decision.rule == "capabilities.agents"


def test_an_unlisted_agent_is_denied_with_a_suggestion() -> None:
    decision = check_capabilities(ToolCall("sumarizer", "agent", {}), CAPS, root=ROOT)
    assert decision.denied
    assert decision.reason == (
        "agent 'sumarizer' is not in capabilities.agents ('summarizer', 'writer'); "
        "add 'sumarizer' to capabilities.agents (did you mean 'summarizer'?)"
    )


def test_no_capabilities_call_no_agent() -> None:
    decision = check_capabilities(ToolCall("writer", "agent", {}), None, root=ROOT)
    assert decision.denied
    assert decision.reason.endswith("add capabilities: {agents: [writer]}")


def test_a_remote_agent_needs_its_host_on_the_network_allowlist() -> None:
    allowed = check_capabilities(ToolCall("https://agents.example.org/writer/", "agent", {}), CAPS, root=ROOT)
    assert allowed.allowed
    assert allowed.rule == "capabilities.network.allow"
    denied = check_capabilities(ToolCall("https://evil.example.net/a/", "agent", {}), CAPS, root=ROOT)
    assert denied.denied
    assert denied.reason.startswith("remote agent: host 'evil.example.net' is not allowed")
    assert "add 'evil.example.net' to capabilities.network.allow" in denied.reason


def test_python_tools_are_declared_code_and_always_allowed() -> None:
    decision = check_capabilities(ToolCall("lint", "python", {"files": []}), None, root=ROOT)
    assert decision.allowed
    assert decision.rule == "capabilities.python"


def test_a_builtin_classed_as_another_capability_is_denied() -> None:
    decision = check_capabilities(ToolCall("fs.write", "fs.read", {"path": "a"}), Capabilities(), root=ROOT)
    assert decision.denied
    assert decision.reason.startswith("builtin tool 'fs.write' needs capability 'fs.write'")


def test_an_unknown_capability_class_is_denied() -> None:
    call = ToolCall("x", "teleport", {})  # type: ignore[arg-type]  # data from outside the type system
    decision = check_capabilities(call, Capabilities(), root=ROOT)
    assert decision.denied
    assert "unknown capability class 'teleport'" in decision.reason


def test_the_builtin_constructor_classes_calls_like_the_spec() -> None:
    assert ToolCall.builtin("fs.search", pattern="x").capability == "fs.read"
    assert ToolCall.builtin("http.get", url="https://x").capability == "network"


def test_importing_governance_loads_no_langchain_or_langgraph() -> None:
    code = (
        "import sys, framework.runtime.governance as g\n"
        "g.check_output_contract\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('langchain', 'langchain_core', 'langgraph'))\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[3]
    )
    assert out.stdout.strip() == "[]"
