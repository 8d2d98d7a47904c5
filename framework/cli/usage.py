"""``ca usage``: tokens, cost and tool calls summed from the audit, by agent, model, caller or day."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from framework.errors import UsageError


@dataclass
class UsageOptions:
    project: Path
    by: str
    since: str | None
    as_json: bool


def usage_command(options: UsageOptions) -> int:
    """Print the usage report; the exit code."""
    from framework.runtime.audit import AuditLog
    from framework.runtime.usage import GROUPINGS, By, format_report, since_bound, usage_report
    from framework.spec import load_project

    if options.by not in GROUPINGS:
        raise UsageError(f"--by {options.by!r} is not a grouping: use one of {', '.join(GROUPINGS)}")
    since = since_bound(options.since) if options.since is not None else None
    loaded = load_project(options.project)
    with AuditLog.of_project(loaded) as log:
        report = usage_report(log.records(since_ts=since), cast(By, options.by), since=since)
    print(json.dumps(report.to_json(), indent=2) if options.as_json else format_report(report))
    return 0
