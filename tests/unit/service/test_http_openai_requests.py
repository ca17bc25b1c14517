"""The bodies of /v1/completions and /v1/chat/completions: what is taken, and each refusal
naming its parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pbd.http.openai.chat_template import Message
from pbd.http.openai.errors import ApiError
from pbd.http.openai.requests import Sampling, parse_chat, parse_completion

USER = [{"role": "user", "content": "hi"}]


def _refused(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    assert info.value.status == 400 and info.value.type == "invalid_request_error"
    return info.value


def test_a_completion_with_every_option() -> None:
    request = parse_completion(
        {
            "model": "m", "prompt": ["a", "b"], "n": 2, "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": 5, "temperature": 0.5,
            "top_p": 1, "seed": 7, "stop": "x", "frequency_penalty": -1,
            "presence_penalty": 2, "echo": True, "user": "ignored", "unknown": 1,
        }
    )  # fmt: skip
    assert request.prompts == ("a", "b") and request.echo
    options = request.options
    assert (options.model, options.n, options.stream, options.include_usage) == ("m", 2, True, True)
    assert options.sampling == Sampling(5, 0.5, 1.0, 7, ("x",), -1.0, 2.0)
    assert options.sampling.as_dict() == {
        "max_tokens": 5, "temperature": 0.5, "top_p": 1.0, "seed": 7, "stop": ["x"],
        "frequency_penalty": -1.0, "presence_penalty": 2.0,
    }  # fmt: skip


def test_defaults() -> None:
    options = parse_completion({"model": "m", "prompt": "p"}).options
    assert (options.n, options.stream, options.include_usage) == (1, False, False)
    assert options.sampling.as_dict() == {}


def test_chat_messages_and_max_completion_tokens_over_max_tokens() -> None:
    request = parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
                {"role": "assistant", "content": None, "tool_calls": []},
            ],
            "max_tokens": 9,
            "max_completion_tokens": 3,
        }
    )
    assert request.messages == (
        Message("system", "s"),
        Message("user", "ab"),
        Message("assistant", ""),
    )
    assert request.options.sampling.max_tokens == 3
    assert (
        parse_chat({"model": "m", "messages": USER, "max_tokens": 9}).options.sampling.max_tokens
        == 9
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "p"}, "model"),
        ({"model": "", "prompt": "p"}, "model"),
        ({"model": "m"}, "prompt"),
        ({"model": "m", "prompt": []}, "prompt"),
        ({"model": "m", "prompt": [1, 2]}, "prompt"),  # token ids: no tokenizer here
        ({"model": "m", "prompt": "p", "n": 0}, "n"),
        ({"model": "m", "prompt": "p", "n": 129}, "n"),
        ({"model": "m", "prompt": "p", "temperature": 2.5}, "temperature"),
        ({"model": "m", "prompt": "p", "top_p": -0.1}, "top_p"),
        ({"model": "m", "prompt": "p", "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "prompt": "p", "max_tokens": 1.5}, "max_tokens"),
        ({"model": "m", "prompt": "p", "seed": "1"}, "seed"),
        ({"model": "m", "prompt": "p", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "m", "prompt": "p", "stop": [""]}, "stop"),
        ({"model": "m", "prompt": "p", "stream": "yes"}, "stream"),
        (
            {"model": "m", "prompt": "p", "stream_options": {"include_usage": True}},
            "stream_options",
        ),
        ({"model": "m", "prompt": "p", "echo": 1}, "echo"),
        ({"model": "m", "prompt": "p", "logprobs": 21}, "logprobs"),
        ({"model": "m", "prompt": "p", "logprobs": True}, "logprobs"),
        ({"model": "m", "prompt": "p", "suffix": "s"}, "suffix"),
        ({"model": "m", "prompt": "p", "n": 2, "best_of": 1}, "best_of"),
        ({"model": "m", "prompt": "p", "best_of": 0}, "best_of"),
        ({"model": "m", "prompt": "p", "top_k": -2}, "top_k"),
        ({"model": "m", "prompt": "p", "top_k": 1.5}, "top_k"),
        ({"model": "m", "prompt": "p", "min_p": 1.5}, "min_p"),
        ({"model": "m", "prompt": "p", "repetition_penalty": 0}, "repetition_penalty"),
        ({"model": "m", "prompt": "p", "min_tokens": -1}, "min_tokens"),
        ({"model": "m", "prompt": "p", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
        ({"model": "m", "prompt": "p", "ignore_eos": "yes"}, "ignore_eos"),
        ({"model": "m", "prompt": "p", "stop_token_ids": [1, "2"]}, "stop_token_ids"),
        ({"model": "m", "prompt": "p", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens"),
        ({"model": "m", "prompt": "p", "length_penalty": "1"}, "length_penalty"),
    ],
)
def test_a_completion_is_refused(body: dict[str, Any], param: str) -> None:
    assert _refused(lambda: parse_completion(body)).param == param


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"response_format": {"type": "json"}}, "response_format"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"logprobs": 1}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
    ],
)
def test_a_chat_is_refused(extra: dict[str, Any], param: str) -> None:
    body = {"model": "m", "messages": USER, **extra}
    assert _refused(lambda: parse_chat(body)).param == param


def test_vllms_sampling_fields_are_passed_on() -> None:
    fields = {
        "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.2, "length_penalty": 0.5,
        "min_tokens": 2, "ignore_eos": True, "skip_special_tokens": False,
        "spaces_between_special_tokens": True, "include_stop_str_in_output": True,
        "stop_token_ids": [7, 8], "truncate_prompt_tokens": 9, "use_beam_search": False,
        "best_of": 3,
    }  # fmt: skip
    request = parse_chat({"model": "m", "messages": USER, "n": 2, "max_tokens": 4, **fields})
    assert request.options.sampling.as_dict() == {"max_tokens": 4, **fields}
    off = parse_completion({"model": "m", "prompt": "p", "top_k": -1, "best_of": None})
    assert off.options.sampling.as_dict() == {"top_k": -1}


def test_off_values_of_unsupported_features_are_taken() -> None:
    body = {"model": "m", "messages": USER, "tools": [], "tool_choice": "none", "logprobs": False,
            "response_format": {"type": "text"}}  # fmt: skip
    assert parse_chat(body).messages == (Message("user", "hi"),)


def test_logprobs_are_asked_of_the_model_as_vllm_takes_them() -> None:
    chat = parse_chat({"model": "m", "messages": USER, "logprobs": True, "top_logprobs": 3})
    assert chat.options.logprobs == 3 and chat.options.sampling.as_dict() == {"logprobs": 3}
    alone = parse_chat({"model": "m", "messages": USER, "logprobs": True})
    assert alone.options.logprobs == 0 and alone.options.sampling.as_dict() == {"logprobs": 0}
    assert parse_chat({"model": "m", "messages": USER}).options.logprobs is None
    completion = parse_completion({"model": "m", "prompt": "p", "logprobs": 2})
    assert completion.options.sampling.as_dict() == {"logprobs": 2}
