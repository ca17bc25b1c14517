"""How the text of one chat choice becomes its message: as written, with the tool calls its
model's parser reads (``tool_choice`` auto), as the calls a forced ``tool_choice`` guided it
to write, or checked against its ``response_format``. Streamed or not, the text is fed in
pieces and the message finished at the end, so both answers say the same.
"""

from __future__ import annotations

from pbd.http.openai.structured import Guide, not_conforming
from pbd.http.openai.tool_parsers import Parsed, ToolCallStream, ToolParser
from pbd.http.openai.tools import Tools


class MessageReader:
    def __init__(
        self,
        model: str,
        *,
        parser: ToolParser | None = None,
        forced: Tools | None = None,
        guide: Guide | None = None,
    ) -> None:
        self.model = model
        self._calls = ToolCallStream(parser) if parser is not None else None
        self._forced = forced
        self._guide = guide
        self._text: list[str] = []  # all of it, when it is checked at the end

    def feed(self, piece: str) -> str:
        """The content that may go out now (a forced choice's text is never content)."""
        if self._forced is not None or self._guide is not None:
            self._text.append(piece)
        if self._forced is not None:
            return ""
        return self._calls.feed(piece) if self._calls is not None else piece

    def finish(self) -> Parsed:
        """The content not sent yet and the calls; ApiError (500) when the text is not what
        the request asked the model for."""
        text = "".join(self._text)
        if self._forced is not None:
            calls = self._forced.read_forced(text)
            if calls is None:
                asked = (
                    f"a call of function '{self._forced.function}'"
                    if self._forced.function is not None
                    else "tool calls (tool_choice 'required')"
                )
                raise not_conforming(self.model, asked, f"{text[:200]!r} is not one")
            return Parsed(None, calls)
        if self._guide is not None:
            problem = self._guide.problem(text)
            if problem is not None:
                asked = "a JSON object" if self._guide.schema is None else "JSON of a schema"
                raise not_conforming(self.model, asked, problem)
        return self._calls.finish() if self._calls is not None else Parsed(None, ())
