"""Automation profiles: which calls run on their own, which wait for a person, which never run.

:func:`decide` walks the profile's rules in order; the first rule whose ``match`` fits the call
decides, and the profile's ``default`` decides when none does. A ``match`` fits when every key
it gives fits:

* ``tool`` — a text glob on the call's spec name (``fs.*`` matches ``fs.read`` and ``fs.list``;
  an agent call's name is the callee's);
* ``capability`` — the call's capability class equals it (``fs.list`` is ``fs.read``);
* ``args`` — every listed argument is present and its value matches the glob, in any of its
  readings (see :mod:`.matching`: ``./x/../.env`` is read as ``.env``, ``'git' push`` as
  ``git push``); a missing argument does not match;
* ``cost_usd_over`` — the task has cost strictly more than the amount so far;
* ``annotations`` — every listed hint of an MCP tool has the given value (``{readOnlyHint:
  true}``); a hint the server did not give does not match, and a call of any other tool has none.

Profiles run after capabilities and contracts: an ``allow`` here never widens what those allow.
"""

from __future__ import annotations

from decimal import Decimal

from framework.runtime.governance.calls import Decision, ToolCall
from framework.runtime.governance.matching import call_matches, describe
from framework.spec.profile import Profile, RuleMatch

_VERBS = {"allow": "allows", "ask": "asks a person before", "deny": "denies"}


def rule_matches(match: RuleMatch, call: ToolCall, cost_usd: Decimal) -> bool:
    """Whether every key of ``match`` fits ``call`` at a task cost of ``cost_usd``."""
    if match.capability is not None and match.capability != call.capability:
        return False
    if match.cost_usd_over is not None and not cost_usd > match.cost_usd_over:
        return False
    if match.annotations is not None and any(call.annotations.get(k) is not v for k, v in match.annotations.items()):
        return False
    return call_matches(match.tool, match.args, call)


def describe_match(match: RuleMatch) -> str:
    """A rule's ``match`` written back as YAML, e.g. ``{capability: 'fs.write'}``."""
    text = describe(match.tool, match.args)[1:-1]
    extra = []
    if match.capability is not None:
        extra.append(f"capability: {match.capability!r}")
    if match.cost_usd_over is not None:
        extra.append(f"cost_usd_over: {match.cost_usd_over}")
    if match.annotations is not None:
        hints = ", ".join(f"{k}: {str(v).lower()}" for k, v in match.annotations.items())
        extra.append(f"annotations: {{{hints}}}")
    return "{" + ", ".join([p for p in [text] if p] + extra) + "}"


def _change_hint(profile: Profile, change: str) -> str:
    return (
        f"to change this, {change} in profile {profile.name!r} (a project file "
        f"profiles/{profile.name}.yaml replaces a built-in profile of that name) or give the agent another `profile:`"
    )


def decide(profile: Profile, call: ToolCall, *, cost_usd: Decimal = Decimal(0)) -> Decision:
    """The profile's verdict on ``call`` when the task has cost ``cost_usd`` so far.

    ``rule`` is ``"profile NAME rule N"`` (counting from 1) or ``"profile NAME default"``. The
    reason quotes the rule's own ``reason`` when it has one, and for ``ask`` and ``deny`` says
    where to change the decision.
    """
    for number, rule in enumerate(profile.rules, start=1):
        if not rule_matches(rule.match, call, cost_usd):
            continue
        label = f"profile {profile.name} rule {number}"
        said = f"{rule.reason}: " if rule.reason else ""
        reason = f"{said}rule {number} of profile {profile.name!r} {describe_match(rule.match)} {_VERBS[rule.action]} this call"
        if rule.action != "allow":
            reason += "; " + _change_hint(profile, f"edit rule {number}")
        return Decision(rule.action, reason, label)
    reason = f"no rule of profile {profile.name!r} matches {call.tool!r}, so its default {_VERBS[profile.default]} it"
    if profile.default != "allow":
        reason += "; " + _change_hint(profile, "add a rule for this call or change `default:`")
    return Decision(profile.default, reason, f"profile {profile.name} default")
