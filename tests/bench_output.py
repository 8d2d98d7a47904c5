"""Reading what the benches print: the report's rows, for the tests that run a bench tiny."""

from __future__ import annotations

CA_ROW = "ca serve, offline echo agent, SQLite (.ca/state.db)"
"""bench/serve.py's row for `ca serve` on its default store."""


def blocks(out: str) -> dict[str, list[str]]:
    """The report's rows: each unindented line with the indented lines below it."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in out.splitlines():
        if line.startswith(" "):
            current.append(line.strip())
        else:
            current = found.setdefault(line, [])
    return found
