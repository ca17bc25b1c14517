"""Log probabilities through the OpenAI API (/v1) of the real daemon, with OpenAI's own client:
echo_llm reports a made-up log probability for each character it writes (its "token")."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from pbd_harness import EXAMPLE_MODELS, TEST_MODELS, make_repository, running_daemon

USER = [{"role": "user", "content": "héllo"}]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    workdir = tmp_path_factory.mktemp("openai_logprobs")
    models = {"echo_llm": TEST_MODELS / "echo_llm", "tiny_llm": EXAMPLE_MODELS / "tiny_llm"}
    repository = make_repository(workdir, models)
    with (
        running_daemon(repository, workdir, settle=list(models)) as daemon,
        openai.OpenAI(
            base_url=f"http://{daemon.http_url}/v1", api_key="x", max_retries=0, timeout=60
        ) as opened,
    ):
        yield opened


def _logprob(i: int) -> float:
    return -(i + 1) / 10  # what echo_llm says of the character at offset i


def test_chat_logprobs_in_openais_shape(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="echo_llm", messages=USER, logprobs=True, top_logprobs=2
    )
    logprobs = answer.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    assert [t.token for t in logprobs.content] == list("héllo")
    assert [t.logprob for t in logprobs.content] == [_logprob(i) for i in range(5)]
    assert logprobs.content[1].bytes == [0xC3, 0xA9]
    top = logprobs.content[0].top_logprobs
    assert [(t.token, t.logprob, t.bytes) for t in top] == [
        ("h", _logprob(0), [0x68]),
        ("<1>", _logprob(0) - 1, [0x3C, 0x31, 0x3E]),
    ]
    only = client.chat.completions.create(model="echo_llm", messages=USER, logprobs=True)
    assert only.choices[0].logprobs is not None and only.choices[0].logprobs.content is not None
    assert only.choices[0].logprobs.content[0].top_logprobs == []  # logprobs 0: the token alone
    plain = client.chat.completions.create(model="echo_llm", messages=USER)
    assert plain.choices[0].logprobs is None


def test_chat_logprobs_stream_with_their_tokens(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="echo_llm", messages=USER, logprobs=True, stream=True
    )
    tokens = []
    for chunk in stream:
        choice = chunk.choices[0]
        if choice.delta.content:  # echo_llm streams 4 characters per response
            assert choice.logprobs is not None and choice.logprobs.content is not None
            assert "".join(t.token for t in choice.logprobs.content) == choice.delta.content
            tokens.extend(choice.logprobs.content)
        elif choice.finish_reason is not None:
            assert choice.logprobs is None
    assert [t.logprob for t in tokens] == [_logprob(i) for i in range(5)]


def test_completion_logprobs_in_the_legacy_shape(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="echo_llm", prompt="abc", logprobs=1, echo=True)
    logprobs = answer.choices[0].logprobs
    assert answer.choices[0].text == "abcabc"
    assert logprobs is not None
    assert logprobs.tokens == ["a", "b", "c"]
    assert logprobs.token_logprobs == [_logprob(i) for i in range(3)]
    assert logprobs.top_logprobs == [{"a": _logprob(0)}, {"b": _logprob(1)}, {"c": _logprob(2)}]
    assert logprobs.text_offset == [3, 4, 5]  # after the echoed prompt


def test_a_model_without_the_output_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="model 'tiny_llm' does not return logprobs"):
        client.chat.completions.create(model="tiny_llm", messages=USER, logprobs=True)
    with pytest.raises(openai.BadRequestError, match="does not return logprobs"):
        client.completions.create(model="tiny_llm", prompt="a", logprobs=2)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="echo_llm", messages=USER, top_logprobs=2)
    assert info.value.param == "top_logprobs"
