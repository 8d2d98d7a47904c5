"""bench/model_call.py, run tiny so it cannot silently break: both variants answer, for each
length of conversation and answer asked, and a wrong option is one clear line."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

BENCH = [sys.executable, "bench/model_call.py"]


def test_the_model_call_bench_reports_both_variants_for_each_length() -> None:
    done = subprocess.run(
        [*BENCH, "--calls", "2", "--turns", "0,1", "--words", "3"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [row[:2] for row in rows] == [["2", "3"], ["6", "3"]]  # a system message, 4 per earlier turn, the question
    assert all(len(row) == 6 and row[3] == row[5] == "ms" for row in rows), done.stdout


def test_a_malformed_length_is_one_clear_line() -> None:
    done = subprocess.run([*BENCH, "--turns", "a,b"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == "--turns must be whole numbers separated by commas, not 'a,b'"
