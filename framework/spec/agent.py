"""Agent files: ``kind: llm`` (a model with tools) and ``kind: workflow`` (deterministic steps)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from framework.spec.budget import Budget
from framework.spec.capabilities import Capabilities
from framework.spec.common import Name, Spec, Version
from framework.spec.contract import Contract
from framework.spec.model import ModelConfig
from framework.spec.skill import Skill
from framework.spec.tools import ToolRef
from framework.spec.workflow import Step

SkillRef = Skill | Name
"""An inline skill, or the name of ``skills/NAME.yaml``."""


class AgentBase(Spec):
    version: Version = 1
    extends: str | list[str] | None = Field(
        default=None,
        description="File(s) to inherit from, relative to this one; merged deeply, this file wins.",
    )
    name: Name
    description: str = ""
    skills: list[SkillRef] = Field(default_factory=list)
    profile: Name | None = Field(default=None, description="Automation profile (default: the project's).")
    budget: Budget | None = None
    capabilities: Capabilities | None = Field(
        default=None, description="What the agent may touch; nothing unlisted is allowed."
    )
    contract: Contract = Field(default_factory=Contract)


class LlmAgent(AgentBase):
    """A model that answers and calls tools."""

    kind: Literal["llm"] = "llm"
    model: ModelConfig | None = Field(default=None, description="'offline', 'openai:gpt-4o-mini', or a mapping.")
    instructions: str = ""
    tools: list[ToolRef] = Field(default_factory=list)


class WorkflowAgent(AgentBase):
    """A deterministic graph of other agents, tools and human gates."""

    kind: Literal["workflow"]
    steps: list[Step] = Field(min_length=1)
    output: str | None = Field(default=None, description="Template for the final answer (default: last step's).")


class PartialLlmAgent(LlmAgent):
    """An ``extends:`` base of llm agents: every key of one, none required (children add them)."""

    name: Name | None = None  # type: ignore[assignment]


class PartialWorkflowAgent(WorkflowAgent):
    """An ``extends:`` base of workflows: every key of one, none required (children add them)."""

    name: Name | None = None  # type: ignore[assignment]
    kind: Literal["workflow"] = "workflow"
    steps: list[Step] = Field(default_factory=list)


AgentSpec = LlmAgent | WorkflowAgent
AGENT_KINDS: dict[str, type[LlmAgent] | type[WorkflowAgent]] = {"llm": LlmAgent, "workflow": WorkflowAgent}
