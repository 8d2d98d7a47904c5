"""The strict JSON decoder every wire uses: what it refuses, and the path it names for values
that would not survive being stored and sent back."""

from __future__ import annotations

import io

import pytest

from framework.protocols.jsontext import MAX_DEPTH, JsonTextError, decode, read_line, unrepresentable


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": "\xff"}', "not UTF-8 (byte 7: invalid start byte)"),
        (b'{"a": NaN}', "NaN is not a JSON value"),
        (b"[Infinity]", "Infinity is not a JSON value"),
        (b"{", "invalid JSON: Expecting property name enclosed in double quotes at line 1 column 2"),
        (b"[" * 5000 + b"]" * 5000, f"nest deeper than {MAX_DEPTH} levels"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"nest deeper than {MAX_DEPTH} levels"),
    ],
    ids=["invalid-utf8", "nan", "infinity", "truncated", "recursion-limit", "one-too-deep"],
)
def test_text_that_is_not_json_we_take_is_refused_with_a_one_line_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(JsonTextError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        decode(raw)


def test_nesting_up_to_the_limit_and_a_byte_order_mark_are_fine() -> None:
    assert decode(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert decode("\ufeff{}".encode()) == {}


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ('{"parts": [{"data": {"n": 1e999}}]}', "params.parts[0].data.n: the number 1e999 is out of range"),
        ('{"n": -1e999}', "params.n: the number -1e999 is out of range"),
        ('{"n": ' + "9" * 4301 + "}", "params.n: the number 999999999999…(4301 characters) is out of range"),
        ('{"n": 9007199254740993}', "params.n: the integer 9007199254740993 is beyond ±2**53"),
        ('{"t": ["ok", "\\ud800"]}', "params.t[1]: a string with an unpaired surrogate"),
        ('{"weird key": {"\\udc00": 1}}', 'params["weird key"]: a key with an unpaired surrogate'),
    ],
    ids=["inf", "minus-inf", "4301-digits", "beyond-2**53", "lone-surrogate", "surrogate-key"],
)
def test_values_that_would_not_round_trip_are_named_by_their_path(raw: str, reason: str) -> None:
    problem = unrepresentable(decode(raw))
    assert problem is not None and problem.startswith(reason), problem


def test_ordinary_values_round_trip() -> None:
    value = decode('{"n": 9007199254740992, "f": 1.5e300, "t": "snowman \\u2603 \\ud83d\\ude00", "l": [null, true]}')
    assert unrepresentable(value) is None


def test_an_over_long_line_is_measured_and_skipped_not_kept() -> None:
    stream = io.BytesIO(b"short\n" + b"x" * 100 + b"\nnext\n")
    assert read_line(stream, 10) == b"short\n"
    assert read_line(stream, 10) == 101
    assert read_line(stream, 10) == b"next\n"
    assert read_line(stream, 10) == b""
