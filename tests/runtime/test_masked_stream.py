"""A run's events masked as they stream: a secret a model sends over several chunks never shows."""

from __future__ import annotations

import random

from framework.runtime.events import RunFinished, StepUpdate, TextChunk, ThoughtChunk, ToolCallStarted
from framework.runtime.governance.secrets import SecretValues
from framework.runtime.masked_stream import MaskedStream

SECRET = "sk-supersecret-123456"


def _sent(*events: object, secrets: tuple[str, ...] = (SECRET,)) -> list[object]:
    stream = MaskedStream(SecretValues(secrets))
    sent = [event for raw in events for event in stream.feed(raw)]  # type: ignore[arg-type]
    return sent + list(stream.end())


def _text(events: list[object], kind: type = TextChunk, source: tuple[str, ...] = ()) -> str:
    return "".join(e.text for e in events if type(e) is kind and e.source == source)  # type: ignore[attr-defined]


def test_a_secret_split_over_chunks_is_masked_joined_and_nothing_else_is_lost() -> None:
    sent = _sent(TextChunk("Your key: sk-su"), TextChunk("persec"), TextChunk("ret-123456, and more"))
    assert _text(sent) == "Your key: ***, and more"
    assert all(SECRET[:5] not in e.text for e in sent)  # type: ignore[attr-defined]


def test_what_began_no_secret_is_sent_before_the_next_event_of_its_source_and_the_end() -> None:
    call = ToolCallStarted(call_id="c1", tool="fs.read", args={"path": "x"})
    sent = _sent(TextChunk("look at sk-"), call, TextChunk("done "), RunFinished("completed", output="look"))
    assert [type(e).__name__ for e in sent] == ["TextChunk", "TextChunk", "ToolCallStarted", "TextChunk", "RunFinished"]
    assert _text(sent) == "look at sk-done "


def test_streams_of_parallel_steps_and_thoughts_are_joined_each_on_its_own() -> None:
    a, b = ("flow", "a"), ("flow", "b")
    sent = _sent(
        TextChunk("a says sk-super", source=a),
        TextChunk("b says sk-", source=b),
        ThoughtChunk("thinking sk-supersecret-", source=a),
        ToolCallStarted(call_id="c2", tool="shell", args={}, source=b),  # b's text goes on no further
        TextChunk("secret-123456", source=a),
        ThoughtChunk("123456", source=a),
        TextChunk("never", source=b),
    )
    assert _text(sent, source=a) == "a says ***"
    assert _text(sent, ThoughtChunk, a) == "thinking ***"
    assert _text(sent, source=b) == "b says sk-never"


def test_other_events_are_masked_whole() -> None:
    (finished,) = _sent(RunFinished("completed", output=f"the key is {SECRET}"))
    assert finished == RunFinished("completed", output="the key is ***")


def test_a_whole_secret_that_begins_a_longer_one_waits_for_the_next_chunk() -> None:
    sent = _sent(TextChunk("x abcd1234"), TextChunk("5678 y"), secrets=("abcd1234", "abcd12345678"))
    assert _text(sent) == "x *** y"


def test_a_steps_update_sends_what_its_agent_held() -> None:
    step = StepUpdate(step="s1", status="completed")  # a step's update is the workflow's, at the root
    sent = _sent(TextChunk("hello", source=("a",)), step, TextChunk("next", source=("a",)), secrets=("okta-9999",))
    assert [(type(e).__name__, getattr(e, "text", "")) for e in sent] == [
        ("TextChunk", "hell"),
        ("TextChunk", "o"),  # held: it may begin the secret; sent before the step's end, not after
        ("StepUpdate", ""),
        ("TextChunk", "next"),
    ]


def test_the_text_a_client_joins_is_the_text_masked_whole_however_it_was_chunked() -> None:
    secrets = ("sk-supersecret-123456", "abcd1234", "abcd12345678", 'pa"ss\\wörd', "1234abcd")
    known = SecretValues(secrets)
    pieces = [*secrets, " ", "x", "sk-", "abcd", "123", "wö", "\n"]
    chance = random.Random(51)
    for _ in range(400):
        text = "".join(chance.choice(pieces) for _ in range(chance.randint(1, 12)))
        cuts = (
            sorted(chance.sample(range(1, len(text)), min(len(text) - 1, chance.randint(0, 6))))
            if len(text) > 1
            else []
        )
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        sent = _sent(*(TextChunk(c) for c in chunks), RunFinished("completed"), secrets=secrets)
        assert _text(sent) == known.text(text), (chunks, sent)
