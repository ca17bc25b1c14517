"""The bodies of ``POST /v1/completions`` and ``/v1/chat/completions``, checked, as records.

Checked as OpenAI checks them (types and ranges, each error naming its parameter); vLLM's
extra sampling fields (``top_k``, ``min_tokens``, ``repetition_penalty``, ...) are checked as
vLLM checks them and passed on; a chat's ``tools`` and ``tool_choice`` are checked by
:mod:`pbd.http.openai.tools`, its ``response_format`` by :mod:`pbd.http.openai.structured`;
keys pbd does not know are ignored, and features it cannot honour with a text model (logit
bias, a suffix, token-id prompts, non-text message parts) are refused
rather than silently dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pbd.http.openai.chat_template import Message
from pbd.http.openai.errors import ApiError, invalid
from pbd.http.openai.logprobs import MAX_TOP
from pbd.http.openai.structured import GUIDED_DECODING, Guide, parse_response_format
from pbd.http.openai.tools import Tools, parse_tools

MAX_N = 128
MAX_STOP = 4
# vLLM's sampling fields beyond OpenAI's (its protocol's extra parameters), and their JSON
# type; each is passed on as given, with ``best_of``.
VLLM_FIELDS = {
    "best_of": "int",
    "top_k": "int",
    "min_p": "number",
    "repetition_penalty": "number",
    "length_penalty": "number",
    "min_tokens": "int",
    "ignore_eos": "bool",
    "use_beam_search": "bool",
    "skip_special_tokens": "bool",
    "spaces_between_special_tokens": "bool",
    "include_stop_str_in_output": "bool",
    "stop_token_ids": "ints",
    "truncate_prompt_tokens": "int",
}
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# Set to anything but their "off" value, these ask for what pbd does not do.
_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "logit_bias": (None, {}),
    "suffix": (None, ""),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "prediction": (None,),
}


@dataclass(frozen=True)
class Sampling:
    """What is passed on to the model (None: not set; the model's default applies)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    extra: tuple[tuple[str, Any], ...] = ()  # vLLM's fields (and best_of), as given
    guide: Guide | None = None  # structured output asked of the model

    def as_dict(self) -> dict[str, Any]:
        """The values set, by OpenAI's or vLLM's name (``stop`` as a list)."""
        values: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": list(self.stop) or None,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            **dict(self.extra),
            GUIDED_DECODING: self.guide.sampling() if self.guide is not None else None,
        }
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class Options:
    """What both endpoints take besides the prompt."""

    model: str
    n: int
    stream: bool
    include_usage: bool
    sampling: Sampling
    logprobs: int | None = None  # asked for: how many alternatives per token

    def with_logprobs(self, top: int | None) -> Options:
        """Log probabilities asked of the model (``logprobs`` in sampling_parameters)."""
        if top is None:
            return self
        extra = (*self.sampling.extra, ("logprobs", top))
        sampling = dataclasses.replace(self.sampling, extra=extra)
        return dataclasses.replace(self, sampling=sampling, logprobs=top)


@dataclass(frozen=True)
class CompletionRequest:
    options: Options
    prompts: tuple[str, ...]
    echo: bool


@dataclass(frozen=True)
class ChatRequest:
    options: Options
    messages: tuple[Message, ...]
    # Each message as a model's Jinja template reads it (content as one string), and what
    # the request gives the template besides (vLLM's ``chat_template_kwargs``).
    documents: tuple[dict[str, Any], ...] = ()
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    tools: Tools | None = None
    response_format: Guide | None = None


def parse_completion(body: Mapping[str, Any]) -> CompletionRequest:
    for key in ("tools", "tool_choice", "functions", "function_call", "response_format"):
        if body.get(key) is not None:
            raise invalid(f"'{key}' is a chat parameter: use /v1/chat/completions", key)
    options = _options(body, "max_tokens")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        prompts: tuple[str, ...] = (prompt,)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = tuple(prompt)
    elif (
        isinstance(prompt, list)
        and prompt
        and all(_is_int(p) or isinstance(p, list) for p in prompt)
    ):
        raise invalid(
            "'prompt' as token ids is not supported: pbd passes text to the model (it has no "
            "tokenizer); send the prompt as a string",
            "prompt",
        )
    else:
        raise invalid("'prompt' must be a string or a non-empty array of strings", "prompt")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise invalid("'echo' must be a boolean", "echo")
    top = _integer(body, "logprobs", None)
    if top is not None and not 0 <= top <= MAX_TOP:
        raise invalid(f"'logprobs' must be an integer from 0 to {MAX_TOP}", "logprobs")
    return CompletionRequest(options.with_logprobs(top), prompts, echo)


def parse_chat(body: Mapping[str, Any]) -> ChatRequest:
    tokens = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else ("max_tokens")
    )
    options = _options(body, tokens).with_logprobs(_chat_logprobs(body))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty array of messages", "messages")
    parsed = tuple(_message(m, i) for i, m in enumerate(messages))
    documents = tuple({**m, "content": p.content} for m, p in zip(messages, parsed, strict=True))
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise invalid("'chat_template_kwargs' must be an object", "chat_template_kwargs")
    generation = body.get("add_generation_prompt", True)
    if not isinstance(generation, bool):
        raise invalid("'add_generation_prompt' must be a boolean", "add_generation_prompt")
    kwargs = {"add_generation_prompt": generation, **kwargs}
    tools = parse_tools(body)
    guide = parse_response_format(body.get("response_format"))
    if guide is not None and tools is not None and tools.forced:
        raise invalid(
            "'response_format' cannot be combined with a forced 'tool_choice'", "response_format"
        )
    return ChatRequest(options, parsed, documents, kwargs, tools, guide)


