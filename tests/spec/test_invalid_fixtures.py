"""Every project under tests/fixtures/invalid/ is refused with exactly the errors it expects.

A case is a folder holding a tiny project and ``expected.txt``: one line per error, in
order, ``file:line:col: message`` (the file relative to the case folder; ``0:0`` for a
whole-file error). ``expected_hints.txt``, when present, lists ``hint: ...`` lines that must
each appear among the diagnostics' hints (did-you-mean suggestions and the like).

To add a case: create the folder, run ``ca validate`` in it, read the output critically
(right line and column? does the message say what to change?), then write the files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.spec import load_project
from tests.corpus import CASES, expected_lines


def test_the_corpus_is_there_and_every_case_expects_errors() -> None:
    assert len(CASES) >= 34
    for case in CASES:
        assert expected_lines(case / "expected.txt"), f"{case.name}: expected.txt is missing or empty"
        assert (case / "agents").is_dir() or (case / "ca.yaml").is_file(), f"{case.name}: not a project"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_invalid_project_reports_exactly_the_expected_errors(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(case)  # paths in diagnostics print relative to the current directory
    with pytest.raises(SpecError) as info:  # any other exception is a bug in the loader
        load_project(case, environ={})  # no variable of the real environment leaks in
    diagnostics = info.value.diagnostics
    errors = [f"{d.file}:{d.line}:{d.column}: {d.message}" for d in diagnostics if d.severity == "error"]
    assert errors == expected_lines(case / "expected.txt")
    hints = {f"hint: {d.hint}" for d in diagnostics if d.hint}
    for hint in expected_lines(case / "expected_hints.txt"):
        assert hint in hints, f"{hint!r} not among {sorted(hints)}"
