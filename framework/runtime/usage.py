"""Usage and cost from the audit: what ``ca usage`` prints and ``_cleveragents/usage`` returns.

The audit is the one source: each model call is a ``model.call`` record (model, tokens, cost in
US dollars or null when its price is unknown, caller), each tool call that ran a ``tool.call``
record and each refused one a ``denial`` (both naming the tool and the caller), all written by
governance (:mod:`framework.runtime.governance.middleware`). The report groups them by agent,
model, caller or UTC day; a group's cost is unknown when any of its model calls has no price,
and the report says which models those are. A run is a task with at least one model or tool call
in the group. Tool calls of a task count under the model of that task's latest model call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, get_args

from framework.errors import UsageError
from framework.runtime.audit import AuditRecord

By = Literal["agent", "model", "caller", "day"]
GROUPINGS: tuple[str, ...] = get_args(By)
KINDS = frozenset({"model.call", "tool.call", "denial"})
"""The records a usage report reads."""
NONE = "-"
"""The group of records without the grouped field (a tool call of a task that called no model)."""
_AGE = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def since_bound(text: str, now: datetime | None = None, *, option: str = "--since") -> str:
    """``--since`` as the UTC ISO-8601 text records' ``ts`` compare with: an age (``30m``, ``2h``,
    ``7d``) back from now, or an ISO date/time (without a zone: local time). ``option``: its name in
    the message of a mistake."""
    age = _AGE.match(text.strip())
    if age:
        moment = (now or datetime.now(UTC)) - timedelta(**{_UNITS[age[2]]: int(age[1])})
    else:
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            raise UsageError(
                f"{option} {text!r} is neither an ISO time (2026-05-01 or 2026-05-01T09:30) nor an age (30m, 2h, 7d)"
            ) from None
        if moment.tzinfo is None:
            moment = moment.astimezone()  # the person's local time
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


@dataclass
class UsageRow:
    """One group's sums."""

    group: str
    tasks: set[str] = field(default_factory=set)
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    """The priced calls' dollars; the group's cost when :attr:`unpriced` is empty."""
    unpriced: set[str] = field(default_factory=set)
    """Models of calls without a price."""
    tools: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tool -> decision (``allowed``, ``denied``) -> calls."""

    @property
    def tool_calls(self) -> int:
        """Tool calls asked for, run or refused (as a run's own usage counts them)."""
        return sum(sum(counts.values()) for counts in self.tools.values())

    @property
    def cost_usd(self) -> float | None:
        return None if self.unpriced else float(self.cost)

    def add(self, record: AuditRecord) -> None:
        data = record.data
        self.tasks.add(record.task_id)
        if record.kind == "model.call":
            self.model_calls += 1
            self.input_tokens += int(data.get("input_tokens", 0))
            self.output_tokens += int(data.get("output_tokens", 0))
            if data.get("cost_usd") is None:
                self.unpriced.add(str(data.get("model", NONE)))
            else:
                self.cost += Decimal(str(data["cost_usd"]))  # the decimal the record shows, not a float's tail
            return
        decision = "allowed" if record.kind == "tool.call" else "denied"
        counts = self.tools.setdefault(str(data.get("tool", NONE)), {})
        counts[decision] = counts.get(decision, 0) + 1

    def merge(self, other: UsageRow) -> None:
        self.tasks |= other.tasks
        self.model_calls += other.model_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost += other.cost
        self.unpriced |= other.unpriced
        for tool, counts in other.tools.items():
            mine = self.tools.setdefault(tool, {})
            for decision, n in counts.items():
                mine[decision] = mine.get(decision, 0) + n

    def to_json(self) -> dict[str, Any]:
        """snake_case like every ``--json`` of the CLI (A2A camelCases it), integers as integers,
        cost as a number or null (unknown)."""
        return {
            "group": self.group,
            "runs": len(self.tasks),
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "unknown_prices": sorted(self.unpriced),
            "tool_calls": self.tool_calls,
            "tools": {tool: dict(sorted(counts.items())) for tool, counts in sorted(self.tools.items())},
        }


@dataclass
class UsageReport:
    by: By
    since: str | None
    rows: list[UsageRow]

    @property
    def total(self) -> UsageRow:
        total = UsageRow("total")
        for row in self.rows:
            total.merge(row)
        return total

    def to_json(self) -> dict[str, Any]:
        return {
            "by": self.by,
            "since": self.since,
            "groups": [row.to_json() for row in self.rows],
            "total": self.total.to_json(),
        }


def usage_report(
    records: Iterable[AuditRecord], by: By, *, since: str | None = None, tasks: Container[str] | None = None
) -> UsageReport:
    """Sum ``records`` (oldest first) by ``by``; ``tasks``: only these tasks' records (a caller's own)."""
    rows: dict[str, UsageRow] = {}
    models: dict[str, str] = {}  # task -> the model of its latest call
    key = _grouping(by, models)
    for record in records:
        if record.kind not in KINDS or (tasks is not None and record.task_id not in tasks):
            continue
        if record.kind == "model.call":
            models[record.task_id] = str(record.data.get("model", NONE))
        group = key(record) or NONE
        rows.setdefault(group, UsageRow(group)).add(record)
    return UsageReport(by, since, [rows[name] for name in sorted(rows)])


def _grouping(by: By, models: dict[str, str]) -> Callable[[AuditRecord], str]:
    if by == "agent":
        return lambda record: record.agent
    if by == "model":
        return lambda record: models.get(record.task_id, NONE)
    if by == "caller":
        return lambda record: str(record.data.get("caller", ""))
    return lambda record: record.ts[:10]  # ts is UTC ISO-8601: its date is the UTC day


def format_report(report: UsageReport) -> str:
    """The report as a table, with a totals row; unknown costs say which models have no price."""
    header = (report.by, "runs", "model calls", "input tokens", "output tokens", "cost (USD)", "tool calls")
    lines = [_cells(row) for row in report.rows]
    total = report.total
    table = [header, *lines, _cells(total)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]

    def render(cells: tuple[str, ...]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))]).rstrip()

    out = [render(header), *(render(line) for line in lines), render(table[-1])]
    if total.unpriced:
        out.append(
            f"unknown: no price for {', '.join(sorted(total.unpriced))}; add them to ca.yaml prices:"
            " {MODEL: {input_per_mtok: ..., output_per_mtok: ...}}"
        )
    return "\n".join(out)


def _cells(row: UsageRow) -> tuple[str, ...]:
    cost = "unknown" if row.cost_usd is None else f"{row.cost:.6f}"
    counts = (len(row.tasks), row.model_calls, row.input_tokens, row.output_tokens)
    return (row.group, *(str(n) for n in counts), cost, str(row.tool_calls))
