"""Governance decisions as plain functions: is this tool call allowed, must a person approve it, and
does the final answer honour the agent's contract. Every function here takes spec models
(:class:`~framework.spec.capabilities.Capabilities`, :class:`~framework.spec.profile.Profile`,
:class:`~framework.spec.contract.Contract`) and plain data (:class:`ToolCall`), returns a
:class:`Decision` or a list of violations, performs no side effects beyond reading the file
system to resolve paths, and imports no langgraph or langchain: the runtime's middleware calls
them in the order of docs/governance.md, 'The order of checks for a tool call' (capabilities →
contract must_not → profile → budget → execute → audit) and turns their verdicts into tool errors, approvals and audit records.
"""

from __future__ import annotations

from framework.runtime.governance.calls import Decision, ToolCall
from framework.runtime.governance.capabilities import check_capabilities
from framework.runtime.governance.contracts import check_call_contract, check_output_contract
from framework.runtime.governance.profiles import decide
from framework.runtime.governance.secrets import mask

__all__ = [
    "Decision",
    "ToolCall",
    "check_call_contract",
    "check_capabilities",
    "check_output_contract",
    "decide",
    "mask",
]
