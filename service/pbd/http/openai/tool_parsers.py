"""Tool calls read from a model's text, by the formats vLLM's parsers read (named as vLLM
names them, chosen per model by the config parameter ``tool_call_parser``):

- ``hermes`` (Hermes, Qwen): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call, after any content (the last block may be unterminated);
- ``llama3_json`` (Llama 3.1/3.2): the whole text is ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``, several separated by ``;``;
- ``mistral``: content, then ``[TOOL_CALLS]`` and a JSON array of ``{"name", "arguments"}``.

A text whose calls do not parse is content, as vLLM answers it. :class:`ToolCallStream` reads a
streamed text piece by piece: content goes out until a call may begin (a piece ending with the
beginning of a marker is held back), the calls are read once the text is complete.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pbd.http.openai.stops import partial_end

CONFIG_PARAMETER = "tool_call_parser"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI sends it

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


def tool_call(name: str, arguments: Any) -> ToolCall:
    """A call with a new id; ``arguments`` as the model wrote them (text is kept)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(f"call_{secrets.token_hex(12)}", name, text)


@dataclass(frozen=True)
class Parsed:
    content: str | None
    calls: tuple[ToolCall, ...]


Reader = Callable[[str], list[ToolCall] | None]


@dataclass(frozen=True)
class ToolParser:
    name: str
    markers: tuple[str, ...]  # what begins the calls
    anywhere: bool  # the calls may follow content (else only at the start, after whitespace)
    read: Reader  # the calls in the text from the marker on (marker included); None: not calls

    def find(self, text: str) -> int | None:
        """Where the calls begin in ``text``, if they do."""
        if self.anywhere:
            found = [i for i in (text.find(m) for m in self.markers) if i >= 0]
            return min(found) if found else None
        start = len(text) - len(text.lstrip())
        return start if any(text.startswith(m, start) for m in self.markers) else None

    def parse(self, text: str) -> Parsed:
        start = self.find(text)
        calls = None if start is None else self.read(text[start:])
        if start is None or not calls:
            return Parsed(text, ())
        content = text[:start]
        return Parsed(content if content.strip() else None, tuple(calls))

    def held(self, text: str) -> int:
        """How much of the end of ``text`` may be the beginning of a marker."""
        if not self.anywhere:
            rest = text.lstrip()
            return len(text) if any(m.startswith(rest) for m in self.markers) else 0
        return partial_end(text, self.markers)


class ToolCallStream:
    """One streamed choice's text: content as it may go out, the calls at the end."""

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self._held = ""
        self._calls: list[str] | None = None  # the text from the first marker on
        self._open = True  # a call may still begin

    def feed(self, piece: str) -> str:
        """The content that may go out now."""
        if self._calls is not None:
            self._calls.append(piece)
            return ""
        text = self._held + piece
        if not self._open:
            return text
        start = self.parser.find(text)
        if start is not None:
            self._calls, self._held = [text[start:]], ""
            return text[:start]
        keep = self.parser.held(text)
        if keep == 0 and not self.parser.anywhere and text.strip():
            self._open = False  # content came first: this format has no call after it
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def finish(self) -> Parsed:
        """The rest of the content (what was held, or calls that did not parse) and the calls."""
        if self._calls is None:
            held, self._held = self._held, ""
            return Parsed(held or None, ())
        text = "".join(self._calls)
        calls = self.parser.read(text)
        return Parsed(None, tuple(calls)) if calls else Parsed(text, ())


def _named(doc: Any, arguments_keys: tuple[str, ...]) -> ToolCall | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
        return None
    for key in arguments_keys:
        if key in doc:
            return tool_call(doc["name"], doc[key])
    return tool_call(doc["name"], {})


def _hermes(text: str) -> list[ToolCall] | None:
    calls = []
    for block in text.split("<tool_call>")[1:]:
        body = block.split("</tool_call>", 1)[0].strip()
        try:
            call = _named(json.loads(body), ("arguments",))
        except ValueError:
            return None
        if call is None:
            return None
        calls.append(call)
    return calls


def _llama3_json(text: str) -> list[ToolCall] | None:
    text = text.strip().removeprefix("<|python_tag|>")
    decoder = json.JSONDecoder()
    calls, at = [], 0
    while True:
        at = len(text) - len(text[at:].lstrip())
        try:
            doc, at = decoder.raw_decode(text, at)
        except ValueError:
            return None
        call = _named(doc, ("parameters", "arguments"))
        if call is None:
            return None
        calls.append(call)
        rest = text[at:].lstrip()
        if not rest:
            return calls
        if not rest.startswith(";"):
            return None
        at = len(text) - len(rest) + 1


def _mistral(text: str) -> list[ToolCall] | None:
    try:
        doc = json.loads(text.removeprefix("[TOOL_CALLS]").strip())
    except ValueError:
        return None
    docs = doc if isinstance(doc, list) else [doc]
    calls = [_named(d, ("arguments",)) for d in docs]
    return [c for c in calls if c is not None] if calls and None not in calls else None


PARSERS: dict[str, ToolParser] = {
    p.name: p
    for p in (
        ToolParser("hermes", ("<tool_call>",), True, _hermes),
        ToolParser("llama3_json", ("<|python_tag|>", "{"), False, _llama3_json),
        ToolParser("mistral", ("[TOOL_CALLS]",), True, _mistral),
    )
}
