"""Masking secret values out of text."""

from __future__ import annotations

from framework.runtime.governance import mask


def test_every_occurrence_of_a_secret_is_masked() -> None:
    assert mask("token=abcd1234 again abcd1234", ["abcd1234"]) == "token=*** again ***"


def test_the_longest_secret_is_masked_first() -> None:
    assert mask("key sk-live-XYZW and sk-live", ["sk-live", "sk-live-XYZW"]) == "key *** and ***"


def test_secrets_shorter_than_four_characters_are_left_alone() -> None:
    assert mask("on 1 abc abcd", ["on", "1", "abc", "abcd", ""]) == "on 1 abc ***"


def test_no_secrets_leave_the_text_unchanged() -> None:
    assert mask("plain", []) == "plain"
    assert mask("plain", iter(["x"])) == "plain"


def test_secrets_with_regex_characters_are_matched_literally() -> None:
    assert mask("p: a.b*c(d) and aXbbc(d)", ["a.b*c(d)"]) == "p: *** and aXbbc(d)"
