"""The import rules of docs/architecture.md, 'Layers', checked on the source of every framework module.

    base (errors, resources, settings) ← spec ← compiler ← runtime ← protocols ← cli

1. A module imports its own layer and the layers to its left, never to its right.
2. Only ``framework/protocols/`` imports the protocol SDKs: a2a-sdk (``a2a``) and the ACP SDK
   (``acp``). One exception: the card builder ``framework/compiler/card.py`` stays in the compiler
   and builds a2a's ``AgentCard`` (the Bundle caches cards without running a protocol).
3. ``base`` and ``spec`` import no runtime library (langgraph, starlette, ...): loading a project
   stays light.
4. No import circle between framework modules.

Every import counts: absolute ones, relative ones (``from . import x``, ``from ..runtime import y``,
resolved against the module's package), those inside functions or under ``TYPE_CHECKING`` (moving
an import into a function hides a circle from Python, not from the reader), and a constant string
given to ``importlib.import_module`` or ``__import__``.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
FRAMEWORK = REPO / "framework"
LAYERS = ["base", "spec", "compiler", "runtime", "protocols", "cli"]
HEAVY = (
    "langgraph",
    "langchain",
    "langchain_core",
    "starlette",
    "a2a",
    "uvicorn",
    "watchfiles",
    "acp",
    "opentelemetry",
    "mcp",
)
PROTOCOL_SDKS = ("a2a", "acp")
CARD_BUILDER = "framework.compiler.card"
"""The one module outside ``framework.protocols`` that may import a2a-sdk (it builds the agent cards)."""


class Import(NamedTuple):
    """One import in a module: what it names (absolute, dotted) and where it stands."""

    module: str
    """The importing module."""
    target: str
    """What is imported, absolute: ``from ..tasks import TaskStore`` in framework.runtime.runner
    gives ``framework.tasks.TaskStore``; ``from framework import cli`` gives ``framework.cli``
    (a name in a module: :func:`graph` reduces it to the module)."""
    source: str
    """The module the statement names: ``a2a.types`` for ``from a2a.types import Task``."""
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package folder ``package`` (``framework/``), by dotted name.

    ``fixtures`` folders hold data (projects with deliberately broken tool files), not modules.
    """
    found = {}
    for path in sorted(package.rglob("*.py")):
        if "fixtures" in path.relative_to(package).parts:
            continue
        rel = path.relative_to(package.parent).with_suffix("")
        found[".".join(rel.parts).removesuffix(".__init__")] = path
    return found


def _string_import(node: ast.Call) -> str | None:
    """The module named by ``importlib.import_module("x")``, ``import_module("x")`` or ``__import__("x")``."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def imports(module: str, path: Path) -> Iterator[Import]:
    """Every import of ``module`` (its source at ``path``), anywhere in the file, made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - (node.level - 1)]
                assert up, f"{path}:{node.lineno}: a relative import above the top package"
                base = ".".join(up) + (f".{node.module}" if node.module else "")
            for alias in node.names:
                target = base if alias.name == "*" else f"{base}.{alias.name}"
                yield Import(module, target, base, path, node.lineno)
        elif isinstance(node, ast.Call) and (named := _string_import(node)) is not None:
            yield Import(module, named, named, path, node.lineno)


def all_imports(package: Path) -> Iterator[Import]:
    """Every import of every module of ``package``."""
    for module, path in modules(package).items():
        yield from imports(module, path)


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    if parts[-1] == "__main__":
        return "cli"
    return "base"


def _top(target: str) -> str:
    return target.split(".")[0]


# -- the rules, on any package folder (the real one, or a throwaway copy) ---------------------------------


def upward_imports(package: Path) -> list[str]:
    """Imports of a layer to the module's right (rule 1), one line each."""
    found = []
    for imp in all_imports(package):
        if _top(imp.target) != "framework":
            continue
        own, other = layer(imp.module), layer(imp.target)
        if LAYERS.index(other) > LAYERS.index(own):
            found.append(
                f"{imp.where()}: {imp.module} ({own}) imports {imp.target} ({other}): a layer may use only "
                f"the layers to its left; move what both need into the lower layer, or pass it in"
            )
    return found


def protocol_sdk_imports(package: Path) -> list[str]:
    """Imports of a2a-sdk or the ACP SDK outside framework.protocols and the card builder (rule 2)."""
    found = (
        f"{imp.where()}: {imp.module} imports {imp.source}: protocol SDKs belong in framework/protocols/"
        for imp in all_imports(package)
        if _top(imp.source) in PROTOCOL_SDKS and layer(imp.module) != "protocols" and imp.module != CARD_BUILDER
    )
    return list(dict.fromkeys(found))  # one line per statement, not per imported name


