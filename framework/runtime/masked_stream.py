"""A run's events with every known secret masked, a secret streamed over several chunks included.

A model streams its text a token or a few at a time, and a secret it repeats arrives split
anywhere: ``sk-superse`` in one chunk, ``cret-123456`` in the next. Masking each chunk alone masks
neither half. :class:`MaskedStream` keeps the end of each stream's text that could be the start of
a secret (:meth:`~framework.runtime.governance.secrets.SecretValues.held_back`) until the next
chunk of that stream says whether it is one, and masks the text joined. Text and thoughts are
separate streams, and so are the streams of each agent or step (an event's ``source``: steps run
in parallel interleave their chunks). What is held is sent, as it is, before the next other event
of the same source (a tool call: its text does not go on across it) and before the run's end.
Every other event is masked whole, as before.
"""

from __future__ import annotations

import dataclasses

from framework.runtime.events import RunEvent, RunFinished, TextChunk, ThoughtChunk
from framework.runtime.governance.secrets import KNOWN, SecretValues

_Chunk = TextChunk | ThoughtChunk


class MaskedStream:
    """The events of one run, masked (see the module docstring): :meth:`feed` each event as it
    comes, send what it returns, in order."""

    def __init__(self, secrets: SecretValues = KNOWN) -> None:
        self.secrets = secrets
        self._held: dict[tuple[type, tuple[str, ...]], _Chunk] = {}
        """The held end of each stream's text, as a chunk of that stream."""

    def feed(self, event: RunEvent) -> list[RunEvent]:
        """What to send for ``event``: none, one or several events, every secret masked."""
        if not isinstance(event, TextChunk | ThoughtChunk):
            source = getattr(event, "source", None)
            ends = isinstance(event, RunFinished)
            return [*(self._release(source) if ends or source is not None else []), self.secrets.value(event)]
        stream = (type(event), event.source)
        sent: list[RunEvent] = []
        held = self._held.pop(stream, None)
        text = self.secrets.text(event.text if held is None else held.text + event.text)
        if keep := self.secrets.held_back(text):
            self._held[stream] = dataclasses.replace(event, text=text[-keep:])
            text = text[:-keep]
        if text:
            sent.append(dataclasses.replace(event, text=text))
        return sent

    def end(self) -> list[RunEvent]:
        """What is still held, when the run's events end."""
        return list(self._release(None))

    def _release(self, source: tuple[str, ...] | None) -> list[_Chunk]:
        """The held text of the streams of ``source`` (None: of every stream), which began no secret:
        their agent or step went on with something else."""
        ending = [stream for stream in self._held if source is None or stream[1] == source]
        return [self._held.pop(stream) for stream in ending]
