"""``ca audit``: the audit log's newest records (as lines or JSON), or a check of its hash chain."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from framework.errors import UsageError
from framework.runtime.usage import since_bound


@dataclass
class AuditOptions:
    project: Path
    task: str | None
    verify: bool
    limit: int
    since: str | None
    as_json: bool


def audit_command(options: AuditOptions) -> int:
    """List (or verify) the audit log; the exit code."""
    from framework.runtime.audit import AuditLog, format_record
    from framework.runtime.audit_chain import UNKEYED, chain_key, describe
    from framework.runtime.tasks import TaskStore
    from framework.spec import load_project

    since = since_bound(options.since) if options.since is not None else None
    if options.verify and (since is not None or options.task or options.as_json):
        raise UsageError("--verify checks the whole chain; it goes with none of --task, --since, --json")
    loaded = load_project(options.project)
    root = loaded.root
    key = chain_key(loaded.config.audit, root) if options.verify else None  # listing records needs no key
    log = AuditLog.of_project(loaded, key=key)
    try:
        if options.verify:
            result = log.verify()
            for problem in result.problems:
                sys.stderr.write(problem + "\n")
            if not result.ok:
                sys.stderr.write(
                    f"audit log TAMPERED: {len(result.problems)} problem(s) in {result.checked} records,"
                    f" {describe(result)}\n"
                )
                return 1
            caveat = ": detects edits, not a rewrite of the whole chain" if result.chain == UNKEYED else ""
            print(f"audit log ok: {result.checked} records, {describe(result)}{caveat}; head {result.head_hash}")
            return 0
        task_id = None
        if options.task:
            store = TaskStore.open(root, url=loaded.config.store.url)
            try:
                task_id = store.get(options.task).id
            finally:
                store.close()
        records = log.query(task_id=task_id, since_ts=since, limit=options.limit, newest=True)
    finally:
        log.close()
    if options.as_json:
        print(json.dumps([vars(r) for r in records], indent=2, ensure_ascii=False))
    else:
        for record in records:
            print(format_record(record))
    return 0
