"""Workflow ``tool`` steps go through the same governance chain as a model's tool calls.

Each test drives the real ``ca`` process on a workflow whose steps call builtin tools and
checks what a user would see: the step fails (not "completed" with an error as its output),
the profile pauses the run, and the audit names every call and denial.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ProjectFactory, events, run_ca

ALL_CAPS = """
capabilities:
  fs: {read: ["**"], write: ["out/**"]}
  shell: {allow: ["ls *"]}
  network: {allow: ["127.0.0.1:9"]}
"""

STEP_OF = {
    "fs.read": '{id: s, tool: fs.read, args: {path: "notes.txt"}}',
    "fs.write": '{id: s, tool: fs.write, args: {path: "out/x.txt", content: "x"}}',
    "fs.list": '{id: s, tool: fs.list, args: {path: "."}}',
    "fs.search": '{id: s, tool: fs.search, args: {pattern: "hello", path: "."}}',
    "shell": '{id: s, tool: shell, args: {command: "ls agents"}}',
    "http.get": '{id: s, tool: http.get, args: {url: "http://127.0.0.1:9/"}}',
}


def _flow(make_project: ProjectFactory, step: str, extra: str = "") -> Path:
    return make_project(
        {
            "notes.txt": "hello\n",
            "agents/flow.yaml": f"name: flow\nkind: workflow\n{extra}\nsteps:\n  - {step}\n",
        }
    )


def _run(root: Path, *args: str) -> list[dict[str, Any]]:
    result = run_ca("run", "flow", "go", "--json", *args, cwd=root)
    assert "Traceback" not in result.stderr, result.stderr
    return events(result.stdout)


def _finished(evs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in evs if e["kind"] == "finished")


def _audit(root: Path) -> list[tuple[str, dict[str, Any]]]:
    with sqlite3.connect(root / ".ca" / "audit.db") as db:
        return [(kind, json.loads(data)) for kind, data in db.execute("SELECT kind, data FROM audit ORDER BY seq")]


@pytest.mark.parametrize("tool", sorted(STEP_OF))
def test_a_step_without_capabilities_is_denied_and_fails(make_project: ProjectFactory, tool: str) -> None:
    root = _flow(make_project, STEP_OF[tool], "profile: autonomous")
    evs = _run(root)
    end = _finished(evs)
    assert end["state"] == "failed"
    assert "denied" in end["error"] and "'s'" in end["error"]
    assert {"step": "s", "status": "failed"}.items() <= next(e for e in evs if e.get("status") == "failed").items()
    assert not any(e["kind"] == "step" and e["status"] == "completed" for e in evs)
    kinds = [kind for kind, _ in _audit(root)]
    assert "denial" in kinds and "tool.call" not in kinds
    assert not (root / "out").exists()


@pytest.mark.parametrize(
    ("profile", "tool", "asks"),
    [
        ("manual", "fs.read", True),
        ("manual", "fs.list", True),
        ("supervised", "fs.read", False),
        ("supervised", "fs.search", False),
        ("supervised", "fs.write", True),
        ("supervised", "shell", True),
        ("supervised", "http.get", True),
        ("autonomous", "fs.write", False),
        ("autonomous", "shell", False),
    ],
)
def test_the_profile_decides_on_a_step(make_project: ProjectFactory, profile: str, tool: str, asks: bool) -> None:
    root = _flow(make_project, STEP_OF[tool], f"profile: {profile}\n{ALL_CAPS}")
    evs = _run(root)
    end = _finished(evs)
    if asks:
        assert end["state"] == "input-required"
        paused = next(e for e in evs if e["kind"] == "paused")
        assert paused["payload"]["kind"] == "approval" and paused["payload"]["tool"] == tool
        assert "tool.call" not in [kind for kind, _ in _audit(root)]
    else:
        assert end["state"] == "completed", end
        calls = [data for kind, data in _audit(root) if kind == "tool.call"]
        assert [c["tool"] for c in calls] == [tool]


def test_an_approved_step_runs_once_after_a_decision_from_another_process(make_project: ProjectFactory) -> None:
    root = _flow(make_project, STEP_OF["fs.write"], ALL_CAPS)  # supervised by default: writes ask
    end = _finished(_run(root))
    assert end["state"] == "input-required"
    assert not (root / "out" / "x.txt").exists()
    approved = run_ca("approve", end["task_id"], cwd=root)
    assert approved.returncode == 0, approved.stderr
    assert (root / "out" / "x.txt").read_text() == "x"
    assert [kind for kind, _ in _audit(root)].count("tool.call") == 1
    again = run_ca("approve", end["task_id"], cwd=root)
    assert again.returncode != 0 and "not waiting" in again.stderr


def test_a_rejected_step_fails_the_run(make_project: ProjectFactory) -> None:
    root = _flow(make_project, STEP_OF["shell"], ALL_CAPS)
    end = _finished(_run(root))
    rejected = run_ca("approve", end["task_id"], "--reject", "--reason", "not now", cwd=root)
    assert "rejected by the user: not now" in rejected.stdout + rejected.stderr
    kinds = [kind for kind, _ in _audit(root)]
    assert "tool.call" not in kinds


def test_http_get_to_an_unlisted_host_is_denied(make_project: ProjectFactory) -> None:
    step = '{id: s, tool: http.get, args: {url: "http://127.0.0.2:9/"}}'
    root = _flow(make_project, step, f"profile: autonomous\n{ALL_CAPS}")
    end = _finished(_run(root))
    assert end["state"] == "failed"
    assert "network.allow" in end["error"]


def test_a_failing_tool_fails_its_step_instead_of_completing_with_the_error(make_project: ProjectFactory) -> None:
    step = '{id: s, tool: fs.read, args: {path: "missing.txt"}}'
    root = _flow(make_project, step, f"profile: autonomous\n{ALL_CAPS}")
    evs = _run(root)
    end = _finished(evs)
    assert end["state"] == "failed"
    assert "no such file: 'missing.txt'" in end["error"]
    assert [e["status"] for e in evs if e["kind"] == "step"] == ["started", "failed"]


def test_a_contract_must_not_rule_refuses_a_step(make_project: ProjectFactory) -> None:
    extra = f"profile: autonomous\n{ALL_CAPS}contract:\n  must_not:\n    - {{tool: shell, args: {{command: 'ls agents*'}}}}\n"
    root = _flow(make_project, STEP_OF["shell"], extra)
    end = _finished(_run(root))
    assert end["state"] == "failed" and "denied" in end["error"]


def test_the_tool_call_budget_counts_steps(make_project: ProjectFactory) -> None:
    root = make_project(
        {
            "notes.txt": "hello\n",
            "agents/flow.yaml": f"""
                name: flow
                kind: workflow
                profile: autonomous
                budget: {{max_tool_calls: 1}}
                {ALL_CAPS.strip().replace(chr(10), chr(10) + " " * 16)}
                steps:
                  - {STEP_OF["fs.read"]}
                  - {STEP_OF["fs.list"].replace("id: s", "id: t")}
            """,
        }
    )
    end = _finished(_run(root))
    assert end["state"] == "failed"
    assert "budget of tool calls is spent" in end["error"] and "'t'" in end["error"]
