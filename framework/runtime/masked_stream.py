"""A run's events with every known secret masked, a secret streamed over several chunks included.

A model streams its text a token or a few at a time, and a secret it repeats arrives split
anywhere: ``sk-superse`` in one chunk, ``cret-123456`` in the next. Masking each chunk alone masks
neither half. :class:`MaskedStream` keeps the end of each stream's text that could be the start of
a secret (:meth:`~framework.runtime.governance.secrets.SecretValues.held_back`, on the text as it
came: a whole secret may begin a longer one) until the next chunk of that stream says whether it
is one, and masks the text joined; what it sends never ends inside a secret the text holds whole
(:meth:`~framework.runtime.governance.secrets.SecretValues.unsplit`). So the text a client joins is
the text masked whole. Text and thoughts are separate streams, and so are the streams of each
agent (an event's ``source``). What is held is sent, masked, before the next other event of the
same source or of one it is nested in (a tool call, a step's update: its text does not go on
across them) and before the run's end. Every other event is masked whole, as before.

Known gap: two parallel steps that run the same agent share its ``source``, so their chunks join
as one stream (``ca run --json`` shows nested text; the terminal, A2A and ACP show the root's).
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
        held = self._held.pop(stream, None)
        text = event.text if held is None else held.text + event.text  # as it came: held text is not masked
        cut = self.secrets.unsplit(text, len(text) - self.secrets.held_back(text))
        if cut < len(text):
            self._held[stream] = dataclasses.replace(event, text=text[cut:])
        return [dataclasses.replace(event, text=self.secrets.text(text[:cut]))] if cut else []

    def end(self) -> list[RunEvent]:
        """What is still held, when the run's events end."""
        return list(self._release(None))

    def _release(self, source: tuple[str, ...] | None) -> list[_Chunk]:
        """The held text, masked, of the streams of ``source`` and those nested in it (None: of every
        stream): their agent went on with something else."""
        ending = [stream for stream in self._held if source is None or stream[1][: len(source)] == source]
        return [self._masked(self._held.pop(stream)) for stream in ending]

    def _masked(self, chunk: _Chunk) -> _Chunk:
        return dataclasses.replace(chunk, text=self.secrets.text(chunk.text))
