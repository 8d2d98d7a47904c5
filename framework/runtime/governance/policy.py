"""What governs one agent (its :class:`Policy`, resolved from its spec and the project's defaults)
and what governance keeps in the agent's graph state (:class:`GovernanceState`, the ``ca_*`` keys).

The state is checkpointed with the conversation: a paused run resumes in another process with
the same counters. The middleware that enforces the policy is :mod:`~framework.runtime.governance.middleware`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware.types import AgentState

from framework.runtime.governance import budgets
from framework.runtime.governance.contracts import holds_output
from framework.spec.agent import AgentSpec, LlmAgent
from framework.spec.profile import Profile
from framework.spec.project import Project


def _union(left: list[str] | None, right: list[str] | None) -> list[str]:
    return list(dict.fromkeys([*(left or []), *(right or [])]))


def _add_counts(left: Mapping[str, int] | None, right: Mapping[str, int] | None) -> dict[str, int]:
    out = dict(left or {})
    for key, value in (right or {}).items():
        out[key] = out.get(key, 0) + value
    return out


def _concat(left: list[Any] | None, right: list[Any] | None) -> list[Any]:
    return [*(left or []), *(right or [])]


class GovernanceState(AgentState[Any]):
    """The governance keys added to an agent's graph state."""

    ca_usage: NotRequired[Annotated[dict[str, float], budgets.add_usage]]
    """Usage summed over the whole conversation."""
    ca_task: NotRequired[dict[str, Any]]
    """The current task: id, start time, usage when it started."""
    ca_allowed: NotRequired[Annotated[list[str], _union]]
    """Tools a person chose to always allow in this conversation."""
    ca_calls: NotRequired[Annotated[list[dict[str, Any]], _concat]]
    """Tool calls that ran: task, tool, capability, args (for must_always)."""
    ca_counts: NotRequired[Annotated[dict[str, int], _add_counts]]
    """Per task: budget extensions granted (``ext:ID``), contract retries (``retry:ID``)."""
    ca_stop: NotRequired[dict[str, Any] | None]
    """Why the last task stopped early (budget), for the runner to report."""


@dataclass(frozen=True)
class Policy:
    """What governs one agent, resolved from its spec and the project's defaults."""

    agent: AgentSpec
    project: Project
    profile: Profile | None
    real_root: Path = field(init=False)
    """The project root with its links resolved, once (as the tools' ToolContext resolves it): the
    root paths are confined to, without resolving it again for every call."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "real_root", Path(os.path.realpath(self.project.root)))

    @property
    def capabilities(self) -> Any:
        return self.agent.capabilities or self.project.config.defaults.capabilities

    @property
    def budget(self) -> Any:
        return self.agent.budget or self.project.config.defaults.budget

    @property
    def holds_output(self) -> bool:
        """Whether the agent's answers are judged by output rules (and so held back until they pass)."""
        return holds_output(self.agent.contract)

    @property
    def model_label(self) -> str:
        model = self.agent.model if isinstance(self.agent, LlmAgent) else None
        model = model or self.project.config.defaults.model
        return model.label() if model else "offline"


DEFAULT_MAX_DEPTH = 8
"""Agent calls nest at most this deep unless a budget sets max_depth."""
DEFAULT_PROFILE = "supervised"
"""The profile of an agent that names none when the project sets no default either."""


def policy_for(agent: AgentSpec, project: Project) -> Policy:
    name = agent.profile or project.config.defaults.profile or DEFAULT_PROFILE
    return Policy(agent, project, project.profiles.get(name))
