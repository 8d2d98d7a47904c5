"""Hostile files are refused quickly, with a clear message, without exhausting memory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from framework.errors import SpecError
from framework.spec import load_project

BILLION_LAUGHS = """\
name: bomb
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def _errors_within(root: Path, seconds: float = 2.0) -> list[str]:
    start = time.perf_counter()
    with pytest.raises(SpecError) as info:
        load_project(root)
    elapsed = time.perf_counter() - start
    assert elapsed < seconds, f"took {elapsed:.2f}s"
    return [f"{d.line}:{d.column}: {d.message}" for d in info.value.errors]


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "bomb.yaml").write_text(BILLION_LAUGHS)
    errors = _errors_within(tmp_path)
    assert len(errors) == 1
    assert "expands to more than 100,000 values (alias bomb?)" in errors[0]


def test_fifty_megabyte_file_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    big = tmp_path / "agents" / "big.yaml"
    with big.open("wb") as f:
        f.write(b"name: big\ndescription: '")
        f.write(b"x" * (50 * 1024 * 1024))
        f.write(b"'\n")
    assert _errors_within(tmp_path) == ["0:0: file is 50.0 MiB; config files are limited to 1 MiB"]


@pytest.mark.parametrize(
    "text",
    [
        "name: deep\nx: " + "[" * 5000 + "]" * 5000 + "\n",
        "name: deep\nx: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
        "name: deep\n" + "".join("  " * i + f"k{i}:\n" for i in range(300)) + "  " * 300 + "v: 1\n",
    ],
    ids=["flow-lists", "flow-maps", "block-maps"],
)
def test_deep_nesting_is_refused(tmp_path: Path, text: str) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "deep.yaml").write_text(text)
    errors = _errors_within(tmp_path)
    assert len(errors) == 1
    assert "nested too deeply (more than 64 levels)" in errors[0]
