"""The ``.env`` parser every reader shares (the loader and the ACP initialize fast path)."""

from __future__ import annotations

from framework.spec.env_file import parse_env_file


def test_quotes_keep_what_they_hold_and_an_unquoted_value_ends_at_a_comment() -> None:
    text = "A='x # not a comment'\nB=\"tab\\there\"\nC=plain  # a comment\nD='it\\'s'\n"
    assert parse_env_file(text, {}) == {"A": "x # not a comment", "B": "tab\there", "C": "plain", "D": "it's"}


def test_export_and_blanks_around_the_name_are_allowed() -> None:
    assert parse_env_file("export A = 1\n  B=2  \n", {}) == {"A": "1", "B": "2"}


def test_a_value_left_empty_before_a_comment_is_empty_but_a_hash_right_after_equals_is_kept() -> None:
    assert parse_env_file("A= # paste yours here\nB=#literal\n", {}) == {"A": "", "B": "#literal"}


def test_a_double_quoted_value_may_span_lines() -> None:
    assert parse_env_file('KEY="-----BEGIN-----\nabc\n-----END-----"\nNEXT=1\n', {}) == {
        "KEY": "-----BEGIN-----\nabc\n-----END-----",
        "NEXT": "1",
    }


def test_a_reference_takes_an_earlier_line_then_the_environment_then_its_default() -> None:
    text = "HOST=db\nURL=${HOST}:${PORT}/${NAME:-main}\n"
    assert parse_env_file(text, {"PORT": "5432", "HOST": "ignored"})["URL"] == "db:5432/main"


def test_comment_blank_and_malformed_lines_are_skipped_and_the_rest_is_read() -> None:
    text = "\ufeff# settings\n\nnot a binding\nA=1\n'unclosed=2\nB=2\n"
    assert parse_env_file(text, {}) == {"A": "1", "B": "2"}


def test_a_name_without_a_value_sets_nothing() -> None:
    assert parse_env_file("LONELY\nA=1\n", {}) == {"A": "1"}
