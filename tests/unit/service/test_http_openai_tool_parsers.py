from __future__ import annotations

import json

import pytest

from pbd.http.openai.tool_parsers import PARSERS, Parsed, ToolCallStream, ToolParser

WEATHER = {"city": "Paris"}
HERMES = (
    'Looking.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
    '<tool_call>{"name": "time", "arguments": {}}</tool_call>'
)
LLAMA = '<|python_tag|>{"name": "weather", "parameters": {"city": "Paris"}}; {"name": "time"}'
MISTRAL = (
    'Sure [TOOL_CALLS] [{"name": "weather", "arguments": {"city": "Paris"}}, {"name": "time"}]'
)


def _calls(parsed: Parsed) -> list[tuple[str, object]]:
    return [(c.name, json.loads(c.arguments)) for c in parsed.calls]


@pytest.mark.parametrize(
    ("parser", "text", "content"),
    [("hermes", HERMES, "Looking.\n"), ("llama3_json", LLAMA, None), ("mistral", MISTRAL, "Sure ")],
)
def test_each_format_is_read(parser: str, text: str, content: str | None) -> None:
    parsed = PARSERS[parser].parse(text)
    assert parsed.content == content
    assert _calls(parsed) == [("weather", WEATHER), ("time", {})]
    assert len({c.id for c in parsed.calls}) == 2
    assert all(c.id.startswith("call_") for c in parsed.calls)


def test_llama3_takes_a_bare_object_and_arguments_as_text_are_kept() -> None:
    parsed = PARSERS["llama3_json"].parse('  {"name": "f", "parameters": {"x": 1}}')
    assert _calls(parsed) == [("f", {"x": 1})]
    parsed = PARSERS["hermes"].parse('<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}')
    assert parsed.calls[0].arguments == '{"x": 1}'  # unterminated last block, string arguments


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("hermes", "no calls at all"),
        ("hermes", "<tool_call>{broken</tool_call>"),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>'),  # no name
        ("llama3_json", 'The answer is {"name": "f"}'),  # content first: not a call
        ("llama3_json", '{"name": "f"} and more'),
        ("llama3_json", '{"x": 1}'),
        ("mistral", "[TOOL_CALLS] not json"),
        ("mistral", '[TOOL_CALLS] [{"name": "f"}, 3]'),
    ],
)
def test_text_that_is_not_calls_is_content(parser: str, text: str) -> None:
    assert PARSERS[parser].parse(text) == Parsed(text, ())


def _streamed(parser: ToolParser, text: str, size: int) -> tuple[str, Parsed]:
    stream = ToolCallStream(parser)
    out = [stream.feed(text[i : i + size]) for i in range(0, len(text), size)]
    end = stream.finish()
    return "".join(out) + (end.content or ""), end


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        ("hermes", HERMES),
        ("llama3_json", LLAMA),
        ("mistral", MISTRAL),
        ("hermes", "plain <tool_ text <tool_call"),
        ("hermes", "<tool_call>{bad"),
        ("llama3_json", "  <|python_t"),
        ("llama3_json", "just words { and braces }"),
        ("mistral", "[TOOL_CALLS"),
    ],
)
def test_a_stream_in_any_pieces_says_what_the_whole_text_says(parser: str, text: str) -> None:
    whole = PARSERS[parser].parse(text)
    for size in range(1, len(text) + 1):
        content, end = _streamed(PARSERS[parser], text, size)
        assert content == (whole.content or "")
        assert _calls(end) == _calls(whole)


def test_content_goes_out_before_the_calls_are_complete() -> None:
    stream = ToolCallStream(PARSERS["hermes"])
    assert stream.feed("Hello <tool") == "Hello "  # the marker's beginning is held
    assert stream.feed("box> ok") == "<toolbox> ok"
    assert stream.feed(' <tool_call>{"name": "f"') == " "
    assert stream.feed("}</tool_call>") == ""
    assert _calls(stream.finish()) == [("f", {})]
    llama = ToolCallStream(PARSERS["llama3_json"])
    assert llama.feed("Hi {") == "Hi {"  # content first: the format has no call after it
    assert llama.feed('"name": "f"}') == '"name": "f"}'
