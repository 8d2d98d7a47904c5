"""The `ca init` templates through the real `ca` process: each scaffolds, validates and runs offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import events, run_ca

TEMPLATES = ["basic", "team", "workflow"]
TEAM_MESSAGE = (
    "@tool researcher " + json.dumps({"input": "@tool fs.list " + json.dumps({"path": "."})}) + "\n"
    "@tool writer " + json.dumps({"input": "Draft a status note"})
)


def scaffold(tmp_path: Path, template: str) -> Path:
    root = tmp_path / template
    result = run_ca("init", str(root), "--template", template)
    assert result.returncode == 0, result.stderr
    return root


def finished(evs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in evs if e["kind"] == "finished")


def test_init_list_shows_every_template_with_its_description() -> None:
    result = run_ca("init", "--list")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0]: line.split(None, 1)[1] for line in result.stdout.splitlines()}
    assert sorted(listed) == TEMPLATES
    assert "parallel block, a human gate and an artifact" in listed["workflow"]
    assert "call each other" in listed["team"]


@pytest.mark.parametrize("template", TEMPLATES)
def test_a_template_validates_without_warnings_and_ships_schemas_and_a_readme(tmp_path: Path, template: str) -> None:
    root = scaffold(tmp_path, template)
    check = run_ca("validate", cwd=root)
    assert check.returncode == 0, check.stderr
    assert check.stderr == ""  # not even a warning
    for path in [root / "ca.yaml", *root.glob("agents/*.yaml"), *root.glob("profiles/*.yaml")]:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        assert (path.parent / first.split("=", 1)[1]).resolve().is_file(), f"{path} points at a missing schema"
    readme = (root / "README.md").read_text()
    assert readme.startswith(f"# {template}\n") and "## Next steps" in readme


def test_the_workflow_template_runs_to_its_gate_and_publishes_its_artifact_once_approved(tmp_path: Path) -> None:
    root = scaffold(tmp_path, "workflow")
    paused = run_ca("run", "report", "ARM runners", "--json", cwd=root)
    assert paused.returncode == 3, paused.stderr  # waiting for a decision: no terminal here
    evs = events(paused.stdout)
    started = [e["step"] for e in evs if e["kind"] == "step" and e["status"] == "started"]
    assert started[:4] == ["facts", "parallel-1", *sorted(started[2:4])] and set(started[2:4]) == {"summary", "risks"}
    gate = next(e for e in evs if e["kind"] == "paused")["payload"]
    assert gate["kind"] == "gate" and gate["step"] == "approve"
    assert gate["message"].startswith("Publish this report?\n[writer] ")
    assert not [e for e in evs if e["kind"] == "artifact"]  # nothing is published before the decision

    approved = run_ca("approve", finished(evs)["task_id"], "--json", cwd=root)
    assert approved.returncode == 0, approved.stderr
    done = events(approved.stdout)
    [artifact] = [e for e in done if e["kind"] == "artifact"]
    report, data = artifact["parts"]
    assert report["file"]["name"] == "REPORT.md" and report["file"]["content"].startswith("# ARM runners\n\n[writer]")
    assert "## Risks\n\n[critic]" in report["file"]["content"]
    assert data == {"data": {"topic": "ARM runners", "approved": True}}
    assert finished(done)["state"] == "completed"
    assert finished(done)["output"].startswith("Published REPORT.md: [writer]")


def test_the_team_template_agents_call_each_other_by_name_and_by_tag(tmp_path: Path) -> None:
    root = scaffold(tmp_path, "team")
    result = run_ca("run", "lead", TEAM_MESSAGE, "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    evs = events(result.stdout)
    calls = [(e["tool"], e["source"]) for e in evs if e["kind"] == "tool_call"]
    assert [tool for tool, _ in calls] == ["researcher", "fs.list", "writer"]
    assert calls[0][1] == [] and calls[1][1] != []  # fs.list is the researcher's own call, nested
    end = finished(evs)
    assert end["state"] == "completed"
    assert "researcher: [researcher] You said:" in end["output"]
    assert "writer: [writer] You said: Draft a status note" in end["output"]
    assert end["usage"]["tool_calls"] == 3  # the nested call is counted on the lead's request


def test_the_team_budget_spans_the_calls_of_every_teammate(tmp_path: Path) -> None:
    root = scaffold(tmp_path, "team")
    lead = root / "agents" / "lead.yaml"
    lead.write_text(lead.read_text().replace("max_tool_calls: 12", "max_tool_calls: 2"))
    result = run_ca("run", "lead", TEAM_MESSAGE, "--json", cwd=root)
    evs = events(result.stdout)
    # The lead's call to the researcher and the researcher's fs.list use up the lead's two calls.
    assert [e["tool"] for e in evs if e["kind"] == "tool_call"] == ["researcher", "fs.list"]
    assert finished(evs)["output"] == "Stopped: task budget max_tool_calls reached: used 2 of 2."


def test_the_team_profile_asks_before_a_teammate_writes_a_file(tmp_path: Path) -> None:
    root = scaffold(tmp_path, "team")
    write = "@tool fs.write " + json.dumps({"path": "drafts/status.md", "content": "All good."})
    message = "@tool writer " + json.dumps({"input": write})
    paused = run_ca("run", "lead", message, "--json", cwd=root)
    assert paused.returncode == 3, paused.stderr
    payload = next(e for e in events(paused.stdout) if e["kind"] == "paused")["payload"]
    assert payload["kind"] == "approval" and payload["tool"] == "fs.write"
    assert not (root / "drafts").exists()
    approved = run_ca("approve", finished(events(paused.stdout))["task_id"], cwd=root)
    assert approved.returncode == 0, approved.stderr
    assert (root / "drafts" / "status.md").read_text() == "All good."
