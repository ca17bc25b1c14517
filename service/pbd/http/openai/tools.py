"""A chat request's ``tools`` and ``tool_choice``, checked, and what each choice asks of the
model, as vLLM serves them:

- ``auto`` (the default with tools): the model writes calls in its own format, read by the
  parser its config names (:mod:`pbd.http.openai.tool_parsers`);
- ``none``: the text is the answer, nothing is read from it;
- ``required``: the model is guided (structured output) to write a JSON array of
  ``{"name", "parameters"}``, one per call, at least one;
- a named function ``{"type": "function", "function": {"name": ...}}``: the model is guided to
  write that function's arguments, a JSON object of its ``parameters`` schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pbd.http.openai.errors import invalid
from pbd.http.openai.tool_parsers import ToolCall, tool_call

CHOICES = ("none", "auto", "required")
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class Tools:
    tools: tuple[dict[str, Any], ...]  # as the client sent them (the chat template reads them)
    choice: str  # none, auto, required, or function (then ``function`` names it)
    function: str | None = None

    @property
    def forced(self) -> bool:
        return self.choice in ("required", "function")

    def parameters(self, name: str) -> dict[str, Any]:
        for tool in self.tools:
            if tool["function"]["name"] == name:
                return dict(tool["function"].get("parameters") or _ANY_OBJECT)
        return dict(_ANY_OBJECT)

    def schema(self) -> dict[str, Any]:
        """The JSON schema the model is guided to write (a forced choice)."""
        if self.function is not None:
            return self.parameters(self.function)
        calls = [
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": [name]},
                    "parameters": self.parameters(name),
                },
                "required": ["name", "parameters"],
            }
            for name in (t["function"]["name"] for t in self.tools)
        ]
        return {"type": "array", "minItems": 1, "items": {"anyOf": calls}}

    def read_forced(self, text: str) -> tuple[ToolCall, ...] | None:
        """The calls a forced choice's text holds; None when it is not what was asked."""
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if self.function is not None:
            return (tool_call(self.function, doc),) if isinstance(doc, dict) else None
        names = {t["function"]["name"] for t in self.tools}
        if not isinstance(doc, list) or not doc:
            return None
        calls = []
        for item in doc:
            if not isinstance(item, dict) or item.get("name") not in names:
                return None
            calls.append(tool_call(item["name"], item.get("parameters", {})))
        return tuple(calls)


def parse_tools(body: Mapping[str, Any]) -> Tools | None:
    """The request's tools; None when it gives none (or ``tool_choice`` none without tools)."""
    for old in ("functions", "function_call"):
        if body.get(old) is not None:
            raise invalid(f"'{old}' is deprecated and not supported: use 'tools'", old)
    given = body.get("tools")
    choice = body.get("tool_choice")
    if given is None or given == []:
        if choice is None or choice == "none":
            return None
        raise invalid("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    if not isinstance(given, list):
        raise invalid("'tools' must be an array of tools", "tools")
    tools = tuple(_tool(t, i) for i, t in enumerate(given))
    if choice is None:
        return Tools(tools, "auto")
    if isinstance(choice, str):
        if choice not in CHOICES:
            raise invalid(
                f"'tool_choice' must be one of {', '.join(CHOICES)} or a named function",
                "tool_choice",
            )
        return Tools(tools, choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or choice.get("type") != "function":
        raise invalid(
            '\'tool_choice\' must be a string or {"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    if name not in {t["function"]["name"] for t in tools}:
        raise invalid(
            f"'tool_choice' names function '{name}', which is not in 'tools'", "tool_choice"
        )
    return Tools(tools, "function", name)


def _tool(item: Any, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(item, dict) or item.get("type") != "function":
        raise invalid(f"{where} must be an object with type 'function'", where)
    function = item.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise invalid(f"{where}.function must be an object with a 'name'", f"{where}.function")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid(
            f"{where}.function.parameters must be a JSON schema object",
            f"{where}.function.parameters",
        )
    return dict(item)
