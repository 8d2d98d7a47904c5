"""Symbolic links through the real `ca run` process: what a link hides stays hidden on every fs tool."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ProjectFactory, run_ca

SECRET = "PROJECT-SECRET-77"
AGENT = """
    name: editor
    profile: autonomous
    tools: [fs.read, fs.write, fs.list, fs.search]
    capabilities: {fs: {read: ["src/**"], write: ["src/**"]}}
"""


@pytest.fixture
def project(make_project: ProjectFactory) -> Path:
    root = make_project({"agents/editor.yaml": AGENT, "src/a.txt": "plain line\n", "secret/s.txt": f"{SECRET}\n"})
    (root / "src" / "link.txt").symlink_to(Path("..") / "secret" / "s.txt")
    return Path(os.path.realpath(root))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("fs.search", {"pattern": "SECRET", "path": "src"}),
        ("fs.read", {"path": "src/link.txt"}),
        ("fs.list", {"path": "src"}),
        ("fs.write", {"path": "src/link.txt", "content": "overwritten"}),
    ],
)
def test_no_fs_tool_reaches_through_a_link_to_a_file_outside_the_globs(
    project: Path, tool: str, args: dict[str, str]
) -> None:
    result = run_ca("run", "editor", f"@tool {tool} {json.dumps(args)}", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    [finished] = [json.loads(line) for line in result.stdout.splitlines() if '"tool_result"' in line]
    if tool == "fs.list":  # the listing does not reveal the link either
        assert "a.txt" in finished["result"] and "link.txt" not in finished["result"]
    else:
        assert finished["is_error"] or tool == "fs.search", finished
    assert (project / "secret" / "s.txt").read_text() == f"{SECRET}\n"
