"""Masking secret values out of text."""

from __future__ import annotations

from framework.runtime.governance import mask
from framework.runtime.governance.secrets import SecretValues


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


def test_a_secret_is_masked_in_each_form_text_gives_it() -> None:
    known = SecretValues(['hunter"2-sécret', "Bearer ghp-tok-abcdef123456", "pass word/1"])
    said = (
        '{"value": "hunter\\"2-s\\u00e9cret"} {"value": "hunter\\"2-sécret"}'  # JSON, ASCII-only or not
        " {'value': 'hunter\"2-sécret'}"  # a Python repr
        " token ghp-tok-abcdef123456"  # the credential of an Authorization value, without its scheme
        " https://x.test/?p=pass%20word%2F1"  # percent-encoded
    )
    assert known.text(said) == '{"value": "***"} {"value": "***"} {\'value\': \'***\'} token *** https://x.test/?p=***'


def test_the_end_of_a_chunk_that_may_begin_a_secret_is_held_back() -> None:
    known = SecretValues(["sk-supersecret-123456"])
    assert known.held_back("your key: sk-superse") == len("sk-superse")
    assert known.held_back("your key: s") == 1
    assert known.held_back("your key: ***") == 0  # whole: masked already
    assert known.held_back("your key is short") == 0
    assert SecretValues().held_back("anything") == 0
