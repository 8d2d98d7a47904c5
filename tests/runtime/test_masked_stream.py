"""A run's events masked as they stream: a secret a model sends over several chunks never shows."""

from __future__ import annotations

from framework.runtime.events import RunFinished, TextChunk, ThoughtChunk, ToolCallStarted
from framework.runtime.governance.secrets import SecretValues
from framework.runtime.masked_stream import MaskedStream

SECRET = "sk-supersecret-123456"


def _sent(*events: object) -> list[object]:
    stream = MaskedStream(SecretValues([SECRET]))
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
