"""Symbolic links and the file tools: every file a tool touches is judged by where it really is.

The agent may read and write ``src/**``. Inside ``src`` there are links to a file of the project
outside those globs (``secret/s.txt``), to a folder of it (``secret/``) and to a file outside the
project. Each fs tool runs through the real Runtime, asked by the offline model's ``@tool`` lines.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

from framework.errors import PathRefused
from framework.runtime.events import ToolCallFinished
from tests.conftest import ProjectFactory
from tests.driving import drive, results

PROJECT_SECRET = "PROJECT-SECRET-41"
OUTSIDE_SECRET = "OUTSIDE-SECRET-93"

AGENT = """
    name: editor
    model: offline
    profile: autonomous
    tools: [fs.read, fs.write, fs.list, fs.search]
    capabilities: {fs: {read: ["src/**"], write: ["src/**"]}}
"""


@pytest.fixture
def project(make_project: ProjectFactory, tmp_path: Path) -> Path:
    root = make_project(
        {
            "project/agents/editor.yaml": AGENT,
            "project/src/a.txt": "plain line\n",
            "project/secret/s.txt": f"{PROJECT_SECRET}\n",
            "outside/o.txt": f"{OUTSIDE_SECRET}\n",
        }
    )
    project = root / "project"
    (project / "src" / "link.txt").symlink_to(Path("..") / "secret" / "s.txt")
    (project / "src" / "secretdir").symlink_to(Path("..") / "secret", target_is_directory=True)
    (project / "src" / "out.txt").symlink_to(tmp_path / "outside" / "o.txt")
    return Path(os.path.realpath(project))  # confine() takes a real root, as ToolContext makes it


def use(root: Path, tool: str, **args: Any) -> ToolCallFinished:
    """The result of one call of ``tool`` by the editor agent, through the Runtime."""
    [run] = drive(root, "editor", ("c1", f"@tool {tool} {json.dumps(args)}"))
    [result] = [r for r in results(run) if r.tool == tool]
    return result


def test_fs_search_skips_a_link_to_a_project_file_outside_the_read_globs(project: Path) -> None:
    result = use(project, "fs.search", pattern="SECRET", path="src")
    assert not result.is_error, result.result
    assert PROJECT_SECRET not in result.result
    assert result.result.startswith("no matches for 'SECRET' in src")


def test_fs_search_says_how_many_files_it_skipped_and_why(project: Path) -> None:
    result = use(project, "fs.search", pattern="line", path="src")
    assert result.result.splitlines() == [
        "src/a.txt:1: plain line",
        "[2 file(s) skipped: they lie outside capabilities.fs.read or the project (a link counts as where it leads)]",
    ]


def test_fs_search_of_a_link_to_a_folder_outside_the_globs_is_denied(project: Path) -> None:
    result = use(project, "fs.search", pattern="SECRET", path="src/secretdir")
    assert result.is_error
    assert PROJECT_SECRET not in result.result
    assert result.result.startswith("denied: path 'secret' is not in capabilities.fs.read")


def test_fs_list_hides_links_that_lead_outside_the_read_globs(project: Path) -> None:
    result = use(project, "fs.list", path="src")
    assert not result.is_error, result.result
    assert result.result.splitlines() == [
        "a.txt",
        "[3 entries not shown: they lie outside capabilities.fs.read or the project (a link counts as where it leads)]",
    ]


def test_fs_read_of_a_link_to_a_project_file_outside_the_globs_is_denied(project: Path) -> None:
    result = use(project, "fs.read", path="src/link.txt")
    assert result.is_error
    assert PROJECT_SECRET not in result.result
    assert result.result.startswith("denied: path 'secret/s.txt' is not in capabilities.fs.read")


def test_fs_read_of_a_link_out_of_the_project_is_denied(project: Path) -> None:
    result = use(project, "fs.read", path="src/out.txt")
    assert result.is_error
    assert OUTSIDE_SECRET not in result.result
    assert "leads outside the project root through a symbolic link" in result.result


def test_fs_write_through_a_link_to_a_project_file_outside_the_globs_is_denied(project: Path) -> None:
    result = use(project, "fs.write", path="src/link.txt", content="overwritten")
    assert result.is_error
    assert result.result.startswith("denied: path 'secret/s.txt' is not in capabilities.fs.write")
    assert (project / "secret" / "s.txt").read_text() == f"{PROJECT_SECRET}\n"


def test_fs_write_through_a_link_out_of_the_project_is_denied(project: Path) -> None:
    result = use(project, "fs.write", path="src/out.txt", content="overwritten")
    assert result.is_error
    assert "leads outside the project root through a symbolic link" in result.result
    assert (project.parent / "outside" / "o.txt").read_text() == f"{OUTSIDE_SECRET}\n"


def test_fs_write_into_a_linked_folder_outside_the_globs_is_denied(project: Path) -> None:
    result = use(project, "fs.write", path="src/secretdir/new.txt", content="planted")
    assert result.is_error
    assert result.result.startswith("denied: path 'secret/new.txt' is not in capabilities.fs.write")
    assert not (project / "secret" / "new.txt").exists()


def test_a_catastrophic_pattern_is_stopped_in_bounded_time(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from framework.compiler import fs_tools

    monkeypatch.setattr(fs_tools, "SEARCH_TIMEOUT", 1.0)
    (project / "src" / "long.txt").write_text("a" * 40 + "!\n")
    start = time.monotonic()
    result = use(project, "fs.search", pattern="(a+)+$", path="src")
    assert time.monotonic() - start < 10
    assert result.is_error
    assert result.result.startswith("fs.search stopped after 1 s: the pattern '(a+)+$' takes too long")


def test_a_search_within_the_bound_still_finds_its_lines(project: Path) -> None:
    (project / "src" / "many.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    result = use(project, "fs.search", pattern=r"^line 49\d\d$", path="src/many.txt")
    assert not result.is_error, result.result
    assert len(result.result.splitlines()) == 100


def test_a_link_swapped_in_after_the_check_is_not_followed(project: Path) -> None:
    from framework.compiler.confine import PathChanged, confine, open_confined

    rel = confine(project, "src/a.txt")  # what governance and the tool checked: a plain file
    (project / "src" / "a.txt").unlink()
    (project / "src" / "a.txt").symlink_to(Path("..") / "secret" / "s.txt")
    with pytest.raises(
        PathChanged, match=r"path 'src/a.txt' changed after it was checked: 'src/a.txt' is now a symbolic link"
    ):
        open_confined(project, rel)


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(project: Path) -> None:
    from framework.compiler.confine import PathChanged, confine, open_confined

    (project / "src" / "sub").mkdir()
    (project / "src" / "sub" / "s.txt").write_text("harmless\n")
    rel = confine(project, "src/sub/s.txt")
    (project / "src" / "sub").rename(project / "src" / "old")
    (project / "src" / "sub").symlink_to(Path("..") / "secret", target_is_directory=True)
    with pytest.raises(
        PathChanged, match=r"path 'src/sub/s.txt' changed after it was checked: 'src/sub' is now a symbolic link"
    ):
        open_confined(project, rel)


def test_the_fs_tools_apply_the_globs_themselves_to_the_file_they_open(project: Path) -> None:
    from framework.compiler.builtin_tools import build_builtin
    from framework.compiler.tool_context import ToolContext
    from framework.runtime.governance.access import CapabilityAccess
    from framework.spec import load_project

    caps = load_project(project).agents["editor"].capabilities  # type: ignore[union-attr]
    context = ToolContext(root=project, agent="editor", capabilities=caps, access=CapabilityAccess(caps))
    tool = build_builtin("fs.read", context)
    result = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": {"path": "src/link.txt"}})
    assert result.status == "error"
    assert result.content.startswith("denied: path 'secret/s.txt' is not in capabilities.fs.read")


def test_confine_on_windows_paths_compares_without_case_and_answers_with_slashes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows' path rules (``ntpath``: ``\\`` separators, case-insensitive names) stood in for the
    machine's: what pathlib's comparison did there, the string comparison does."""
    import ntpath
    import types

    from framework.compiler import confine as module

    monkeypatch.setattr(module, "os", types.SimpleNamespace(path=ntpath, sep="\\"))
    root: Any = PureWindowsPath("C:/Proj")  # confine takes the root as a Path; Windows rules here
    assert module.confine(root, "sub/b.txt") == module.confine(root, "sub\\b.txt") == "sub/b.txt"
    assert module.confine(root, "sub/..") == "."
    assert module.confine(root, "a/../../proj/x") == "x"  # proj is Proj there
    with pytest.raises(PathRefused, match="outside the project root"):
        module.confine(root, "../Projx/a")
