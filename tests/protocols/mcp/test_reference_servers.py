"""MCP servers nobody here wrote: the reference ``@modelcontextprotocol/server-everything`` and
``server-filesystem`` (npm packages), through the real ``ca`` on the offline and scripted models.

The packages are installed once into ``.tools/mcp-npm`` (gitignored) with ``npm``; the tests skip,
saying why, when node or npm is absent or the install fails (e.g. no network).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, ProjectFactory, events, run_ca

PACKAGES = ("@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-filesystem")
CACHE = REPO / ".tools" / "mcp-npm"


@pytest.fixture(scope="module")
def bins() -> Path:
    folder = CACHE / "node_modules" / ".bin"
    if all((folder / f"mcp-{p.split('/')[1]}").exists() for p in PACKAGES):
        return folder
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to install the reference MCP servers")
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", *PACKAGES],
        cwd=CACHE,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"npm install of the reference MCP servers failed: {done.stderr.strip()[-300:]}")
    return folder


def project(make_project: ProjectFactory, bins: Path, calls: list[dict[str, Any]], allow: str, profile: str) -> Path:
    replies = [{"tool_calls": [c]} for c in calls] + ["done"]
    root = make_project(
        {
            "agents/ref.yaml": f"""
                name: ref
                profile: {profile}
                model: {{provider: scripted, replies: {json.dumps(replies)}}}
                tools: [{{mcp: every}}, {{mcp: fs}}]
                capabilities: {{mcp: {{allow: {allow}}}}}
            """,
            "agents/plain.yaml": """
                name: plain
                profile: autonomous
                tools: [{mcp: every}]
                capabilities: {mcp: {allow: ["every.*"]}}
            """,
            "data/a.txt": "hello from a file\n",
        }
    )
    (root / "ca.yaml").write_text(
        "mcp_servers:\n"
        f"  every: {{command: {bins / 'mcp-server-everything'}, args: [stdio]}}\n"
        f"  fs: {{command: {bins / 'mcp-server-filesystem'}, args: [{root / 'data'}]}}\n"
    )
    return root


def servers_in(root: Path) -> list[int]:
    """Processes (other than this one) whose working folder is the project: the MCP servers ``ca`` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if Path(os.readlink(entry / "cwd")) == root.resolve():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def assert_none_left(root: Path) -> None:
    deadline = time.monotonic() + 5
    while servers_in(root) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers_in(root) == [], "reference MCP servers outlived ca"


def results(stdout: str) -> list[tuple[str, str, bool]]:
    return [(e["tool"], e["result"], e["is_error"]) for e in events(stdout) if e["kind"] == "tool_result"]


def test_server_everything_and_filesystem_through_the_scripted_model(make_project: ProjectFactory, bins: Path) -> None:
    calls = [
        {"name": "every.get-sum", "args": {"a": 2, "b": 3}},
        {"name": "every.get-tiny-image", "args": {}},
        {"name": "fs.read_text_file", "args": {"path": "a.txt"}},
        {"name": "fs.write_file", "args": {"path": "b.txt", "content": "x"}},
    ]
    root = project(make_project, bins, calls, '["every.*", "fs.read_*"]', "autonomous")
    done = run_ca("run", "ref", "go", "--json", cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    [summed, image, read, write] = results(done.stdout)
    assert summed == ("every.get-sum", "The sum of 2 and 3 is 5.", False)
    assert "[image image/png" in image[1] and "not passed on" in image[1]
    assert read == ("fs.read_text_file", "hello from a file\n", False)
    assert write[2] and "'fs.write_file' is not in capabilities.mcp.allow" in write[1]
    assert not (root / "data" / "b.txt").exists()
    assert_none_left(root)


def test_a_destructive_reference_tool_asks_under_supervised(make_project: ProjectFactory, bins: Path) -> None:
    calls = [
        {"name": "fs.list_directory", "args": {"path": "."}},
        {"name": "fs.write_file", "args": {"path": "b.txt", "content": "x"}},
    ]
    root = project(make_project, bins, calls, '["fs.*"]', "supervised")
    done = run_ca("run", "ref", "go", "--json", cwd=root, timeout=120)
    assert done.returncode == 3, done.stderr
    [(tool, listing, is_error)] = results(done.stdout)
    assert tool == "fs.list_directory" and "a.txt" in listing and not is_error
    [paused] = [e for e in events(done.stdout) if e["kind"] == "paused"]
    assert paused["payload"]["tool"] == "fs.write_file"
    assert not (root / "data" / "b.txt").exists()
    assert_none_left(root)


def test_server_everything_through_the_offline_model(make_project: ProjectFactory, bins: Path) -> None:
    root = project(make_project, bins, [], '["every.*"]', "autonomous")
    done = run_ca("run", "plain", '@tool every.echo {"message": "hi there"}', "--json", cwd=root, timeout=120)
    assert done.returncode == 0, done.stderr
    assert results(done.stdout) == [("every.echo", "Echo: hi there", False)]
    listed = run_ca("mcp", "list", "every", "--json", cwd=root, timeout=120)
    tools = {t["name"]: t for t in json.loads(listed.stdout)["servers"]["every"]}
    assert tools["echo"]["annotations"]["readOnlyHint"] is True
    assert_none_left(root)
