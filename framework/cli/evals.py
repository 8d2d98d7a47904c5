"""``ca test``: run the project's eval cases in parallel, each in its own scratch copy.

Progress goes to stderr as each case ends; then the failures (what was expected, what
happened, the run's events around it) and a summary table. ``--json`` prints one JSON
document on stdout instead of the table; ``--junit-xml FILE`` writes a JUnit report for CI.
Exit 0 when every case passed, 1 when any failed, 2 for an invalid project, eval file or usage.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from framework.errors import UsageError
from framework.runtime.evaluation import CaseRun, RunMode, run_case, scratch_base
from framework.runtime.events import ToolCallStarted
from framework.runtime.expectations import Miss, around, judge
from framework.spec.eval_loader import EvalSuite, load_evals
from framework.spec.evals import EvalCase


@dataclass
class TestOptions:
    project: Path
    pattern: str | None = None
    as_json: bool = False
    junit_xml: Path | None = None
    record: bool = False
    update: bool = False
    jobs: int = 4
    keep: bool = False


@dataclass
class Outcome:
    run: CaseRun
    misses: list[Miss] = field(default_factory=list)
    rerecorded: bool = False

    @property
    def passed(self) -> bool:
        return not self.misses

    def to_json(self) -> dict[str, Any]:
        run, last = self.run, self.run.last
        usage = run.usage
        return {
            "id": run.id,
            "file": str(run.suite.path),
            "case": run.case.name,
            "passed": self.passed,
            "state": last.state if last else None,
            "failure_code": last.failure.code if last and last.failure else None,
            "output": last.output if last else "",
            "seconds": round(run.seconds, 3),
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "model_calls": usage.model_calls,
                "tool_calls": usage.tool_calls,
                "cost_usd": str(run.cost_usd),
            },
            "tools": [{"tool": e.tool, "args": e.args} for e in run.events if isinstance(e, ToolCallStarted)],
            "recorded": run.recorded,
            "rerecorded": self.rerecorded,
            "misses": [m.to_json() for m in self.misses],
            "scratch": str(run.scratch) if run.scratch else None,
        }


def select(suites: list[EvalSuite], pattern: str | None) -> list[tuple[EvalSuite, EvalCase]]:
    """The cases whose ``file::case`` id contains ``pattern`` (or matches it as a glob)."""
    chosen = []
    for suite in suites:
        for case in suite.cases:
            ident = f"{suite.name}::{case.name}"
            if pattern is None or pattern in ident or fnmatch.fnmatchcase(ident, pattern):
                chosen.append((suite, case))
    return chosen


_JOB: dict[str, Any] = {}
"""What the worker processes run: set before they are forked, so each inherits it unpickled."""


def test_command(options: TestOptions) -> int:
    """Run the selected cases, ``options.jobs`` at a time in worker processes; the exit code."""
    from framework.spec import load_project

    if options.record and options.update:
        raise UsageError("use --record (re-record every case) or --update (re-record failing cases), not both")
    if options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    project = load_project(options.project)
    suites = load_evals(project)
    if not suites:
        raise UsageError(f"no eval files in {project.root / 'evals'}: add evals/NAME.yaml (see docs/testing.md)")
    chosen = select(suites, options.pattern)
    if not chosen:
        raise UsageError(f"no case matches -k {options.pattern!r}")
    # Every case's scratch copy goes into one folder of this run, removed at the end whatever
    # happened to the workers (one killed on Ctrl-C cannot remove its own).
    scratch = Path(tempfile.mkdtemp(prefix="ca-test-run-", dir=scratch_base()))
    _JOB.update(project=project, chosen=chosen, options=options, scratch=scratch)
    # Imported once here, before the workers are forked, rather than once in each of them.
    import framework.protocols.a2a
    import framework.runtime.runtime  # noqa: F401

    progress = _Progress(len(chosen))
    started = time.monotonic()
    # Forked workers start with everything already imported; each runs one case at a time
    # (a case runs in its scratch copy as the working directory).
    context = multiprocessing.get_context("fork")
    workers = min(options.jobs, len(chosen))
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_worker_signals, initargs=(os.getpid(),)
    )
    stopped = signal.signal(signal.SIGTERM, _stopped)  # a SIGTERM stops the run as Ctrl-C does
    try:
        return _run_all(pool, chosen, options, progress, started)
    except KeyboardInterrupt:
        _stop_workers(pool)
        raise
    finally:
        signal.signal(signal.SIGTERM, stopped)
        if not options.keep:
            shutil.rmtree(scratch, ignore_errors=True)


def _stopped(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _run_all(
    pool: ProcessPoolExecutor,
    chosen: list[tuple[EvalSuite, EvalCase]],
    options: TestOptions,
    progress: _Progress,
    started: float,
) -> int:
    """Run every case in ``pool``, then report; the exit code."""
    outcomes: list[Outcome | None] = [None] * len(chosen)
    futures = {pool.submit(_work, i): i for i in range(len(chosen))}
    for future in as_completed(futures):
        outcome = future.result()
        outcomes[futures[future]] = outcome
        progress.done(outcome)
    pool.shutdown()
    done = [o for o in outcomes if o is not None]
    seconds = time.monotonic() - started
    if options.junit_xml is not None:
        write_junit(options.junit_xml, done, seconds)
    if options.as_json:
        passed = sum(o.passed for o in done)
        summary = {"passed": passed, "failed": len(done) - passed, "seconds": round(seconds, 3)}
        print(json.dumps({"cases": [o.to_json() for o in done], "summary": summary}, ensure_ascii=False, indent=2))
    else:
        report(done, seconds, sys.stdout)
    return 0 if all(o.passed for o in done) else 1


ORPHAN_POLL_S = 1.0
"""How often a worker looks whether the ``ca test`` that started it is still there."""


def _worker_signals(parent: int) -> None:
    """In each worker: Ctrl-C is the parent's to handle (it stops the workers with SIGTERM). A parent
    that died without stopping them (SIGKILL) is noticed within a second: the worker stops its case
    as on SIGTERM (its scratch copy removed), and is gone 5 s later at the latest."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_POLL_S)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        os._exit(1)

    threading.Thread(target=watch, name="ca-test-parent", daemon=True).start()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Ctrl-C: each worker cancels its case on SIGTERM (removing its scratch copy); one that does
    not end within 5 s is killed."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = multiprocessing.active_children()  # this process starts no children but the workers
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + 5
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()


