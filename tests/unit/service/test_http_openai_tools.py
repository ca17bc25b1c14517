from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from pbd.http.openai.errors import ApiError
from pbd.http.openai.tools import parse_tools

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "time"}},
]


def test_no_tools_or_none_without_tools_is_nothing() -> None:
    assert parse_tools({}) is None
    assert parse_tools({"tools": [], "tool_choice": "none"}) is None


def test_choices() -> None:
    auto = parse_tools({"tools": TOOLS})
    assert auto is not None and (auto.choice, auto.forced) == ("auto", False)
    named = parse_tools(
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "weather"}}}
    )
    assert named is not None and (named.choice, named.function, named.forced) == (
        "function",
        "weather",
        True,
    )
    assert named.schema() == WEATHER


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tools": {"a": 1}}, "tools"),
        ({"tools": [{"type": "code"}]}, "tools[0]"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function"),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "x"}}},
         "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function"}}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)  # fmt: skip
def test_refused(body: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        parse_tools(body)
    assert (info.value.status, info.value.param) == (400, param)


def test_required_asks_for_a_list_of_calls_and_reads_it() -> None:
    tools = parse_tools({"tools": TOOLS, "tool_choice": "required"})
    assert tools is not None
    schema = tools.schema()
    calls = [
        {"name": "weather", "parameters": {"city": "Oslo"}},
        {"name": "time", "parameters": {}},
    ]
    jsonschema.validate(calls, schema)
    for wrong in ([], [{"name": "weather", "parameters": {}}], [{"name": "x", "parameters": {}}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)
    read = tools.read_forced(json.dumps(calls))
    assert read is not None
    assert [(c.name, json.loads(c.arguments)) for c in read] == [
        ("weather", {"city": "Oslo"}),
        ("time", {}),
    ]
    for text in ("[]", "{}", "nope", '[{"name": "other"}]'):
        assert tools.read_forced(text) is None


def test_a_named_function_reads_its_arguments() -> None:
    tools = parse_tools(
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "time"}}}
    )
    assert tools is not None
    assert tools.schema() == {"type": "object"}  # a function without parameters
    read = tools.read_forced('{"zone": "UTC"}')
    assert read is not None and (read[0].name, read[0].arguments) == ("time", '{"zone": "UTC"}')
    assert tools.read_forced("[1]") is None
