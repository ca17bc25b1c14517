"""Stop sequences applied to a streamed text, for a model that cannot apply them itself.

The text ends before the first occurrence of any stop sequence (which is not part of it), as
OpenAI's ``stop`` does. A piece that ends with the beginning of a stop sequence is held back
until the next piece shows whether the sequence follows.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopScanner:
    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The text that may go out now; after a stop sequence, nothing more."""
        if self.stopped:
            return ""
        if not self.stops:
            return piece
        text = self._held + piece
        found = [i for i in (text.find(stop) for stop in self.stops) if i >= 0]
        if found:
            self.stopped = True
            self._held = ""
            return text[: min(found)]
        keep = partial_end(text, self.stops)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def finish(self) -> str:
        """What was held back, once the text is complete."""
        held, self._held = self._held, ""
        return "" if self.stopped else held


def partial_end(text: str, sequences: Sequence[str]) -> int:
    """The length of the longest end of ``text`` that begins (without being) one of
    ``sequences``: what a stream must hold back until the next piece shows what follows."""
    longest = 0
    for sequence in sequences:
        for size in range(min(len(sequence) - 1, len(text)), longest, -1):
            if text.endswith(sequence[:size]):
                longest = size
                break
    return longest
