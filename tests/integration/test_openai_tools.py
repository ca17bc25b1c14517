"""Tool calling and structured output through the OpenAI API (/v1) of the real daemon, with
OpenAI's own client: echo_llm answers with the text the test puts in the user message, so each
parser's format is driven as a model would write it, streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from pbd_harness import EXAMPLE_MODELS, TEST_MODELS, Daemon, make_repository, running_daemon

PARSER_LINE = 'parameters { key: "tool_call_parser" value: { string_value: "hermes" } }'
# name -> tool_call_parser (None: the parameter is left out)
ECHO_MODELS = {
    "echo_hermes": "hermes",
    "echo_llama3": "llama3_json",
    "echo_mistral": "mistral",
    "echo_plain": None,
    "echo_odd": "pythonic_maybe",
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]
TEMPLATE = (
    "{% for m in messages %}{{ m.content }}{% endfor %}"
    "{% if tools %}[{{ tools | map(attribute='function.name') | join(',') }}]{% endif %}"
)


def _repository(root: Path) -> Path:
    repository = make_repository(
        root,
        {
            **dict.fromkeys(ECHO_MODELS, TEST_MODELS / "echo_llm"),
            "echo_template": TEST_MODELS / "echo_llm",
            "tiny_llm": EXAMPLE_MODELS / "tiny_llm",
        },
    )
    for name, parser in [*ECHO_MODELS.items(), ("echo_template", "hermes")]:
        path = repository / name / "config.pbtxt"
        config = path.read_text().replace('name: "echo_llm"', f'name: "{name}"')
        line = "" if parser is None else PARSER_LINE.replace("hermes", parser)
        path.write_text(config.replace(PARSER_LINE, line))
    (repository / "echo_template" / "chat_template.jinja").write_text(TEMPLATE)
    return repository


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("openai_tools")
    models = [*ECHO_MODELS, "echo_template", "tiny_llm"]
    with running_daemon(_repository(workdir), workdir, settle=models) as running:
        yield running


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"http://{daemon.http_url}/v1", api_key="unused", max_retries=0, timeout=60
    ) as opened:
        yield opened


def _say(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def _chat(client: openai.OpenAI, model: str, text: str, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=model, messages=_say(text), tools=TOOLS, **kwargs)


def _streamed(client: openai.OpenAI, model: str, text: str, **kwargs: Any) -> dict[str, Any]:
    """The streamed answer put together: content, calls (by index), finish reasons."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finishes = []
    for chunk in _chat(client, model, text, stream=True, **kwargs):
        (choice,) = chunk.choices
        finishes.append(choice.finish_reason)
        content.append(choice.delta.content or "")
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"arguments": ""})
            if delta.id is not None:
                assert "id" not in call  # the id, type and name come in the call's first delta
                call.update(id=delta.id, type=delta.type, name=delta.function.name)
            call["arguments"] += delta.function.arguments or ""
    return {"content": "".join(content), "calls": calls, "finishes": finishes}


WEATHER = {"city": "Paris", "unit": "C"}
CASES = {
    "echo_hermes": (
        "Let me look.\n"
        f'<tool_call>{{"name": "get_weather", "arguments": {json.dumps(WEATHER)}}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>',
        "Let me look.\n",
    ),
    "echo_llama3": (
        f'<|python_tag|>{{"name": "get_weather", "parameters": {json.dumps(WEATHER)}}}; '
        '{"name": "get_time", "parameters": {}}',
        None,
    ),
    "echo_mistral": (
        f'Sure.[TOOL_CALLS][{{"name": "get_weather", "arguments": {json.dumps(WEATHER)}}}, '
        '{"name": "get_time", "arguments": {}}]',
        "Sure.",
    ),
}


@pytest.mark.parametrize("model", list(CASES))
def test_each_parser_reads_the_calls_of_its_format(client: openai.OpenAI, model: str) -> None:
    text, content = CASES[model]
    answer = _chat(client, model, text)
    (choice,) = answer.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == content
    calls = choice.message.tool_calls
    assert [(c.type, c.function.name) for c in calls] == [
        ("function", "get_weather"),
        ("function", "get_time"),
    ]
    assert json.loads(calls[0].function.arguments) == WEATHER
    assert json.loads(calls[1].function.arguments) == {}
    assert all(c.id.startswith("call_") for c in calls) and calls[0].id != calls[1].id


@pytest.mark.parametrize("model", list(CASES))
def test_each_parser_streams_content_then_calls(client: openai.OpenAI, model: str) -> None:
    text, content = CASES[model]
    streamed = _streamed(client, model, text)
    assert streamed["content"] == (content or "")
    calls = streamed["calls"]
    assert sorted(calls) == [0, 1]
    assert [calls[i]["name"] for i in (0, 1)] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["arguments"]) == WEATHER
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls.values())
    assert streamed["finishes"][-1] == "tool_calls" and set(streamed["finishes"][:-1]) == {None}


def test_text_without_calls_is_content(client: openai.OpenAI) -> None:
    for model in CASES:
        answer = _chat(client, model, "Nothing to call {here}.")
        assert answer.choices[0].message.content == "Nothing to call {here}."
        assert answer.choices[0].message.tool_calls is None
        assert answer.choices[0].finish_reason == "stop"
    broken = "<tool_call>{not json</tool_call>"
    assert _chat(client, "echo_hermes", broken).choices[0].message.content == broken
    assert _streamed(client, "echo_hermes", broken)["content"] == broken


def test_tool_choice_none_reads_nothing(client: openai.OpenAI) -> None:
    text = CASES["echo_hermes"][0]
    answer = _chat(client, "echo_hermes", text, tool_choice="none")
    assert answer.choices[0].message.content == text
    assert answer.choices[0].message.tool_calls is None
    # and a model without a parser serves it
    assert _chat(client, "echo_plain", "hi", tool_choice="none").choices[0].message.content == "hi"


