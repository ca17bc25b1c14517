"""Chat messages -> the one prompt a text model takes, through the template its config sets.

A template is a handful of config parameters, each a string with the placeholders ``{role}``
and ``{content}`` (``{{`` and ``}}`` are literal braces; any other placeholder is an error):

- ``chat_template.begin``: written once, first (default empty);
- ``chat_template.message``: each message (default ChatML's ``<|im_start|>{role}\\n{content}
  <|im_end|>\\n``), or ``chat_template.<role>`` for the messages of that role;
- ``chat_template.generation``: written last, where the model's answer starts (default
  ChatML's ``<|im_start|>assistant\\n``).

Rendering is substitution only: a template is data, never code, and what a message contains
is copied, never interpreted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PREFIX = "chat_template."
PLACEHOLDERS = ("role", "content")
DEFAULT_MESSAGE = "<|im_start|>{role}\n{content}<|im_end|>\n"
DEFAULT_GENERATION = "<|im_start|>assistant\n"


class TemplateError(ValueError):
    """A template that cannot be rendered; the message names the parameter."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str


@dataclass(frozen=True)
class ChatTemplate:
    begin: str = ""
    message: str = DEFAULT_MESSAGE
    roles: Mapping[str, str] | None = None  # role -> its own template
    generation: str = DEFAULT_GENERATION

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, str]) -> ChatTemplate:
        """The template a model's config parameters set (ChatML for what they leave out);
        every part is checked here, so a bad template fails before any request runs."""
        parts = {k[len(PREFIX) :]: v for k, v in parameters.items() if k.startswith(PREFIX)}
        for name, text in parts.items():
            fill(text, {"role": "", "content": ""}, PREFIX + name)
        reserved = ("begin", "message", "generation")
        return cls(
            begin=parts.get("begin", ""),
            message=parts.get("message", DEFAULT_MESSAGE),
            roles={k: v for k, v in parts.items() if k not in reserved},
            generation=parts.get("generation", DEFAULT_GENERATION),
        )

    def render(self, messages: Sequence[Message]) -> str:
        out = [self.begin]
        for message in messages:
            own = (self.roles or {}).get(message.role)
            template, where = (
                (own, PREFIX + message.role)
                if own is not None
                else (self.message, PREFIX + "message")
            )
            out.append(fill(template, {"role": message.role, "content": message.content}, where))
        out.append(self.generation)
        return "".join(out)


def fill(template: str, values: Mapping[str, str], where: str) -> str:
    """``template`` with each ``{name}`` replaced by ``values[name]``; ``{{``/``}}`` are
    braces. Raises TemplateError (naming ``where``) for anything else in braces."""
    out: list[str] = []
    i, n = 0, len(template)
    while i < n:
        char = template[i]
        if char in "{}" and template.startswith(char * 2, i):
            out.append(char)
            i += 2
        elif char == "{":
            end = template.find("}", i)
            name = template[i + 1 : end] if end >= 0 else ""
            if end < 0 or name not in values:
                shown = template[i : end + 1] if end >= 0 else template[i:]
                raise TemplateError(
                    f"{where}: unknown placeholder {shown!r} (the placeholders are "
                    f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}; write {{{{ and }}}} for "
                    "braces)"
                )
            out.append(values[name])
            i = end + 1
        elif char == "}":
            raise TemplateError(f"{where}: a lone '}}' at offset {i} (write }}}} for a brace)")
        else:
            end = min(
                (j for j in (template.find("{", i), template.find("}", i)) if j >= 0), default=n
            )
            out.append(template[i:end])
            i = end
    return "".join(out)
