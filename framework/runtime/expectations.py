"""Judge a case's run against its expectations: each miss says what was expected, what happened,
and where in the run's events it shows (:attr:`Miss.at`, an index into :attr:`CaseRun.events`)."""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from typing import Any

from framework.runtime.evaluation import CaseRun
from framework.runtime.events import (
    ArtifactOut,
    MessageOut,
    Paused,
    RunEvent,
    RunFinished,
    StepUpdate,
    TextChunk,
    ThoughtChunk,
    ToolCallFinished,
    ToolCallStarted,
)
from framework.spec.evals import Expectations, ToolCallExpectation


@dataclass(frozen=True)
class Miss:
    """One expectation that did not hold."""

    check: str
    """Which expectation, as written in the eval file (``expect.tools_called[1]``)."""
    expected: str
    actual: str
    at: int | None = None
    """The event it shows at (None: the run as a whole)."""

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "expected": self.expected, "actual": self.actual, "at": self.at}


def judge(run: CaseRun) -> list[Miss]:
    """Every expectation of the case that ``run`` does not meet (empty: the case passed)."""
    if run.mismatch is not None:
        return [Miss("cassette", "the model requests recorded in the cassette", run.mismatch, _last(run))]
    if run.error:
        return [Miss("run", "the case to run to its end", run.error, _last(run))]
    expect = run.case.expect
    misses: list[Miss] = []
    for check in (_state, _tools, _not_called, _output, _contract, _budget, _steps, _judged):
        misses.extend(check(run, expect))
    return misses


def _last(run: CaseRun) -> int | None:
    return len(run.events) - 1 if run.events else None


def _end(run: CaseRun) -> tuple[str, str, str]:
    last = run.last
    if last is None:
        return "no run", "", ""
    code = last.failure.code if last.failure is not None else ""
    return last.state, code, last.error


def _state(run: CaseRun, expect: Expectations) -> list[Miss]:
    state, code, error = _end(run)
    shown = state + (f" ({code}: {error})" if code else "")
    out = []
    if expect.state is not None and state != expect.state:
        out.append(Miss("expect.state", expect.state, shown, _last(run)))
    if expect.failure_code is not None and code != expect.failure_code:
        out.append(Miss("expect.failure_code", f"failed with {expect.failure_code}", shown, _last(run)))
    return out


def _calls(run: CaseRun) -> list[tuple[int, ToolCallStarted]]:
    return [(i, e) for i, e in enumerate(run.events) if isinstance(e, ToolCallStarted)]


def _matches(pattern: ToolCallExpectation, call: ToolCallStarted) -> bool:
    if not fnmatch.fnmatchcase(call.tool, pattern.tool):
        return False
    for key, glob in pattern.args.items():
        if key not in call.args:
            return False
        value = call.args[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if not fnmatch.fnmatchcase(text, glob):
            return False
    return True


def _show_calls(calls: list[tuple[int, ToolCallStarted]]) -> str:
    if not calls:
        return "no tool calls"
    return ", ".join(f"{c.tool} {json.dumps(c.args, ensure_ascii=False)}" for _, c in calls)


def _tools(run: CaseRun, expect: Expectations) -> list[Miss]:
    calls = _calls(run)
    out = []
    position = 0  # with in_order: where in the calls the next expected one is looked for
    for n, pattern in enumerate(expect.tools_called):
        where = f"expect.tools_called[{n}]"
        found = [(i, c) for k, (i, c) in enumerate(calls) if _matches(pattern, c) and k >= position]
        if pattern.count is not None:
            every = [(i, c) for i, c in calls if _matches(pattern, c)]
            if len(every) != pattern.count:
                at = every[-1][0] if every else _last(run)
                out.append(Miss(where, pattern.describe(), f"{len(every)} matching calls: {_show_calls(calls)}", at))
                continue
        if not found:
            had = [(i, c) for i, c in calls if _matches(pattern, c)]
            actual = _show_calls(calls)
            if had and expect.in_order:
                actual = f"it came earlier than expected; the calls: {actual}"
            out.append(Miss(where, f"a call {pattern.describe()}", actual, _last(run)))
            continue
        if expect.in_order:
            first = found[0][0]
            position = next(k for k, (i, _) in enumerate(calls) if i == first) + 1
    return out


def _not_called(run: CaseRun, expect: Expectations) -> list[Miss]:
    out = []
    for n, pattern in enumerate(expect.tools_not_called):
        for i, call in _calls(run):
            if _matches(pattern, call):
                actual = f"called {call.tool} {json.dumps(call.args, ensure_ascii=False)}"
                out.append(Miss(f"expect.tools_not_called[{n}]", f"no call {pattern.describe()}", actual, i))
                break
    return out


def _output(run: CaseRun, expect: Expectations) -> list[Miss]:
    last = run.last
    output = last.output if last is not None else ""
    at = _last(run)
    shown = json.dumps(output, ensure_ascii=False)
    out = []
    for n, text in enumerate(expect.output_contains):
        if text not in output:
            out.append(Miss(f"expect.output_contains[{n}]", f"the output contains {text!r}", shown, at))
    if expect.output_matches is not None and not expect.output_matches.search(output):
        out.append(Miss("expect.output_matches", f"the output matches /{expect.output_matches.pattern}/", shown, at))
    if expect.output_equals is not None and output.strip() != expect.output_equals.strip():
        out.append(Miss("expect.output_equals", json.dumps(expect.output_equals, ensure_ascii=False), shown, at))
    if expect.output_schema is not None:
        problem = _schema_problem(output, expect.output_schema)
        if problem:
            out.append(Miss("expect.output_schema", "the output is JSON valid under the schema", problem, at))
    return out


def _schema_problem(output: str, schema: dict[str, Any]) -> str:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    try:
        value = json.loads(output)
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg} at character {exc.pos}): {json.dumps(output[:120], ensure_ascii=False)}"
    error = best_match(Draft202012Validator(schema).iter_errors(value))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    return f"at {where}: {error.message}"


