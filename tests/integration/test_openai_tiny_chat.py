"""examples/models/tiny_chat through the OpenAI API, with OpenAI's own client: its Hub-style
template (tokenizer_config.json) renders the messages, and its real tokenizer (Mistral 7B's,
from the mistral-common package) counts the prompt the model got and spells the answer."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
from pbd_harness import EXAMPLE_MODELS, make_repository, running_daemon

TOKENIZER = MistralTokenizer.v1().instruct_tokenizer.tokenizer
BOS, EOS = 1, 2
LAST = "Say it back: ça va, naïve café 🦙?"
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": LAST},
]


def _encode(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, bos=False, eos=False))


# The template's rendering of MESSAGES, tokenized as a Hub tokenizer tokenizes it: <s> and </s>
# as their ids, the text between them as text.
PROMPT_IDS = [
    BOS,
    *_encode("[INST] You are terse.\n\nHi there [/INST]Hello"),
    EOS,
    *_encode(f"[INST] {LAST} [/INST]"),
]
ANSWER_IDS = _encode(LAST)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    workdir = tmp_path_factory.mktemp("tiny_chat")
    repository = make_repository(workdir, {"tiny_chat": EXAMPLE_MODELS / "tiny_chat"})
    with (
        running_daemon(repository, workdir, settle=["tiny_chat"]) as daemon,
        openai.OpenAI(
            base_url=f"http://{daemon.http_url}/v1", api_key="unused", max_retries=0, timeout=60
        ) as opened,
    ):
        yield opened


def test_the_rendered_prompt_reaches_the_model_and_the_answer_is_its_last_instruction(
    client: openai.OpenAI,
) -> None:
    answer = client.chat.completions.create(model="tiny_chat", messages=MESSAGES)
    (choice,) = answer.choices
    assert choice.message.content == LAST
    assert choice.finish_reason == "stop"
    assert answer.usage is not None
    # The counts are the real tokenizer's: the whole rendering (system, both turns, the
    # special tokens) reached the model.
    assert answer.usage.prompt_tokens == len(PROMPT_IDS)
    assert answer.usage.completion_tokens == len(ANSWER_IDS)


def test_the_answer_streams_one_token_per_chunk(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny_chat",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices]
    pieces = [d for d in deltas if d is not None]
    assert "".join(pieces) == LAST
    assert len([p for p in pieces if p]) > 1  # more than one token arrived apart
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (len(PROMPT_IDS), len(ANSWER_IDS))


def test_max_tokens_cuts_the_answer_at_a_token(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny_chat", messages=MESSAGES, max_tokens=3)
    (choice,) = answer.choices
    assert choice.message.content == TOKENIZER.decode(ANSWER_IDS[:3])
    assert choice.finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 3


def test_the_templates_own_error_is_a_400(client: openai.OpenAI) -> None:
    twice = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(openai.BadRequestError, match="roles must alternate"):
        client.chat.completions.create(model="tiny_chat", messages=twice)
