"""Skills: what an agent can be asked to do. They become Agent Card skills and ACP slash commands."""

from __future__ import annotations

from pydantic import Field

from framework.spec.common import Name, Spec, Version


class Skill(Spec):
    """A skill, inline in an agent or in ``skills/NAME.yaml``."""

    id: Name
    name: str | None = Field(default=None, description="Human-readable name (default: the id).")
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    examples: list[str] = Field(default_factory=list)
    instructions: str | None = Field(default=None, description="Added to the agent's instructions for this skill.")
    tools: list[str] | None = Field(default=None, description="Narrow the agent's tools to these names.")


class SkillFile(Skill):
    """``skills/NAME.yaml``."""

    version: Version = 1