def _contract(run: CaseRun, expect: Expectations) -> list[Miss]:
    if expect.contract_held is None:
        return []
    broken = [
        r
        for r in run.audit
        if r.kind == "contract" or (r.kind == "denial" and str(r.data.get("rule", "")).startswith("contract"))
    ]
    problems: list[str] = []
    for record in broken:
        if record.kind == "contract":
            problems.extend(str(v) for v in record.data.get("violations") or [])
        else:
            problems.append(f"{record.data.get('rule')}: refused {record.data.get('tool')} {record.data.get('args')}")
    held = not broken
    if held == expect.contract_held:
        return []
    if expect.contract_held:
        return [Miss("expect.contract_held", "no contract rule broken", "; ".join(problems), _last(run))]
    return [Miss("expect.contract_held", "a contract rule broken (contract_held: false)", "the contract held", None)]


def _budget(run: CaseRun, expect: Expectations) -> list[Miss]:
    limits = expect.budget
    if limits is None:
        return []
    usage = run.usage
    used: dict[str, tuple[float | None, float]] = {
        "max_tokens": (limits.max_tokens, usage.total_tokens),
        "max_input_tokens": (limits.max_input_tokens, usage.input_tokens),
        "max_output_tokens": (limits.max_output_tokens, usage.output_tokens),
        "max_tool_calls": (limits.max_tool_calls, usage.tool_calls),
        "max_model_calls": (limits.max_model_calls, usage.model_calls),
        "max_cost_usd": (float(limits.max_cost_usd) if limits.max_cost_usd is not None else None, float(run.cost_usd)),
        "max_duration": (limits.max_duration, run.seconds),
    }
    out = []
    for key, (cap, value) in used.items():
        if cap is not None and value > cap:
            out.append(Miss(f"expect.budget.{key}", f"at most {_num(cap)}", f"{_num(value)} used", None))
    return out


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) and not value.is_integer() else str(int(value))


def _steps(run: CaseRun, expect: Expectations) -> list[Miss]:
    reached = [e.step for e in run.events if isinstance(e, StepUpdate) and e.status in ("started", "completed")]
    out = []
    for n, step in enumerate(expect.steps_reached):
        if step not in reached:
            seen = ", ".join(dict.fromkeys(reached)) or "none"
            out.append(Miss(f"expect.steps_reached[{n}]", f"step {step!r} started", f"steps started: {seen}", None))
    return out


def _judged(run: CaseRun, expect: Expectations) -> list[Miss]:
    out = []
    for n, criterion in enumerate(expect.judged):
        verdict = run.verdicts[n] if n < len(run.verdicts) else None
        if verdict is None:
            out.append(Miss(f"expect.judged[{n}]", criterion, "not judged: the case ended without an answer", None))
        elif not verdict.passed:
            out.append(Miss(f"expect.judged[{n}]", criterion, f"the judge: {verdict.reason}", _last(run)))
    return out


def timeline(events: list[RunEvent]) -> list[tuple[int, str]]:
    """The run as lines (event index, text); consecutive text chunks of one source form one line."""
    lines: list[tuple[int, str]] = []
    text_from: int | None = None
    text = ""
    for i, event in enumerate(events):
        if isinstance(event, TextChunk | ThoughtChunk):
            if text_from is None:
                text_from, text = i, ""
            text += event.text
            continue
        if text_from is not None:
            lines.append((text_from, "text " + json.dumps(" ".join(text.split()), ensure_ascii=False)))
            text_from = None
        line = describe(event)
        if line:
            lines.append((i, line))
    if text_from is not None:
        lines.append((text_from, "text " + json.dumps(" ".join(text.split()), ensure_ascii=False)))
    return lines


def describe(event: RunEvent) -> str:
    """One line for an event ('' for those not worth a line)."""
    source: tuple[str, ...] = getattr(event, "source", ())
    who = f"[{'/'.join(source)}] " if source else ""
    if isinstance(event, ToolCallStarted):
        return f"{who}tool_call {event.tool} {json.dumps(event.args, ensure_ascii=False)}"
    if isinstance(event, ToolCallFinished):
        flat = " ".join(event.result.split())
        return f"{who}tool_result {event.tool}{' (error)' if event.is_error else ''}: {flat[:120]}"
    if isinstance(event, StepUpdate):
        return f"{who}step {event.step} {event.status}"
    if isinstance(event, Paused):
        return f"{who}paused ({event.pause.kind}): {event.pause.message}"
    if isinstance(event, ArtifactOut):
        return f"{who}artifact {event.name}"
    if isinstance(event, MessageOut):
        return f"{who}message {json.dumps(event.text[:120], ensure_ascii=False)}"
    if isinstance(event, RunFinished):
        code = f" ({event.failure.code})" if event.failure is not None else ""
        return f"finished {event.state}{code}" + (f": {event.error}" if event.error else "")
    return ""


def around(events: list[RunEvent], at: int | None, width: int = 3) -> list[str]:
    """The timeline lines around event ``at`` (the last ones when None), the one at ``at`` marked."""
    lines = timeline(events)
    if not lines:
        return []
    if at is None:
        return ["  " + line for _, line in lines[-2 * width :]]
    pos = max((k for k, (i, _) in enumerate(lines) if i <= at), default=0)
    start, stop = max(0, pos - width), min(len(lines), pos + width + 1)
    return [("> " if k == pos else "  ") + lines[k][1] for k in range(start, stop)]
