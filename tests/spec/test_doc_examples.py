"""Every ```yaml block of README.md, docs/ and templates/ is read by the loader and validated.

What a block is comes from its first line when that is a comment naming the file
(``# ca.yaml``, ``# agents/release.yaml``, ``# profiles/x.yaml``, ``# skills/x.yaml``), else
from its shape: a list is workflow steps; a mapping with ``rules`` a profile; one whose keys
belong to ``ca.yaml`` only (``registries``, ``server``, ``defaults`` …) the project file;
anything else a part of an agent, validated as an ``extends:`` base is (every key of an agent,
none required).

A block that is deliberately incomplete (``...`` standing for values) is fenced
```` ```yaml partial ````: it must still be YAML the loader reads, but is not validated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from framework.spec.agent import AgentBase, LlmAgent, PartialLlmAgent, PartialWorkflowAgent, WorkflowAgent
from framework.spec.evals import EvalFile
from framework.spec.interpolate import Interpolator
from framework.spec.profile import Profile
from framework.spec.project import ProjectConfig
from framework.spec.skill import SkillFile
from framework.spec.source import LList, LMap, SourceError, parse
from framework.spec.validation import validate
from tests.conftest import REPO

FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
NAMED = re.compile(r"^#\s*(?P<path>ca\.ya?ml|(?P<folder>agents|profiles|skills|evals)/\S+\.ya?ml)\b")
AGENT_KEYS = {*LlmAgent.model_fields, *WorkflowAgent.model_fields}
PROJECT_ONLY = set(ProjectConfig.model_fields) - set(AgentBase.model_fields)


def _documents() -> list[Path]:
    found = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "templates").rglob("*.md"))]
    return [p for p in found if p.is_file()]


def _blocks() -> list[tuple[str, str, bool]]:
    """(where: ``file:line``, text, partial) of every yaml block."""
    out = []
    for path in _documents():
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            words = match["info"].split()
            if not words or words[0] not in ("yaml", "yml"):
                continue
            indent = len(match["indent"])
            body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
            line = text.count("\n", 0, match.start()) + 2  # the block's first line
            out.append((f"{path.relative_to(REPO)}:{line}", body, "partial" in words[1:]))
    return out


BLOCKS = _blocks()


def _wrap(key: str, value: Any) -> LMap:
    data = LMap(value.loc)
    data[key] = value
    data.key_locs[key] = data.value_locs[key] = value.loc
    return data


def _model_for(data: Any, first_line: str) -> tuple[type[Any], LMap]:
    """The spec model a block is validated with, and the data to validate."""
    named = NAMED.match(first_line)
    if isinstance(data, LList):
        return PartialWorkflowAgent, _wrap("steps", data)
    assert isinstance(data, LMap), "a yaml block is a mapping or a list of steps"
    folder = named["folder"] if named else None
    if named and folder is None:
        return ProjectConfig, data
    if folder == "profiles" or (folder is None and "rules" in data):
        return Profile, data
    if folder == "skills":
        return SkillFile, data
    if folder == "evals" or (folder is None and "cases" in data):
        return EvalFile, data
    if folder is None and set(data) & PROJECT_ONLY and not set(data) - set(ProjectConfig.model_fields):
        return ProjectConfig, data
    workflow = data.get("kind") == "workflow" or "steps" in data
    return (PartialWorkflowAgent if workflow else PartialLlmAgent), data


def test_the_docs_have_yaml_examples() -> None:
    assert len(BLOCKS) >= 8
    assert any("agent-calls.md" in where for where, _, _ in BLOCKS)


@pytest.mark.parametrize(("where", "text", "partial"), BLOCKS, ids=[where for where, _, _ in BLOCKS])
def test_a_yaml_example_of_the_docs_is_valid(where: str, text: str, partial: bool) -> None:
    file, line = where.split(":")
    try:  # blank lines in front: a problem is reported at its line of the document
        data = parse(Path(file), "\n" * (int(line) - 1) + text, Interpolator({}, {}))
    except SourceError as exc:
        pytest.fail(f"{where}: the loader refuses this example: {exc.diagnostic.render()}")
    if partial:
        return
    first_line = text.lstrip().splitlines()[0]  # a `# ca.yaml` comment names the file
    model, data = _model_for(data, first_line)
    spec, problems = validate(model, data)
    assert spec is not None, f"{where} (as {model.__name__}):\n" + "\n".join(p.render() for p in problems)
    assert set(data) <= AGENT_KEYS | set(ProjectConfig.model_fields) | set(Profile.model_fields) | set(
        EvalFile.model_fields
    )