def _work(index: int) -> Outcome:
    """In a worker process: run case ``index`` (and re-record it when it fails under --update).

    A bug of ``ca`` met by one case fails that case, saying so, instead of the whole run.
    """
    loop = _worker_loop()
    case = loop.create_task(_run_one(index))
    loop.add_signal_handler(signal.SIGTERM, case.cancel)  # the cancelled case still removes its scratch copy
    try:
        return loop.run_until_complete(case)
    except Exception as exc:
        suite, case = _JOB["chosen"][index]
        run = CaseRun(suite, case, error=f"internal error (a bug in ca, please report it): {type(exc).__name__}: {exc}")
        return Outcome(run, judge(run))


def _worker_loop() -> asyncio.AbstractEventLoop:
    """The event loop of this worker process, one for all its cases: provider clients (httpx)
    cached by their packages stay bound to the loop they were made in."""
    loop = _JOB.get("loop")
    if loop is None or loop.is_closed() or _JOB.get("pid") != os.getpid():
        loop = asyncio.new_event_loop()
        _JOB.update(loop=loop, pid=os.getpid())
    return loop


async def _run_one(index: int) -> Outcome:
    from framework.protocols.a2a import open_remote

    project, (suite, case), options = _JOB["project"], _JOB["chosen"][index], _JOB["options"]
    mode: RunMode = "record" if options.record else "replay"
    where = _JOB["scratch"]
    run = await run_case(project, suite, case, mode=mode, remote=open_remote, keep=options.keep, scratch_in=where)
    outcome = Outcome(run, judge(run))
    if options.update and not outcome.passed:
        again = await run_case(
            project, suite, case, mode="record", remote=open_remote, keep=options.keep, scratch_in=where
        )
        outcome = Outcome(again, judge(again), rerecorded=again.recorded)
    return outcome


class _Progress:
    """One line on stderr per finished case: ``[3/50] PASS file::case (0.21s)``."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.count = 0

    def done(self, outcome: Outcome) -> None:
        self.count += 1
        mark = "PASS" if outcome.passed else "FAIL"
        extra = " (re-recorded)" if outcome.rerecorded else " (recorded)" if outcome.run.recorded else ""
        sys.stderr.write(f"[{self.count}/{self.total}] {mark} {outcome.run.id} ({outcome.run.seconds:.2f}s){extra}\n")
        sys.stderr.flush()


def report(outcomes: list[Outcome], seconds: float, out: Any) -> None:
    """The failures in detail, then the summary table and totals."""
    for outcome in outcomes:
        if outcome.passed:
            continue
        run = outcome.run
        out.write(f"\nFAIL {run.id}  ({_shown(run.suite.path)}: case {run.case.name!r})\n")
        for miss in outcome.misses:
            out.write(f"  {miss.check}\n    expected: {miss.expected}\n    actual:   {miss.actual}\n")
            lines = around(run.events, miss.at)
            if lines:
                out.write("    events:\n" + "".join(f"      {line}\n" for line in lines))
        if run.scratch:
            out.write(f"  scratch copy kept at {run.scratch}\n")
    rows = [("case", "result", "state", "tools", "tokens", "time")]
    for o in outcomes:
        last, usage = o.run.last, o.run.usage
        rows.append(
            (
                o.run.id,
                "pass" if o.passed else "FAIL",
                last.state if last else "-",
                str(usage.tool_calls),
                str(usage.total_tokens),
                f"{o.run.seconds:.2f}s",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out.write("\n")
    for row in rows:
        out.write("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() + "\n")
    passed = sum(o.passed for o in outcomes)
    failed = len(outcomes) - passed
    out.write(f"\n{passed} passed, {failed} failed in {seconds:.2f}s\n")
    out.flush()


def _shown(path: Path) -> str:
    """A path as the user can open it: relative to the current folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def write_junit(path: Path, outcomes: list[Outcome], seconds: float) -> None:
    """A JUnit XML report: one testsuite per eval file, one testcase per case."""
    root = ElementTree.Element(
        "testsuites",
        name="ca test",
        tests=str(len(outcomes)),
        failures=str(sum(not o.passed for o in outcomes)),
        time=f"{seconds:.3f}",
    )
    by_file: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_file.setdefault(o.run.suite.name, []).append(o)
    for name, group in by_file.items():
        suite = ElementTree.SubElement(
            root,
            "testsuite",
            name=name,
            tests=str(len(group)),
            failures=str(sum(not o.passed for o in group)),
            time=f"{sum(o.run.seconds for o in group):.3f}",
        )
        for o in group:
            case = ElementTree.SubElement(
                suite, "testcase", classname=name, name=o.run.case.name, time=f"{o.run.seconds:.3f}"
            )
            if not o.passed:
                first = o.misses[0]
                failure = ElementTree.SubElement(
                    case, "failure", message=f"{first.check}: expected {first.expected}; actual {first.actual}"
                )
                failure.text = "\n".join(
                    f"{m.check}\n  expected: {m.expected}\n  actual:   {m.actual}\n"
                    + "\n".join(around(o.run.events, m.at))
                    for m in o.misses
                )
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
