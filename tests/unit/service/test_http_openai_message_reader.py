from __future__ import annotations

import json

import pytest

from pbd.http.openai.errors import ApiError
from pbd.http.openai.message_reader import MessageReader
from pbd.http.openai.structured import Guide
from pbd.http.openai.tool_parsers import PARSERS
from pbd.http.openai.tools import parse_tools

TOOLS = [{"type": "function", "function": {"name": "f"}}]


def test_plain_text_is_content() -> None:
    reader = MessageReader("m")
    assert reader.feed("a") + reader.feed("b") == "ab"
    assert reader.finish().calls == ()


def test_a_parser_reads_calls() -> None:
    reader = MessageReader("m", parser=PARSERS["mistral"])
    assert reader.feed('Hi [TOOL_CALLS] [{"name": "f"}]') == "Hi "
    assert [c.name for c in reader.finish().calls] == ["f"]


def test_a_forced_choice_is_never_content_and_must_be_calls() -> None:
    forced = parse_tools({"tools": TOOLS, "tool_choice": "required"})
    reader = MessageReader("m", forced=forced)
    assert reader.feed(json.dumps([{"name": "f", "parameters": {"a": 1}}])) == ""
    (call,) = reader.finish().calls
    assert (call.name, call.arguments) == ("f", '{"a": 1}')
    wrong = MessageReader("m", forced=forced)
    wrong.feed("no")
    with pytest.raises(ApiError, match="model 'm' answered a request for tool calls") as info:
        wrong.finish()
    assert info.value.status == 500 and info.value.type == "server_error"


def test_a_guide_streams_the_text_and_checks_it_at_the_end() -> None:
    reader = MessageReader("m", guide=Guide(None))
    assert reader.feed("[1") == "[1"
    reader.feed("]")
    with pytest.raises(ApiError, match="request for a JSON object .*not a JSON object"):
        reader.finish()
