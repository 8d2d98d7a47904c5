"""Load a project folder into validated specs, reporting every problem at once.

ca.yaml, agents/**/*.yaml, profiles/*.yaml, skills/*.yaml, .env
    ──read + parse (positions kept, ${VAR} interpolated)──▶ LMap
    ──extends: (deep merge)──▶ LMap
    ──pydantic models──▶ specs
    ──cross-reference checks──▶ Project

Every diagnostic is reported with the project's secret values masked (framework.spec.secret_values).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from framework.errors import Diagnostic, SpecError
from framework.resources import shipped_dir
from framework.spec.agent import AGENT_KINDS, AgentSpec, PartialLlmAgent, PartialWorkflowAgent
from framework.spec.checks import check_project
from framework.spec.common import did_you_mean
from framework.spec.interpolate import Interpolator, load_dotenv
from framework.spec.profile import Profile
from framework.spec.project import Project, ProjectConfig, sets_deployment
from framework.spec.salvage import Salvaged, salvage
from framework.spec.secret_values import masked, secret_values
from framework.spec.skill import SkillFile
from framework.spec.source import LList, LMap, Loc, SourceError, diag, parse, read_text
from framework.spec.validation import validate

PROJECT_FILES = ("ca.yaml", "ca.yml")
YAML_SUFFIXES = (".yaml", ".yml")


def load_project(root: Path | str, *, environ: Mapping[str, str] | None = None) -> Project:
    """Load and check the project at ``root``; raise SpecError with every error found."""
    return _Loader(Path(root), environ).load()


class _Loader:
    def __init__(self, root: Path, environ: Mapping[str, str] | None) -> None:
        self.root = root.resolve()
        self.diagnostics: list[Diagnostic] = []
        self.texts: dict[Path, str] = {}
        self.data: dict[str, LMap] = {}
        self.environ = environ
        self.invalid: dict[str, set[str]] = {"agent": set(), "profile": set(), "skill": set()}
        """Names of agents, profiles and skills whose files have errors (references to them are not "unknown")."""
        self.bases: set[Path] = set()
        """Files reached only through ``extends:``: each is validated on its own as a partial agent."""
        self.partial: dict[str, Salvaged[Any]] = {}
        """Owner (``agent:NAME``, ``project`` …) -> what remained of a file with errors, checked across files too."""

    # -- files -----------------------------------------------------------------

    def read(self, path: Path) -> LMap | None:
        """Parse one file; a problem becomes a diagnostic and None."""
        try:
            text = read_text(path)
            self.texts[path] = text
            data = parse(path, text, self.interpolate)
        except SourceError as exc:
            self.diagnostics.append(exc.diagnostic)
            return None
        if not isinstance(data, LMap):
            kind = "a list" if isinstance(data, LList) else f"a single value ({data!r})"
            where = getattr(data, "loc", Loc(path, 1, 1))
            self.diagnostics.append(
                diag(
                    where,
                    f"expected a mapping of keys at the top level, found {kind}",
                    hint="write one `key: value` per line, starting with `name: ...`",
                )
            )
            return None
        return data

    def files(self, folder: str, *, recursive: bool = False) -> list[Path]:
        base = self.root / folder
        if not base.is_dir():
            return []
        found = base.rglob("*") if recursive else base.iterdir()
        return sorted(
            p for p in found if p.suffix in YAML_SUFFIXES and p.is_file() and not p.name.startswith(("_", "."))
        )

    # -- the whole project -----------------------------------------------------

    def load(self) -> Project:
        if not self.root.is_dir():
            raise SpecError([Diagnostic(str(self.root), 0, 0, "project folder does not exist")])
        try:
            dotenv = load_dotenv(self.root)
        except SourceError as exc:
            self.diagnostics.append(exc.diagnostic)
            dotenv = {}
        self.interpolate = Interpolator(dotenv, self.environ)
        config = self.load_config()
        if config is None and any((self.root / name).is_file() for name in PROJECT_FILES):
            self.invalid["project"] = {"ca.yaml"}  # its errors are reported; its names are not "unknown"
        profiles, profile_sources = self.load_named(self.profile_files(), Profile, "profile")
        skills, skill_sources = self.load_named(self.files("skills"), SkillFile, "skill", key="id")
        agents, agent_sources = self.load_agents()
        if not agents and not any(d.severity == "error" for d in self.diagnostics):
            self.diagnostics.append(
                Diagnostic(
                    str(self.root / "agents"),
                    0,
                    0,
                    "the project has no agents",
                    hint="add agents/NAME.yaml, or run `ca init` to scaffold a project",
                )
            )
        project = Project(
            root=self.root,
            config=self.deployed(config or ProjectConfig()),
            agents=agents,
            profiles=profiles,
            skills=skills,
            sources={**agent_sources, **profile_sources, **skill_sources},
            secrets=frozenset(self.interpolate.secrets),
        )
        # An invalid ca.yaml does not stop the checks: agents are checked against the defaults.
        problems, tool_files = check_project(
            project,
            self.data,
            self.interpolate.variables,
            texts=self.texts,
            invalid=self.invalid,
            partial=self.partial,
        )
        self.diagnostics.extend(problems)
        # A value whose ${VAR} is undefined still holds '${VAR}': what the models say about
        # that text is noise next to "variable is not set", so only the latter is reported.
        failed = self.interpolate.failed
        self.diagnostics = [d for d in self.diagnostics if (d.file, d.line, d.column) not in failed]
        self.diagnostics.extend(self.interpolate.diagnostics)
        diagnostics = self.with_source_lines(self.diagnostics)
        if diagnostics:  # a message quotes the value it refuses, which may be a secret
            diagnostics = masked(diagnostics, secret_values(project, self.interpolate.variables, dotenv))
        errors = [d for d in diagnostics if d.severity == "error"]
        if errors:
            raise SpecError(diagnostics)
        return replace(project, warnings=tuple(diagnostics), tool_files=tool_files)

    def deployed(self, config: ProjectConfig) -> ProjectConfig:
        """``config`` with the deployment settings of the environment (``CA_STORE_URL`` …) over it:
        applied here, once, so that every reader of the config sees them."""
        environ = os.environ if self.environ is None else self.environ
        if not sets_deployment(environ):  # pydantic-settings: ~80 ms (CPU) to import
            return config
        from framework.spec.settings import deployed

        try:
            return deployed(config, environ)
        except SpecError as exc:
            self.diagnostics.extend(exc.diagnostics)
            return config

    def load_config(self) -> ProjectConfig | None:
        for name in PROJECT_FILES:
            path = self.root / name
            if path.is_file():
                data = self.read(path)
                if data is None:
                    return None
                self.data["project"] = data
                config, problems = validate(ProjectConfig, data, texts=self.texts)
                self.diagnostics.extend(problems)
                if config is None and (saved := salvage(ProjectConfig, data)) is not None:
                    config, self.data["project"], self.partial["project"] = saved.spec, saved.data, saved
                return config
        return ProjectConfig()

    def profile_files(self) -> list[Path]:
        """Built-in profiles first; a project profile of the same name replaces one."""
        own = self.files("profiles")
        builtin_dir = shipped_dir("profiles").resolve()
        if builtin_dir == (self.root / "profiles").resolve():
            return own
        builtin = sorted(p for p in builtin_dir.glob("*.yaml") if not p.name.startswith("_"))
        own_names = {p.stem for p in own}
        return [p for p in builtin if p.stem not in own_names] + own

    def load_named(
        self, paths: list[Path], model: type[Any], what: str, *, key: str = "name"
    ) -> tuple[dict[str, Any], dict[str, Path]]:
        specs: dict[str, Any] = {}
        sources: dict[str, Path] = {}
        for path in paths:
            data = self.read(path)
            if data is None:
                self.invalid[what].add(path.stem)
                continue
            spec, problems = validate(model, data, texts=self.texts)
            self.diagnostics.extend(problems)
            saved = salvage(model, data) if spec is None else None
            if saved is not None:
                spec, data = saved.spec, saved.data
            if spec is None:
                self.invalid[what].add(_name_in(data, key, path))
                continue
            name = getattr(spec, key)
            if name in specs:
                self.duplicate(data, key, what, name, sources[f"{what}:{name}"])
                continue
            specs[name] = spec
            sources[f"{what}:{name}"] = path
            self.data[f"{what}:{name}"] = data
            if saved is not None:
                self.partial[f"{what}:{name}"] = saved
        return specs, sources

    def duplicate(self, data: LMap, key: str, what: str, name: str, first: Path) -> None:
        if not first.is_relative_to(self.root):  # a built-in profile
            self.diagnostics.append(
                diag(
                    data.value_locs.get(key, data.loc),
                    f"duplicate {what} {name!r}: a built-in {what} has this {key}",
                    key_path=key,
                    hint=f"choose another {key}, or name the file {what}s/{name}.yaml to replace the built-in one",
                )
            )
            return
        self.diagnostics.append(
            diag(
                data.value_locs.get(key, data.loc),
                f"duplicate {what} {name!r}: already defined in {self.display(first)}",
                key_path=key,
                hint=f"give one of them another {key}",
            )
        )

    def display(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    # -- agents ----------------------------------------------------------------

    def load_agents(self) -> tuple[dict[str, AgentSpec], dict[str, Path]]:
        agents: dict[str, AgentSpec] = {}
        sources: dict[str, Path] = {}
        for path in self.files("agents", recursive=True):
            data = self.read_with_extends(path, ())
            if data is None:
                self.invalid["agent"].add(path.stem)
                continue
            data.pop("extends", None)
            kind = data.get("kind", "llm")
            model = AGENT_KINDS.get(kind) if isinstance(kind, str) else None
            if model is None:
                shown = repr(kind) if isinstance(kind, str) else "nothing (null)" if kind is None else f"{kind!r}"
                self.diagnostics.append(
                    diag(
                        data.value_locs["kind"],
                        f"unknown agent kind {shown}; kinds are: {', '.join(AGENT_KINDS)}",
                        key_path="kind",
                        hint=did_you_mean(kind, AGENT_KINDS) if isinstance(kind, str) else "",
                    )
                )
                self.invalid["agent"].add(_name_in(data, "name", path))
                continue
            spec, problems = validate(model, data, texts=self.texts)
            self.diagnostics.extend(problems)
            # A file with errors is still checked against the others: what of it is valid.
            saved = salvage(model, data) if spec is None else None
            if saved is not None:
                spec, data = saved.spec, saved.data
            if spec is None:
                self.invalid["agent"].add(_name_in(data, "name", path))
                continue
            if spec.name in agents:
                self.duplicate(data, "name", "agent", spec.name, sources[f"agent:{spec.name}"])
                continue
            agents[spec.name] = spec
            sources[f"agent:{spec.name}"] = path
            self.data[f"agent:{spec.name}"] = data
            if saved is not None:
                self.partial[f"agent:{spec.name}"] = saved
        for base in sorted(self.bases - set(self.files("agents", recursive=True))):
            self.check_base(base)
        return agents, sources

    def check_base(self, path: Path) -> None:
        """An ``extends:`` base against the agent schema, no key required: an error a child hides
        (by setting the same key) is still an error in the file."""
        data = self.read(path)
        if data is None:
            return  # its syntax error is reported already, through the agent that extends it
        kind = data.get("kind")
        if kind is None:
            workflow = "steps" in data or "output" in data
        elif kind in AGENT_KINDS:
            workflow = kind == "workflow"
        else:
            self.diagnostics.append(
                diag(
                    data.value_locs["kind"],
                    f"unknown agent kind {kind!r}; kinds are: {', '.join(AGENT_KINDS)}",
                    key_path="kind",
                    hint=did_you_mean(kind, AGENT_KINDS) if isinstance(kind, str) else "",
                )
            )
            return
        model = PartialWorkflowAgent if workflow else PartialLlmAgent
        _, problems = validate(model, data, texts=self.texts)
        self.diagnostics.extend(problems)

    def read_with_extends(self, path: Path, chain: tuple[Path, ...]) -> LMap | None:
        data = self.read(path)
        if data is None or "extends" not in data:
            return data
        refs = data["extends"]
        ref_list = refs if isinstance(refs, list) else [refs]
        if not ref_list:
            self.diagnostics.append(
                diag(
                    data.value_locs["extends"],
                    "`extends` is an empty list",
                    key_path="extends",
                    hint="give a file path, like '_base.yaml', or remove `extends`",
                )
            )
            return None
        merged: LMap | None = None
        for i, ref in enumerate(ref_list):
            where = data.value_locs["extends"] if not isinstance(refs, LList) else refs.item_locs[i]
            if not isinstance(ref, str) or not ref:
                self.diagnostics.append(
                    diag(where, "`extends` takes a file path, like '_base.yaml'", key_path="extends")
                )
                return None
            if not ref.endswith(YAML_SUFFIXES):
                self.diagnostics.append(
                    diag(
                        where,
                        f"`extends` file {ref!r} is not a YAML file",
                        key_path="extends",
                        hint="extend a .yaml or .yml file, like '_base.yaml'",
                    )
                )
                return None
            base_path = (path.parent / ref).resolve()
            if not base_path.is_relative_to(self.root):
                self.diagnostics.append(
                    diag(where, f"`extends` file {ref!r} is outside the project", key_path="extends")
                )
                return None
            if base_path in chain or base_path == path:
                cycle = " -> ".join(self.display(p) for p in (*chain, path, base_path))
                self.diagnostics.append(diag(where, f"`extends` cycle: {cycle}", key_path="extends"))
                return None
            if not base_path.is_file():
                self.diagnostics.append(
                    diag(
                        where,
                        f"`extends` file {ref!r} not found (looked for {self.display(base_path)})",
                        key_path="extends",
                    )
                )
                return None
            self.bases.add(base_path)
            base = self.read_with_extends(base_path, (*chain, path))
            if base is None:
                return None
            base.pop("extends", None)
            merged = base if merged is None else deep_merge(merged, base)
        assert merged is not None
        return deep_merge(merged, data)

    # -- output ----------------------------------------------------------------

    def with_source_lines(self, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
        out = []
        seen: set[Diagnostic] = set()
        for d in sorted(diagnostics, key=lambda d: (d.severity != "error", d.file, d.line, d.column)):
            if d in seen:  # e.g. a base file shared through `extends` by several agents
                continue
            seen.add(d)
            lines = self.texts.get(Path(d.file), "").splitlines()
            source = lines[d.line - 1] if 0 < d.line <= len(lines) else None
            out.append(replace(d, file=_shown(Path(d.file)), source_line=source))
        return out


def _name_in(data: LMap, key: str, path: Path) -> str:
    """The name an invalid file gives itself (its file name when it has none)."""
    name = data.get(key)
    return name if isinstance(name, str) else path.stem


def _shown(path: Path) -> str:
    """A path as the user can open it: relative to the current directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def deep_merge(base: LMap, override: LMap) -> LMap:
    """``override`` on top of ``base``: mappings merge key by key; lists and scalars are replaced."""
    result = LMap(override.loc)
    for source in (base, override):
        for key, value in source.items():
            current = result.get(key)
            if isinstance(current, LMap) and isinstance(value, LMap):
                value = deep_merge(current, value)
            result[key] = value
            result.key_locs[key] = source.key_locs[key]
            result.value_locs[key] = source.value_locs[key]
    return result
