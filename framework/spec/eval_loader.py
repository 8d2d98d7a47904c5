"""Load ``evals/*.yaml`` of a loaded project, reporting every problem at once (file:line:col)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from framework.errors import Diagnostic, SpecError
from framework.spec.agent import LlmAgent
from framework.spec.common import did_you_mean
from framework.spec.evals import EvalCase, EvalFile
from framework.spec.project import Project
from framework.spec.source import LList, LMap, Loc, SourceError, diag, parse, read_text
from framework.spec.validation import validate

EVALS_DIR = "evals"


@dataclass(frozen=True)
class EvalSuite:
    """One eval file, validated: where it is and its cases."""

    path: Path
    spec: EvalFile

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def cases(self) -> list[EvalCase]:
        return list(self.spec.cases)


def eval_files(root: Path) -> list[Path]:
    """The eval files of the project at ``root``: ``evals/*.yaml`` (``_`` and ``.`` files skipped)."""
    folder = root / EVALS_DIR
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml") and p.is_file() and not p.name.startswith(("_", "."))
    )


def load_evals(project: Project, paths: list[Path] | None = None) -> list[EvalSuite]:
    """Every eval file of ``project`` (or ``paths``), checked against it; SpecError with all problems."""
    diagnostics: list[Diagnostic] = []
    texts: dict[Path, str] = {}
    suites: list[EvalSuite] = []
    for path in eval_files(project.root) if paths is None else paths:
        try:
            texts[path] = read_text(path)
            data = parse(path, texts[path])
        except SourceError as exc:
            diagnostics.append(exc.diagnostic)
            continue
        if not isinstance(data, LMap):
            where = getattr(data, "loc", Loc(path, 1, 1))
            diagnostics.append(diag(where, "expected a mapping with a `cases:` list at the top level"))
            continue
        spec, problems = validate(EvalFile, data, texts=texts)
        diagnostics.extend(problems)
        diagnostics.extend(_check(project, data))
        if spec is not None:
            suites.append(EvalSuite(path, spec))
    if diagnostics:
        raise SpecError([_with_source(d, texts) for d in sorted(diagnostics, key=lambda d: (d.file, d.line, d.column))])
    return suites


def _check(project: Project, data: LMap) -> list[Diagnostic]:
    """References the models cannot check (agents of the project, case names unique in the file),
    read from the data so they are reported with the models' own problems."""
    out: list[Diagnostic] = []
    cases = data.get("cases")
    if not isinstance(cases, LList):
        return out
    seen: dict[str, int] = {}
    for i, item in enumerate(cases):
        if not isinstance(item, LMap):
            continue
        name, agent = item.get("name"), item.get("agent")
        if isinstance(name, str) and name in seen:
            out.append(
                diag(
                    item.value_locs["name"],
                    f"duplicate case name {name!r}: case {seen[name] + 1} has it",
                    key_path=f"cases[{i}].name",
                    hint="give every case of a file its own name",
                )
            )
        if isinstance(name, str):
            seen.setdefault(name, i)
        if isinstance(agent, str) and agent not in project.agents:
            known = ", ".join(sorted(project.agents))
            out.append(
                diag(
                    item.value_locs["agent"],
                    f"unknown agent {agent!r}",
                    key_path=f"cases[{i}].agent",
                    hint=did_you_mean(agent, project.agents) or f"agents: {known}",
                )
            )
        expect = item.get("expect")
        if isinstance(expect, LMap) and expect.get("judged") and project.config.evals.judge is None:
            out.append(
                diag(
                    expect.key_locs["judged"],
                    "`judged` criteria need a judge model, and the project has none",
                    key_path=f"cases[{i}].expect.judged",
                    hint="set evals: {judge: MODEL} in ca.yaml, e.g. judge: openai:gpt-4o-mini",
                )
            )
        model = item.get("model")
        spec = project.agents.get(agent if isinstance(agent, str) else project.default_agent or "")
        if model is not None and spec is not None and not isinstance(spec, LlmAgent):
            out.append(
                diag(
                    item.value_locs["model"],
                    f"agent {spec.name!r} is a workflow: it has no model to replace",
                    key_path=f"cases[{i}].model",
                    hint="set the model on the agents its steps call, or remove `model:`",
                )
            )
    return out


def _with_source(d: Diagnostic, texts: dict[Path, str]) -> Diagnostic:
    lines = texts.get(Path(d.file), "").splitlines()
    source = lines[d.line - 1] if 0 < d.line <= len(lines) else None
    try:
        shown = str(Path(d.file).relative_to(Path.cwd()))
    except ValueError:
        shown = d.file
    return replace(d, file=shown, source_line=source)