def heavy_imports(package: Path) -> list[str]:
    """Runtime libraries imported by the base or spec layer (rule 3)."""
    found = (
        f"{imp.where()}: {imp.module} ({layer(imp.module)}) imports the runtime library {imp.source}"
        for imp in all_imports(package)
        if layer(imp.module) in ("base", "spec") and _top(imp.source) in HEAVY
    )
    return list(dict.fromkeys(found))


def graph(package: Path) -> dict[str, set[str]]:
    """Module -> the framework modules it imports (a name in a module counts as that module)."""
    known = modules(package)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for imp in all_imports(package):
        target = imp.target
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != imp.module:
            edges[imp.module].add(target)
    return edges


def circles(package: Path) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan), sorted."""
    edges = graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def _shown_circles(package: Path) -> list[str]:
    edges = graph(package)
    return [
        " ; ".join(f"{m} -> {', '.join(sorted(edges[m] & set(circle)))}" for m in circle) for circle in circles(package)
    ]


# -- the framework keeps the rules ------------------------------------------------------------------------


def test_no_module_imports_a_layer_to_its_right() -> None:
    assert upward_imports(FRAMEWORK) == []


def test_only_the_protocols_and_the_card_builder_import_a_protocol_sdk() -> None:
    assert protocol_sdk_imports(FRAMEWORK) == []


def test_the_spec_layer_imports_no_runtime_library() -> None:
    assert heavy_imports(FRAMEWORK) == []


def test_no_import_circle() -> None:
    assert _shown_circles(FRAMEWORK) == [], "break each circle by moving the shared piece to the module that owns it"


def test_no_test_module_imports_another_test_module() -> None:
    """Helpers live in support modules (conftest.py, serving.py, ...): a test module imports none of another."""
    known = modules(REPO / "tests")
    found = []
    for imp in all_imports(REPO / "tests"):
        target = imp.target
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.rpartition(".")[2].startswith("test_") and target != imp.module:
            found.append(f"{imp.where()}: {imp.module} imports {imp.target}")
    assert found == [], "move what both use into a support module of tests/"


def test_no_source_cites_a_design_brief_outside_the_repository() -> None:
    brief = "DESIGN" + ".md"  # spelled in two pieces so this file does not cite it either
    files = [REPO / name for name in ("README.md", "pyproject.toml", "Makefile")]
    files += [p for folder in ("framework", "tests", "bench", "docs") for p in sorted((REPO / folder).rglob("*"))]
    citing = [
        f"{path.relative_to(REPO)}:{n}"
        for path in files
        if path.suffix in (".py", ".md", ".sh", ".yaml", ".toml", "") and path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1)
        if brief in line
    ]
    assert citing == [], "cite docs/architecture.md or another file of docs/ instead"


# -- the checks catch what they are for (on a throwaway copy of the framework) -----------------------------


def _copy(tmp_path: Path, extra: dict[str, str]) -> Path:
    """The framework's source copied under ``tmp_path``, plus ``extra`` files (path in the package: text)."""
    package = tmp_path / "framework"
    shutil.copytree(FRAMEWORK, package, ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in extra.items():
        (package / name).write_text(text, encoding="utf-8")
    return package


def test_an_upward_relative_import_and_a_string_import_of_a_later_layer_are_reported(tmp_path: Path) -> None:
    package = _copy(
        tmp_path,
        {
            "spec/upward.py": (
                "import importlib\n"
                "from ..runtime import runtime\n"
                "\n"
                "def later():\n"
                "    return importlib.import_module('framework.cli.app')\n"
            )
        },
    )
    found = upward_imports(package)
    where = package / "spec" / "upward.py"
    assert [line.split(": a layer")[0] for line in found] == [
        f"{where}:2: framework.spec.upward (spec) imports framework.runtime.runtime (runtime)",
        f"{where}:5: framework.spec.upward (spec) imports framework.cli.app (cli)",
    ]


def test_a_protocol_sdk_imported_by_the_runtime_is_reported(tmp_path: Path) -> None:
    package = _copy(tmp_path, {"runtime/leak.py": "def card():\n    from a2a.types import AgentCard\n"})
    assert protocol_sdk_imports(package) == [
        f"{package / 'runtime' / 'leak.py'}:2: framework.runtime.leak imports a2a.types: "
        "protocol SDKs belong in framework/protocols/"
    ]


def test_a_circle_through_an_import_inside_a_function_is_reported(tmp_path: Path) -> None:
    package = _copy(
        tmp_path,
        {
            "compiler/ping.py": "def ping():\n    from framework.compiler.pong import pong\n    return pong\n",
            "compiler/pong.py": "from . import ping\n\npong = ping\n",
        },
    )
    assert circles(package) == [["framework.compiler.ping", "framework.compiler.pong"]]