def _chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """How many alternatives per token a chat asks for (0: only the chosen one's); None:
    no log probabilities."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise invalid("'logprobs' must be a boolean", "logprobs")
    top = _integer(body, "top_logprobs", None)
    if top is not None and not 0 <= top <= MAX_TOP:
        raise invalid(f"'top_logprobs' must be an integer from 0 to {MAX_TOP}", "top_logprobs")
    if top is not None and not wanted:
        raise invalid("'top_logprobs' needs 'logprobs' set to true", "top_logprobs")
    return (top or 0) if wanted else None


def _message(item: Any, index: int) -> Message:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise invalid(f"{where} must be an object", where)
    role = item.get("role")
    if role not in ROLES:
        raise invalid(f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
    content = item.get("content")
    if content is None and role == "assistant":
        content = ""  # an assistant turn that only called tools
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid(
                    f"{where}.content: only text parts are supported (a text model)",
                    f"{where}.content",
                )
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"{where}.content: a text part needs 'text'", f"{where}.content")
            texts.append(text)
        content = "".join(texts)
    if not isinstance(content, str):
        raise invalid(
            f"{where}.content must be a string or an array of text parts", f"{where}.content"
        )
    return Message(role, content)


def _options(body: Mapping[str, Any], tokens_key: str) -> Options:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("you must provide a model parameter", "model")
    for key, off in _UNSUPPORTED.items():
        if body.get(key) not in off:
            raise invalid(f"'{key}' is not supported by pbd's OpenAI API", key)
    n = _integer(body, "n", 1)
    if n is None or not 1 <= n <= MAX_N:
        raise invalid(f"'n' must be an integer from 1 to {MAX_N}", "n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", "stream")
    include_usage = False
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not stream:
            raise invalid(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            )
        if not isinstance(stream_options, dict) or not isinstance(
            stream_options.get("include_usage", False), bool
        ):
            raise invalid(
                "'stream_options' must be an object; 'include_usage' a boolean", "stream_options"
            )
        include_usage = bool(stream_options.get("include_usage", False))
    max_tokens = _integer(body, tokens_key, None)
    if max_tokens is not None and max_tokens < 1:
        raise invalid(f"'{tokens_key}' must be at least 1", tokens_key)
    sampling = Sampling(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0),
        top_p=_number(body, "top_p", 0.0, 1.0),
        seed=_integer(body, "seed", None),
        stop=_stop(body.get("stop")),
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0),
        extra=tuple(_vllm_fields(body, n, max_tokens).items()),
    )
    return Options(model, n, stream, include_usage, sampling)


def _vllm_fields(body: Mapping[str, Any], n: int, max_tokens: int | None) -> dict[str, Any]:
    """vLLM's extra sampling fields and ``best_of`` that the body sets, checked as vLLM's
    ``SamplingParams`` checks them (and ``best_of`` as OpenAI does)."""
    given = {key: body[key] for key in VLLM_FIELDS if body.get(key) is not None}
    for key, kind in VLLM_FIELDS.items():
        value = given.get(key)
        if value is None:
            continue
        if kind == "bool" and not isinstance(value, bool):
            raise invalid(f"'{key}' must be a boolean", key)
        if kind == "int" and not _is_int(value):
            raise invalid(f"'{key}' must be an integer", key)
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise invalid(f"'{key}' must be a number", key)
        if kind == "ints" and not (isinstance(value, list) and all(_is_int(v) for v in value)):
            raise invalid(f"'{key}' must be an array of integers", key)
    checks: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
        ("best_of", lambda v: v >= n, f"'best_of' must be at least 'n' ({n})"),
        ("top_k", lambda v: v == -1 or v >= 0, "'top_k' must be -1 or 0 (off), or at least 1"),
        ("min_p", lambda v: 0 <= v <= 1, "'min_p' must be a number from 0 to 1"),
        ("repetition_penalty", lambda v: v > 0, "'repetition_penalty' must be greater than 0"),
        ("min_tokens", lambda v: v >= 0, "'min_tokens' must be at least 0"),
        (
            "min_tokens",
            lambda v: max_tokens is None or v <= max_tokens,
            f"'min_tokens' must be at most max_tokens ({max_tokens})",
        ),
        (
            "truncate_prompt_tokens",
            lambda v: v >= 1,
            "'truncate_prompt_tokens' must be at least 1",
        ),
    )
    for key, holds, message in checks:
        if key in given and not holds(given[key]):
            raise invalid(message, key)
    return given


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(body: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if not _is_int(value):
        raise invalid(f"'{key}' must be an integer", key)
    return int(value)


def _number(body: Mapping[str, Any], key: str, low: float, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise invalid(f"'{key}' must be a number from {low:g} to {high:g}", key)
    return float(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or len(stops) > MAX_STOP
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise invalid(
            f"'stop' must be a non-empty string or an array of up to {MAX_STOP} of them", "stop"
        )
    return tuple(stops)


def check_object(doc: Any) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return doc