def test_a_named_function_guides_the_model_to_its_arguments(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    # The model is asked for the function's parameters (vLLM's guided_decoding).
    asked = _chat(client, "echo_plain", "!params", tool_choice=named)
    (call,) = asked.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {
        "guided_decoding": {"json": TOOLS[0]["function"]["parameters"]}
    }
    answer = _chat(client, "echo_plain", json.dumps(WEATHER), tool_choice=named)
    (call,) = answer.choices[0].message.tool_calls
    assert answer.choices[0].finish_reason == "tool_calls"
    assert answer.choices[0].message.content is None
    assert json.loads(call.function.arguments) == WEATHER
    streamed = _streamed(client, "echo_plain", json.dumps(WEATHER), tool_choice=named)
    assert streamed["content"] == "" and streamed["calls"][0]["name"] == "get_weather"
    assert json.loads(streamed["calls"][0]["arguments"]) == WEATHER


def test_required_guides_the_model_to_a_list_of_calls(client: openai.OpenAI) -> None:
    # The model is asked for an array of calls (what it got is not one: a 500 quoting it).
    with pytest.raises(openai.InternalServerError, match="tool_choice 'required'") as info:
        _chat(client, "echo_plain", "!params", tool_choice="required")
    assert '{"guided_decoding": {"json": {"type": "array", "minItems": 1' in info.value.message
    text = json.dumps([{"name": "get_time", "parameters": {}}])
    answer = _chat(client, "echo_plain", text, tool_choice="required")
    (call,) = answer.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_time", "{}")
    with pytest.raises(openai.InternalServerError, match="tool_choice 'required'"):
        _chat(client, "echo_plain", "no calls here", tool_choice="required")


def test_tools_are_refused_where_they_cannot_be_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="set the config.pbtxt parameter "
                       "'tool_call_parser'") as info:  # fmt: skip
        _chat(client, "echo_plain", "hi")
    assert info.value.param == "tools"
    with pytest.raises(openai.BadRequestError, match="'pythonic_maybe', which is not one of"):
        _chat(client, "echo_odd", "hi")
    with pytest.raises(openai.BadRequestError, match="sampling_parameters") as info:
        _chat(client, "tiny_llm", "hi", tool_choice="required")  # no way to guide it
    assert info.value.param == "tool_choice"
    with pytest.raises(openai.BadRequestError, match="not in 'tools'"):
        _chat(client, "echo_hermes", "hi", tool_choice={"type": "function",
                                                        "function": {"name": "nope"}})  # fmt: skip


def test_the_tools_reach_the_models_template(client: openai.OpenAI) -> None:
    answer = _chat(client, "echo_template", "hi", tool_choice="none")
    assert answer.choices[0].message.content == "hi[get_weather,get_time]"


def test_assistant_tool_calls_and_tool_results_go_back_to_the_model(
    client: openai.OpenAI,
) -> None:
    first = _chat(client, "echo_hermes", CASES["echo_hermes"][0])
    call = first.choices[0].message.tool_calls[0]
    messages: list[Any] = [
        *_say("weather?"),
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    answer = client.chat.completions.create(model="echo_hermes", messages=messages, tools=TOOLS)
    assert answer.choices[0].message.content == "weather?"  # its template keeps user turns


# -- response_format -----------------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def _format(schema: dict[str, Any] = SCHEMA, strict: bool = True) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema,
                                                   "strict": strict}}  # fmt: skip


def _ask(client: openai.OpenAI, text: str, response_format: Any, **kwargs: Any) -> Any:
    return client.chat.completions.create(
        model="echo_plain", messages=_say(text), response_format=response_format, **kwargs
    )


def test_response_format_is_passed_as_guided_decoding(client: openai.OpenAI) -> None:
    asked = _ask(client, "!params", {"type": "json_object"})
    assert json.loads(asked.choices[0].message.content) == {
        "guided_decoding": {"json_object": True}
    }
    asked = _ask(client, "!params", _format(strict=False))
    assert json.loads(asked.choices[0].message.content) == {"guided_decoding": {"json": SCHEMA}}


def test_a_conforming_answer_is_passed(client: openai.OpenAI) -> None:
    person = json.dumps({"name": "Ada", "age": 36})
    assert _ask(client, person, _format()).choices[0].message.content == person
    assert _ask(client, '{"a": [1]}', {"type": "json_object"}).choices[0].message.content == (
        '{"a": [1]}'
    )
    stream = _ask(client, person, _format(), stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream) == person


def test_an_answer_that_does_not_conform_is_an_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError, match="not a JSON object"):
        _ask(client, "[1, 2]", {"type": "json_object"})
    with pytest.raises(openai.InternalServerError, match="not JSON"):
        _ask(client, "plain words", {"type": "json_object"})
    with pytest.raises(openai.InternalServerError, match="at age: 'old' is not of type"):
        _ask(client, '{"name": "Ada", "age": "old"}', _format())
    with pytest.raises(openai.APIError, match="does not match the schema"):
        list(_ask(client, '{"name": "Ada"}', _format(), stream=True))
    # not strict: JSON is enough
    loose = _ask(client, '{"name": "Ada"}', _format(strict=False))
    assert loose.choices[0].message.content == '{"name": "Ada"}'


def test_response_format_is_refused_where_it_cannot_be_served(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="structured output") as info:
        client.chat.completions.create(
            model="tiny_llm", messages=_say("hi"), response_format={"type": "json_object"}
        )
    assert info.value.param == "response_format"
    with pytest.raises(openai.BadRequestError, match="not a valid JSON schema"):
        _ask(client, "{}", _format({"type": "nonsense"}))
