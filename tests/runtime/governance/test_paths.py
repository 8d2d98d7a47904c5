"""File capabilities: confinement to the project root (adversarial) and glob matching."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from framework.runtime.governance import ToolCall, check_capabilities
from framework.runtime.governance.paths import path_matches
from framework.runtime.governance.policy import policy_for
from framework.spec import load_project
from framework.spec.capabilities import Capabilities

EVERYTHING = Capabilities.model_validate({"fs": {"read": ["**"], "write": ["**"]}})


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project next to an ``outside`` folder, with links escaping it and a link staying inside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s3cret", encoding="utf-8")
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print(1)\n", encoding="utf-8")
    (root / "docs").mkdir()
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text("k", encoding="utf-8")
    (root / "src" / "link_out").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    (root / "docs" / "dangling").symlink_to(outside / "not-yet.txt")
    (root / "docs" / "relative_out").symlink_to(Path("..") / ".." / "outside" / "secret.txt")
    (root / "inner").symlink_to(root / "src", target_is_directory=True)
    (root / "docs" / "to_secrets").symlink_to(Path("..") / "secrets", target_is_directory=True)
    return root


# (tool, path) — every one must be denied even when the globs allow everything.
ESCAPES: list[tuple[str, str]] = [
    ("fs.read", "../outside/secret.txt"),
    ("fs.read", "src/../../outside/secret.txt"),
    ("fs.read", "/etc/passwd"),
    ("fs.write", "//server/share/x"),
    ("fs.read", "~/.ssh/id_rsa"),
    ("fs.read", "~root/.profile"),
    ("fs.read", "..\\outside\\secret.txt"),
    ("fs.read", "C:\\Windows\\win.ini"),
    ("fs.write", "c:/temp/x"),
    ("fs.read", "src/link_out"),
    ("fs.read", "linkdir/secret.txt"),
    ("fs.list", "linkdir"),
    ("fs.search", "linkdir"),
    ("fs.write", "docs/dangling"),
    ("fs.read", "docs/relative_out"),
    ("fs.write", "linkdir/new.txt"),
    ("fs.read", "src/a.py\x00.txt"),
    ("fs.read", "src/a.py\n"),
    ("fs.read", "%2e%2e/outside/secret.txt"),
    ("fs.read", "..%2foutside%2fsecret.txt"),
    ("fs.read", "%252e%252e/outside/secret.txt"),
    ("fs.read", "%c0%ae%c0%ae/outside/secret.txt"),
    ("fs.read", "src/%2e%2e/%2e%2e/outside/secret.txt"),
    ("fs.read", "．．/outside/secret.txt"),
    ("fs.read", "‥/outside/secret.txt"),
    ("fs.read", "．．＼outside＼secret.txt"),
    ("fs.read", "src/%00"),
]


def _call(tool: str, path: str) -> ToolCall:
    return ToolCall.builtin(tool, path=path)


def _absolute_outside(project: Path) -> str:
    return str(project.parent / "outside" / "secret.txt")


@pytest.mark.parametrize(("tool", "path"), ESCAPES, ids=[repr(p) for _, p in ESCAPES])
def test_an_escape_is_denied_whatever_the_globs(project: Path, tool: str, path: str) -> None:
    decision = check_capabilities(_call(tool, path), EVERYTHING, root=project)
    assert decision.denied, decision
    assert decision.rule == ("capabilities.fs.write" if tool == "fs.write" else "capabilities.fs.read")
    assert "no capability can allow a path outside the project root" in decision.reason
    assert any(
        hint in decision.reason
        for hint in (
            "relative to the project root",
            "'..' may not climb",
            "symbolic link",
            "control character",
            "write the path plainly",
            "not valid UTF-8",
        )
    ), decision.reason


def test_the_adversarial_suite_is_large_enough() -> None:
    assert len(ESCAPES) >= 12


def test_an_absolute_path_to_the_outside_file_is_denied(project: Path) -> None:
    decision = check_capabilities(_call("fs.read", _absolute_outside(project)), EVERYTHING, root=project)
    assert decision.denied
    assert "is absolute; give a path relative to the project root" in decision.reason


def test_an_absolute_path_inside_the_root_is_denied_too(project: Path) -> None:
    decision = check_capabilities(_call("fs.read", str(project / "src" / "a.py")), EVERYTHING, root=project)
    assert decision.denied
    assert "is absolute" in decision.reason


def test_a_symlinked_root_is_resolved_before_confining(project: Path) -> None:
    alias = project.parent / "alias"
    alias.symlink_to(project, target_is_directory=True)
    assert check_capabilities(_call("fs.read", "src/a.py"), EVERYTHING, root=alias).allowed
    assert check_capabilities(_call("fs.read", "linkdir/secret.txt"), EVERYTHING, root=alias).denied


def test_a_policy_resolves_its_root_once_and_judges_paths_with_it(project: Path) -> None:
    alias = project.parent / "alias"
    alias.symlink_to(project, target_is_directory=True)
    (alias / "agents").mkdir()
    (alias / "agents" / "a.yaml").write_text("name: a\nmodel: offline\ncapabilities: {fs: {read: ['**']}}\n")
    policy = policy_for(load_project(alias).agents["a"], load_project(alias))
    assert policy.real_root == Path(os.path.realpath(alias))
    call = _call("fs.read", "src/a.py")
    assert check_capabilities(call, EVERYTHING, root=policy.real_root, root_is_real=True).allowed
    assert check_capabilities(_call("fs.read", "linkdir/secret.txt"), EVERYTHING, root=policy.real_root).denied


def test_governance_judges_the_file_the_tool_touches(project: Path) -> None:
    from framework.compiler.builtin_tools import resolve_path

    caps = Capabilities.model_validate({"fs": {"read": ["src/**"]}})
    for path in ("src/a.py", "inner/a.py", "src/../src/a.py", "./src/a.py", "src\\a.py"):
        decision = check_capabilities(_call("fs.read", path), caps, root=project)
        assert decision.allowed, (path, decision)
        real = resolve_path(Path(os.path.realpath(project)), path)
        assert f"{real.relative_to(os.path.realpath(project)).as_posix()!r} matches" in decision.reason


def test_a_link_inside_the_root_is_judged_by_where_it_leads(project: Path) -> None:
    caps = Capabilities.model_validate({"fs": {"read": ["docs/**", "inner/**"]}})
    decision = check_capabilities(_call("fs.read", "docs/to_secrets/key"), caps, root=project)
    assert decision.denied
    assert decision.reason.startswith("path 'secrets/key' is not in capabilities.fs.read")
    assert "add a glob such as 'secrets/**' to capabilities.fs.read" in decision.reason
    assert check_capabilities(_call("fs.read", "inner/a.py"), caps, root=project).denied  # it is src/a.py


def test_a_path_outside_the_globs_says_which_glob_to_add(project: Path) -> None:
    caps = Capabilities.model_validate({"fs": {"read": ["src/**"]}})
    decision = check_capabilities(_call("fs.read", "secrets/x"), caps, root=project)
    assert decision.denied
    assert decision.reason == (
        "path 'secrets/x' is not in capabilities.fs.read (nor in fs.write, which also allows reading); "
        "add a glob such as 'secrets/**' to capabilities.fs.read"
    )


def test_a_write_needs_a_write_glob_and_a_write_glob_allows_reading(project: Path) -> None:
    caps = Capabilities.model_validate({"fs": {"read": ["src/**"], "write": ["out/*.txt"]}})
    denied = check_capabilities(_call("fs.write", "src/a.py"), caps, root=project)
    assert denied.denied
    assert (
        denied.reason
        == "path 'src/a.py' is not in capabilities.fs.write; add a glob such as 'src/**' to capabilities.fs.write"
    )
    assert check_capabilities(_call("fs.write", "out/new.txt"), caps, root=project).allowed
    read = check_capabilities(_call("fs.read", "out/new.txt"), caps, root=project)
    assert read.allowed
    assert read.reason == "'out/new.txt' matches 'out/*.txt' in capabilities.fs.write"


def test_no_capabilities_allow_no_file(project: Path) -> None:
    decision = check_capabilities(_call("fs.read", "src/a.py"), None, root=project)
    assert decision.denied
    assert "the agent declares no capabilities; add capabilities: {fs: {read: ['src/**']}}" in decision.reason


def test_listing_the_root_needs_a_glob_covering_it(project: Path) -> None:
    narrow = Capabilities.model_validate({"fs": {"read": ["src/**"]}})
    decision = check_capabilities(ToolCall.builtin("fs.list"), narrow, root=project)
    assert decision.denied
    assert "add a glob such as '**'" in decision.reason
    assert check_capabilities(ToolCall.builtin("fs.search", pattern="x"), EVERYTHING, root=project).allowed
    assert check_capabilities(_call("fs.list", "src"), narrow, root=project).allowed


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "the path is empty; use '.' for the project root"),
        (None, "fs.read needs a 'path' argument"),
        (3, "the path must be a string, got int"),
    ],
)
def test_a_missing_or_malformed_path_is_denied(project: Path, path: object, reason: str) -> None:
    call = ToolCall("fs.read", "fs.read", {} if path is None else {"path": path})
    decision = check_capabilities(call, EVERYTHING, root=project)
    assert decision.denied
    assert decision.reason.startswith(reason)


def test_harmless_encodings_stay_literal(project: Path) -> None:
    """Percent-escapes and compatibility characters that do not change the meaning are file names."""
    caps = Capabilities.model_validate({"fs": {"read": ["src/**", "*.txt"]}})
    assert check_capabilities(_call("fs.read", "100%25.txt"), caps, root=project).allowed
    fullwidth = check_capabilities(_call("fs.read", "ｓｒｃ/a.py"), caps, root=project)
    assert fullwidth.denied
    assert fullwidth.reason.startswith("path 'ｓｒｃ/a.py' is not in capabilities.fs.read")


@pytest.mark.parametrize(
    ("glob", "path", "expected"),
    [
        ("src/**", "src", True),
        ("src/**", "src/a/b/c.py", True),
        ("src/**", "srcx/a.py", False),
        ("src/*", "src/a.py", True),
        ("src/*", "src/a/b.py", False),
        ("src/*.py", "src/.hidden.py", True),
        ("**/*.md", "a.md", True),
        ("**/*.md", "docs/deep/a.md", True),
        ("**/*.md", "docs/a.mdx", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**/b", "a/xb", False),
        ("docs/", "docs/a/b", True),
        ("./docs/*", "docs/a", True),
        ("src/?.py", "src/a.py", True),
        ("src/?.py", "src/ab.py", False),
        ("**", ".", True),
        ("*", "a/b", False),
        ("a.b", "axb", False),
        ("[ab].py", "a.py", False),
    ],
)
def test_path_globs(glob: str, path: str, expected: bool) -> None:
    assert path_matches(glob, path) is expected
