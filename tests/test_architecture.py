"""The one-way layer rule of DESIGN.md §3, checked on the source of every framework module.

    base (errors, resources, settings) ← spec ← compiler ← runtime ← protocols ← cli

A module may import its own layer and the layers to its left, never to its right.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FRAMEWORK = Path(__file__).resolve().parents[1] / "framework"
LAYERS = ["base", "spec", "compiler", "runtime", "protocols", "cli"]
HEAVY = ("langgraph", "langchain", "langchain_core", "starlette", "a2a", "uvicorn", "watchfiles", "acp")


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    if parts[-1] == "__main__":
        return "cli"
    return "base"


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(FRAMEWORK.rglob("*.py")):
        rel = path.relative_to(FRAMEWORK.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out.append((name, path))
    return out


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


@pytest.mark.parametrize(("module", "path"), _modules(), ids=[m for m, _ in _modules()])
def test_module_imports_only_layers_to_its_left(module: str, path: Path) -> None:
    own = LAYERS.index(_layer(module))
    for imported in _imports(path):
        if imported.split(".")[0] != "framework":
            continue
        other = LAYERS.index(_layer(imported))
        assert other <= own, f"{module} ({LAYERS[own]}) imports {imported} ({LAYERS[other]})"


@pytest.mark.parametrize(
    ("module", "path"),
    [(m, p) for m, p in _modules() if _layer(m) in ("base", "spec")],
    ids=[m for m, _ in _modules() if _layer(m) in ("base", "spec")],
)
def test_spec_layer_imports_no_runtime_library(module: str, path: Path) -> None:
    heavy = [i for i in _imports(path) if i.split(".")[0] in HEAVY]
    assert heavy == [], f"{module} imports {heavy}"


def test_the_rule_itself_catches_a_violation(tmp_path: Path) -> None:
    """Guard the guard: a spec module importing the runtime is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from framework.runtime.runtime import Runtime\n")
    imported = _imports(bad)
    assert LAYERS.index(_layer(imported[0])) > LAYERS.index(_layer("framework.spec.bad"))
