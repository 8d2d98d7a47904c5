"""``ca test``: eval cases through the real ``ca`` process, on the offline and scripted models.

Each expectation kind is shown passing and failing (with what was expected, what happened and
the events around it); approvals come from the eval file; cases run in parallel, isolated.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from tests.conftest import CA, NAP, NAPPER, REPO, SIDE_EFFECT, ProjectFactory, run_ca

HELPER = """
    name: helper
    profile: manual
    tools: [fs.read, fs.write]
    capabilities:
      fs: {read: ["**"], write: ["out/**"]}
"""

WRITER = """
    name: writer
    profile: manual
    model:
      provider: scripted
      replies:
        - tool_calls: [{name: append, args: {file: effects.log, text: hello}}]
        - tool_calls: [{name: append, args: {file: effects.log, text: again}}]
        - done
    tools:
      - python: tools/side.py:append
"""

GUARDED = """
    name: guarded
    profile: autonomous
    model:
      provider: scripted
      replies: ["the password: hunter2"]
    contract:
      must_not:
        - {output_matches: 'password\\s*:'}
"""

STINGY = """
    name: stingy
    profile: autonomous
    budget: {max_tool_calls: 1, on_exceed: fail}
    tools: [fs.read]
    capabilities:
      fs: {read: ["**"]}
"""

FLOW = """
    name: flow
    kind: workflow
    steps:
      - {id: first, agent: helper, input: "one: {{ input }}"}
      - {id: check, gate: {message: "Go on?"}}
      - {id: second, agent: helper, input: "two: {{ steps.first.output }}"}
