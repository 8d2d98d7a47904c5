"""``ca init``: copy a template from ``templates/`` into a folder, never clobbering silently."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from framework.errors import UsageError
from framework.resources import shipped_dir

DESCRIPTION_FILE = "TEMPLATE"
"""First line: the template's description. Not copied."""
NAME_TOKEN = "{{ project_name }}"
SCHEMA_DIR = Path(".ca") / "schemas"


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str


@dataclass
class ScaffoldResult:
    created: list[Path] = field(default_factory=list)
    overwritten: list[Path] = field(default_factory=list)
    agent: str = ""


def available_templates() -> list[Template]:
    root = shipped_dir("templates")
    found = []
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        marker = path / DESCRIPTION_FILE
        if path.is_dir() and marker.is_file():
            description = marker.read_text(encoding="utf-8").strip().splitlines()[0]
            found.append(Template(path.name, path, description))
    return found


def scaffold(directory: Path, template: str, *, force: bool = False, name: str | None = None) -> ScaffoldResult:
    """Copy ``template`` into ``directory``. Without ``force``, any existing file aborts before writing."""
    templates = {t.name: t for t in available_templates()}
    if template not in templates:
        from framework.spec.common import did_you_mean

        hint = did_you_mean(template, templates)
        raise UsageError(
            f"unknown template {template!r}{f' ({hint})' if hint else ''}; "
            f"available: {', '.join(templates) or 'none'} (see `ca init --list`)"
        )
    _check_folder(directory)
    source = templates[template].path
    project_name = name or _slug(directory.resolve().name)
    files = sorted(p for p in source.rglob("*") if p.is_file() and p.name != DESCRIPTION_FILE)
    targets = {src: directory / src.relative_to(source) for src in files}
    existing = [t for t in targets.values() if t.exists()]
    if existing and not force:
        listed = "\n".join(f"  {p}" for p in existing)
        raise UsageError(
            f"these files already exist; nothing was written:\n{listed}\n"
            "Use --force to overwrite them, or choose an empty folder."
        )
    result = ScaffoldResult()
    from framework.spec.schema import write_schemas

    try:
        for src, dst in targets.items():
            dst.parent.mkdir(parents=True, exist_ok=True)
            (result.overwritten if dst.exists() else result.created).append(dst)
            data = src.read_bytes()
            if src.suffix in (".yaml", ".yml", ".md", ".py", ".toml", ".txt", ""):
                data = data.decode("utf-8").replace(NAME_TOKEN, project_name).encode("utf-8")
            dst.write_bytes(data)
        write_schemas(directory / SCHEMA_DIR)
    except OSError as exc:  # a read-only folder, a file where a folder goes (``.ca``), a full disk
        where = exc.filename or directory
        raise UsageError(f"cannot write {where}: {exc.strerror or exc}; choose another folder") from exc
    agents = sorted(p.stem for p in (directory / "agents").glob("*.yaml") if not p.name.startswith("_"))
    result.agent = _default_agent(directory) or (agents[0] if agents else "AGENT")
    return result


def _default_agent(directory: Path) -> str | None:
    """The ``default_agent`` of the scaffolded ca.yaml, the agent "Next:" tells the user to run."""
    from framework.spec.source import SourceError, parse

    path = directory / "ca.yaml"
    try:
        data = parse(path, path.read_text(encoding="utf-8"))
    except (OSError, SourceError):
        return None  # a template without a readable ca.yaml: the first agent is named instead
    agent = data.get("default_agent") if isinstance(data, dict) else None
    return agent if isinstance(agent, str) else None


def _check_folder(directory: Path) -> None:
    """A UsageError unless ``directory`` is a folder or can become one (no file on its way)."""
    for folder in (directory, *directory.parents):
        if folder.exists() or folder.is_symlink():
            if not folder.is_dir():
                where = "" if folder == directory else f" (in the way of {directory})"
                raise UsageError(f"{folder} is a file, not a folder{where}; choose another folder for the project")
            return


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-")
    return slug or "my-agents"
