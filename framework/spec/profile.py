"""Automation profiles: ordered rules deciding allow / ask / deny for each tool call."""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, model_validator

from framework.spec.common import Action, CapabilityClass, Duration, Money, Name, Spec, Version, fail

McpHint = Literal["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"]
"""The boolean annotations an MCP server may give a tool."""


class RuleMatch(Spec):
    """What a rule matches; every key given must match."""

    tool: str | None = Field(default=None, description="Tool name or glob, e.g. 'shell' or 'fs.*'.")
    capability: CapabilityClass | None = None
    args: dict[str, str] | None = Field(default=None, description="Argument name -> glob on its value.")
    cost_usd_over: Money | None = Field(default=None, description="Matches when the task has cost more than this.")
    annotations: dict[McpHint, bool] | None = Field(
        default=None,
        description="MCP tool hints that must have these values, e.g. {readOnlyHint: true}; "
        "a hint the server did not give does not match.",
    )

    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if all(v is None for v in (self.tool, self.capability, self.args, self.cost_usd_over, self.annotations)):
            raise fail(
                "rule",
                "a rule's match needs at least one of tool, capability, args, cost_usd_over, annotations "
                "(use the profile's `default` for everything else)",
            )
        return self


class Rule(Spec):
    match: RuleMatch
    action: Action
    reason: str | None = Field(default=None, description="Shown to the user when the rule asks or denies.")


class ApprovalPolicy(Spec):
    timeout: Duration = Field(default=1800.0, description="How long an approval may wait, e.g. '30m'.")
    on_timeout: Literal["reject", "approve", "fail"] = "reject"


class Profile(Spec):
    """``profiles/NAME.yaml``; the first matching rule wins, else ``default``."""

    version: Version = 1
    name: Name
    description: str = ""
    rules: list[Rule] = Field(default_factory=list)
    default: Action = "ask"
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