"""


def _project(make_project: ProjectFactory, evals: dict[str, str]) -> Path:
    files = {
        "agents/helper.yaml": HELPER,
        "agents/writer.yaml": WRITER,
        "agents/guarded.yaml": GUARDED,
        "agents/stingy.yaml": STINGY,
        "agents/flow.yaml": FLOW,
        "tools/side.py": SIDE_EFFECT,
        "notes.txt": "the original notes\n",
    }
    files.update({f"evals/{name}.yaml": text for name, text in evals.items()})
    return make_project(files)


def _results(stdout: str) -> dict[str, dict[str, Any]]:
    data = json.loads(stdout)
    return {case["case"]: case for case in data["cases"]}


PASSING = """
    cases:
      - name: echo
        agent: helper
        input: hello there
        expect:
          state: completed
          output_contains: ["You said: hello there"]
          output_matches: '^\\[helper\\]'
          output_equals: "[helper] You said: hello there"
          tools_not_called: [fs.write]
          contract_held: true
          budget: {max_tokens: 200, max_tool_calls: 0, max_model_calls: 1, max_cost_usd: 0, max_duration: 30s}
      - name: reads
        agent: helper
        input: '@tool fs.read {"path": "notes.txt"}'
        approvals: {fs.read: approve}
        expect:
          tools_called: [{tool: "fs.*", args: {path: "*.txt"}, count: 1}]
          output_contains: the original notes
      - name: ordered
        agent: helper
        input: |
          @tool fs.read {"path": "notes.txt"}
          @tool fs.write {"path": "out/a.txt", "content": "x"}
        approvals: {"*": approve}
        expect:
          tools_called: [fs.read, {tool: fs.write, args: {path: out/*}}]
          in_order: true
      - name: schema
        agent: writer
        model:
          provider: scripted
          replies: ['{"verdict": "approve", "comments": []}']
        input: review it
        expect:
          output_schema: {type: object, required: [verdict], properties: {verdict: {enum: [approve, request_changes]}}}
      - name: flow-steps
        agent: flow
        input: go
        approvals: {check: approve}
        expect:
          state: completed
          steps_reached: [first, check, second]
      - name: waits
        agent: flow
        input: go
        expect:
          state: input-required
          steps_reached: [first, check]
      - name: conversation
        agent: writer
        model:
          provider: scripted
          replies: [first answer, second answer]
        input: [hello, and again]
        expect:
          output_equals: second answer
"""


def test_every_expectation_kind_passes(make_project: ProjectFactory) -> None:
    root = _project(make_project, {"pass": PASSING})
    result = run_ca("test", "--json", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = _results(result.stdout)
    assert all(c["passed"] for c in cases.values()), cases
    assert len(cases) == 7
    assert cases["reads"]["tools"] == [{"tool": "fs.read", "args": {"path": "notes.txt"}}]
    assert cases["waits"]["state"] == "input-required"
    assert "[7/7] PASS pass::" in result.stderr
    assert not (root / ".ca").exists(), "cases run in scratch copies, never in the project itself"


FAILING = """
    cases:
      - name: wrong-state
        agent: guarded
        input: tell me
        expect: {state: completed}
      - name: wrong-code
        agent: guarded
        input: tell me
        expect: {failure_code: budget_exceeded}
      - name: contract
        agent: guarded
        input: tell me
        expect: {contract_held: true}
      - name: missing-tool
        agent: helper
        input: hello
        expect:
          tools_called: [{tool: fs.read, args: {path: "*.md"}}]
      - name: wrong-count
        agent: helper
        input: |
          @tool fs.read {"path": "notes.txt"}
          @tool fs.read {"path": "notes.txt"}
        approvals: {"*": approve}
        expect:
          tools_called: [{tool: fs.read, count: 1}]
      - name: out-of-order
        agent: helper
        input: |
          @tool fs.read {"path": "notes.txt"}
          @tool fs.write {"path": "out/a.txt", "content": "x"}
        approvals: {"*": approve}
        expect:
          tools_called: [fs.write, fs.read]
          in_order: true
      - name: forbidden-tool
        agent: helper
        input: '@tool fs.write {"path": "out/a.txt", "content": "x"}'
        approvals: [approve]
        expect:
          tools_not_called: [{tool: fs.write, args: {path: "out/*"}}]
      - name: output
        agent: helper
        input: hello
        expect:
          output_contains: [goodbye]
          output_matches: '^goodbye'
          output_equals: goodbye
          output_schema: {type: object}
      - name: budget
        agent: helper
        input: hello
        expect:
          budget: {max_tokens: 1, max_model_calls: 0}
      - name: steps
        agent: flow
        input: go
        expect: {steps_reached: [second]}
"""


def test_each_expectation_kind_fails_with_expected_actual_and_events(make_project: ProjectFactory) -> None:
    root = _project(make_project, {"fail": FAILING})
    result = run_ca("test", "--json", cwd=root)
    assert result.returncode == 1, result.stdout + result.stderr
    cases = _results(result.stdout)
    assert not any(c["passed"] for c in cases.values())
    misses = {name: {m["check"]: m for m in c["misses"]} for name, c in cases.items()}

    state = misses["wrong-state"]["expect.state"]
    assert state["expected"] == "completed"
    assert state["actual"].startswith("failed (contract_violation: contract violated: contract.must_not[0]")
    assert misses["wrong-code"]["expect.failure_code"]["actual"].startswith("failed (contract_violation")
    assert (
        "contract.must_not[0]: the output matches the forbidden pattern"
        in (misses["contract"]["expect.contract_held"]["actual"])
    )
    assert misses["missing-tool"]["expect.tools_called[0]"] == {
        "check": "expect.tools_called[0]",
        "expected": "a call fs.read(path='*.md')",
        "actual": "no tool calls",
        "at": misses["missing-tool"]["expect.tools_called[0]"]["at"],
    }
    assert misses["wrong-count"]["expect.tools_called[0]"]["actual"].startswith("2 matching calls:")
    assert "expect.tools_called[1]" in misses["out-of-order"]
    forbidden = misses["forbidden-tool"]["expect.tools_not_called[0]"]
    assert forbidden["actual"] == 'called fs.write {"content": "x", "path": "out/a.txt"}'
    assert forbidden["at"] is not None
    assert set(misses["output"]) == {
        "expect.output_contains[0]",
        "expect.output_matches",
        "expect.output_equals",
        "expect.output_schema",
    }
    assert misses["output"]["expect.output_schema"]["actual"].startswith("not JSON")
    assert misses["budget"]["expect.budget.max_tokens"]["expected"] == "at most 1"
    assert misses["budget"]["expect.budget.max_model_calls"]["actual"] == "1 used"
    assert misses["steps"]["expect.steps_reached[0]"]["actual"] == "steps started: first, check"

    human = run_ca("test", "-k", "forbidden", cwd=root)
    assert human.returncode == 1
    out = human.stdout
    assert "FAIL fail::forbidden-tool" in out
    assert "    expected: no call fs.write(path='out/*')\n" in out
    assert '    actual:   called fs.write {"content": "x", "path": "out/a.txt"}\n' in out
    assert '      > tool_call fs.write {"content": "x", "path": "out/a.txt"}' in out  # the events around it
    assert "0 passed, 1 failed" in out
    assert "Traceback" not in human.stderr


def test_approvals_are_answered_from_the_eval_file(make_project: ProjectFactory) -> None:
    evals = """
        cases:
          - name: in-order
            agent: writer
            input: write
            approvals: [approve, {decision: edit, args: {file: effects.log, text: edited}}]
            expect: {state: completed, output_equals: done}
          - name: rejected
            agent: writer
            input: write
            approvals: {append: {decision: reject, reason: not today}}
            expect: {state: completed}
          - name: unanswered
            agent: writer
            input: write
            approvals: [approve]
            expect: {state: input-required}
    """
    evals += """
          - name: rejection-seen
            agent: helper
            input: '@tool fs.write {"path": "out/a.txt", "content": "x"}'
            approvals: [{decision: reject, reason: not today}]
            expect: {output_contains: "rejected by the user: not today"}
    """
    root = _project(make_project, {"approvals": evals})
    result = run_ca("test", "--json", "--keep", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    cases = _results(result.stdout)
    effects = {name: (Path(c["scratch"]) / "effects.log") for name, c in cases.items()}
    assert effects["in-order"].read_text() == "hello\nedited\n"  # approved, then the edited arguments ran
    assert not effects["rejected"].exists()  # both calls rejected: nothing written
    assert effects["unanswered"].read_text() == "hello\n"  # the second call waits: the case ends there
    assert not (root / "effects.log").exists()


def test_parallel_cases_are_isolated(make_project: ProjectFactory) -> None:
    cases = "".join(
        f"""
          - name: case-{n}
            agent: helper
            files: {{notes.txt: "notes of case {n}"}}
            input: |
              @tool fs.read {{"path": "notes.txt"}}
              @tool fs.write {{"path": "out/mine.txt", "content": "{n}"}}
              @tool fs.read {{"path": "out/mine.txt"}}
            approvals: {{"*": approve}}
            expect:
              output_contains: ["notes of case {n}", "fs.read: {n}"]
              output_matches: 'fs.write: .*\\n.*fs.read: {n}$'
        """
        for n in range(6)
    )
    root = _project(make_project, {"iso": "cases:" + cases})
    result = run_ca("test", "-j", "6", "--json", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert sum(c["passed"] for c in _results(result.stdout).values()) == 6
    assert (root / "notes.txt").read_text() == "the original notes\n"
    assert not (root / "out").exists()


def test_junit_xml_is_written_and_parses_back(make_project: ProjectFactory, tmp_path: Path) -> None:
    root = _project(make_project, {"pass": PASSING, "fail": FAILING})
    report = tmp_path / "reports" / "evals.xml"
    result = run_ca("test", "--junit-xml", str(report), cwd=root)
    assert result.returncode == 1
    tree = ElementTree.parse(report).getroot()
    assert tree.tag == "testsuites"
    assert (tree.get("tests"), tree.get("failures")) == ("17", "10")
    suites = {s.get("name"): s for s in tree.iter("testsuite")}
    assert set(suites) == {"pass", "fail"}
    failed = {c.get("name"): c for c in suites["fail"].iter("testcase")}
    failure = failed["budget"].find("failure")
    assert failure is not None
    assert failure.get("message") == "expect.budget.max_tokens: expected at most 1; actual 11 used"
    assert all(c.find("failure") is None for c in suites["pass"].iter("testcase"))


def test_k_selects_cases_and_bad_eval_files_point_at_the_line(make_project: ProjectFactory) -> None:
    root = _project(make_project, {"pass": PASSING})
    result = run_ca("test", "-k", "pass::echo", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    assert list(_results(result.stdout)) == ["echo"]

    both = run_ca("test", "--record", "--update", cwd=root)
    assert both.returncode == 2
    assert "use --record (re-record every case) or --update (re-record failing cases), not both" in both.stderr

    none = run_ca("test", "-k", "nothing-like-this", cwd=root)
    assert none.returncode == 2
    assert none.stderr.strip() == "error: no case matches -k 'nothing-like-this'"

    (root / "evals" / "bad.yaml").write_text(
        "cases:\n  - name: one\n    agent: helpr\n    input: hi\n    expect: {stat: completed}\n"
    )
    bad = run_ca("test", cwd=root)
    assert bad.returncode == 2
    assert "evals/bad.yaml:3:12: error: unknown agent 'helpr'" in bad.stderr
    assert "hint: did you mean 'helper'?" in bad.stderr
    assert "evals/bad.yaml:5:14: error: unknown key 'stat'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_project_without_evals_says_what_to_add(make_project: ProjectFactory) -> None:
    root = make_project({"agents/helper.yaml": HELPER})
    result = run_ca("test", cwd=root)
    assert result.returncode == 2
    assert "no eval files in" in result.stderr and "add evals/NAME.yaml" in result.stderr


def test_judged_criteria_are_checked_by_the_judge_model_of_ca_yaml(make_project: ProjectFactory) -> None:
    evals = """
        cases:
          - name: judged
            agent: helper
            input: the tests fail in test_loader.py
            expect:
              judged: ["the answer names the failing test file"]
    """
    judge = 'evals:\n  judge: {{provider: scripted, replies: [\'{{"pass": {verdict}, "reason": "{reason}"}}\']}}\n'
    root = _project(make_project, {"judged": evals})
    (root / "ca.yaml").write_text(judge.format(verdict="true", reason="it names test_loader.py"))
    passed = run_ca("test", cwd=root)
    assert passed.returncode == 0, passed.stdout + passed.stderr

    (root / "ca.yaml").write_text(judge.format(verdict="false", reason="it names no file"))
    failed = run_ca("test", cwd=root)
    assert failed.returncode == 1
    assert "  expect.judged[0]\n    expected: the answer names the failing test file\n" in failed.stdout
    assert "    actual:   the judge: it names no file\n" in failed.stdout

    (root / "ca.yaml").unlink()
    unjudged = run_ca("test", cwd=root)
    assert unjudged.returncode == 2
    assert "evals/judged.yaml:6:7: error: `judged` criteria need a judge model, and the project has none" in (
        unjudged.stderr
    )


def _napping_cases(make_project: ProjectFactory, tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[str]]:
    """``ca test`` running two cases that nap 20 s, each in its scratch copy (in its own process group)."""
    root = make_project(
        {
            "agents/napper.yaml": NAPPER,
            "tools/nap.py": NAP,
            "evals/slow.yaml": "cases:\n  - {name: one, agent: napper, input: go}\n  - {name: two, agent: napper, input: go}\n",
        }
    )
    scratch = tmp_path / "scratch"  # inside the project: never copied into the copies
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CA_TEST_TMPDIR": str(scratch)}
    proc = subprocess.Popen(
        [*CA, "test"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(list(scratch.glob("*/*"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return root, scratch, proc


def _group_gone(pgid: int, within: float) -> bool:
    """Whether every process of group ``pgid`` has exited within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_or_a_sigterm_stops_the_cases_and_leaves_no_scratch_copy(
    stop: str, make_project: ProjectFactory, tmp_path: Path
) -> None:
    _, scratch, proc = _napping_cases(make_project, tmp_path)
    try:
        running = len(list(scratch.glob("*/*")))
        time.sleep(1)
        if proc.poll() is None and stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the whole process group
        elif proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # to ca test alone, as a supervisor stops it
        out, err = proc.communicate(timeout=30)
        gone = _group_gone(proc.pid, 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert running == 2, f"the cases never ran together: {out}{err}"
    assert proc.returncode == 130, f"{out}{err}"
    assert "interrupted" in err and "Traceback" not in err
    assert gone, "a worker outlived ca test"
    assert list(scratch.iterdir()) == []


def test_a_killed_ca_test_leaves_no_worker_running(make_project: ProjectFactory, tmp_path: Path) -> None:
    _, scratch, proc = _napping_cases(make_project, tmp_path)
    try:
        running = len(list(scratch.glob("*/*")))
        proc.kill()  # nothing of ca test runs after this: its workers must notice
        proc.communicate(timeout=30)
        gone = _group_gone(proc.pid, 15)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert running == 2
    assert gone, "ca test's workers kept running after it was killed"
    assert list(scratch.glob("*/*")) == []  # each case removed its own copy as it stopped


def test_cases_keep_their_state_in_the_scratch_copy_whatever_store_url_names(make_project: ProjectFactory) -> None:
    # A deployment's shared database (here one that does not even answer) never sees a case's runs.
    root = make_project(
        {
            "ca.yaml": "store: {url: 'postgresql://ca@127.0.0.1:1/deployment'}\n",
            "agents/helper.yaml": HELPER,
            "evals/smoke.yaml": """
                cases:
                  - name: echo
                    agent: helper
                    input: hello there
                    expect: {state: completed, output_contains: ["You said: hello there"]}
            """,
        }
    )
    result = run_ca("test", "--json", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _results(result.stdout)["echo"]["passed"] is True
