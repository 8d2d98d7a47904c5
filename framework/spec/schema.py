"""JSON Schemas of the files a user writes, generated from the spec models (for editors)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from framework.spec.agent import LlmAgent, WorkflowAgent
from framework.spec.evals import EvalFile
from framework.spec.profile import Profile
from framework.spec.project import ProjectConfig
from framework.spec.skill import SkillFile

SCHEMA_FILES = {
    "agent": "agent.schema.json",
    "profile": "profile.schema.json",
    "skill": "skill.schema.json",
    "project": "project.schema.json",
    "eval": "eval.schema.json",
}
_TITLES = {
    "agent": "CleverAgents agent (agents/*.yaml)",
    "profile": "CleverAgents automation profile (profiles/*.yaml)",
    "skill": "CleverAgents skill (skills/*.yaml)",
    "project": "CleverAgents project file (ca.yaml)",
    "eval": "CleverAgents eval file (evals/*.yaml, run by `ca test`)",
}


def schemas() -> dict[str, dict[str, Any]]:
    """``{"agent": {...}, "profile": ..., "skill": ..., "project": ..., "eval": ...}``."""
    adapters: dict[str, TypeAdapter[Any]] = {
        "agent": TypeAdapter(LlmAgent | WorkflowAgent),
        "profile": TypeAdapter(Profile),
        "skill": TypeAdapter(SkillFile),
        "project": TypeAdapter(ProjectConfig),
        "eval": TypeAdapter(EvalFile),
    }
    out = {}
    for kind, adapter in adapters.items():
        schema = adapter.json_schema(mode="validation")
        out[kind] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": _TITLES[kind],
            **schema,
        }
    return out


def write_schemas(folder: Path) -> list[Path]:
    """Write every schema into ``folder``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, schema in schemas().items():
        path = folder / SCHEMA_FILES[kind]
        path.write_text(json.dumps(schema, indent=2, sort_keys=False) + "\n", encoding="utf-8")
        written.append(path)
    return written
