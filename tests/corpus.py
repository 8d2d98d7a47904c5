"""The invalid-project corpus: every folder under tests/fixtures/invalid/ is one case.

A case holds a tiny project and ``expected.txt``: one line per error, in order,
``file:line:col: message`` (the file relative to the case folder; ``0:0`` for a whole-file
error), and may hold ``expected_hints.txt``. The loader's tests and the CLI's both run it.
"""

from __future__ import annotations

from pathlib import Path

CASES_DIR = Path(__file__).resolve().parent / "fixtures" / "invalid"
CASES = sorted(p for p in CASES_DIR.iterdir() if p.is_dir())


def expected_lines(path: Path) -> list[str]:
    """The non-empty lines of an expectation file, or none when there is no such file."""
    if not path.is_file():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
