"""The OpenAI API (/v1) of the real daemon, called with OpenAI's own Python client (sync and
streaming), aiohttp and curl: the example model and the test models, the chat template,
sampling options passed on, n, stop, usage, errors, and a client that goes away."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pbd_harness import Daemon, running_daemon
from sse_helpers import (
    LLM_MODELS,
    curl,
    first_events_then_leave,
    llm_repository,
    metric,
    post,
    wait_for_metric,
)

USER = [{"role": "user", "content": "hello big world"}]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("openai")
    with running_daemon(llm_repository(workdir), workdir, settle=list(LLM_MODELS)) as running:
        yield running


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"http://{daemon.http_url}/v1", api_key="unused", max_retries=0, timeout=60
    ) as opened:
        yield opened


# -- models --------------------------------------------------------------------------------------


def test_the_models_that_follow_the_convention_are_listed(client: openai.OpenAI) -> None:
    models = {m.id: m for m in client.models.list()}
    assert set(models) == {"tiny_llm", "generate_probe", "generate_probe_sync"}
    assert models["tiny_llm"].owned_by == "pbd" and models["tiny_llm"].object == "model"
    assert client.models.retrieve("tiny_llm").id == "tiny_llm"
    for missing in ("nope", "identity_fp32"):  # unknown, or not a text model
        with pytest.raises(openai.NotFoundError) as info:
            client.models.retrieve(missing)
        assert info.value.code == "model_not_found"


# -- chat ----------------------------------------------------------------------------------------


def test_chat_with_the_example_model(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny_llm", messages=USER)
    assert answer.id.startswith("chatcmpl-") and answer.model == "tiny_llm"
    assert answer.object == "chat.completion"
    (choice,) = answer.choices
    assert (choice.message.role, choice.message.content) == ("assistant", "olleh gib dlrow")
    assert choice.finish_reason == "stop"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (3, 3)
    assert answer.usage.total_tokens == 6


def test_chat_streams_the_same_text_in_deltas(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="tiny_llm",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert deltas[1:4] == ["olleh", " gib", " dlrow"]  # one chunk per response of the model
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 3)


def test_without_a_template_in_its_config_a_model_gets_chatml(client: openai.OpenAI) -> None:
    """generate_probe answers with the prompt it got."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    answer = client.chat.completions.create(model="generate_probe", messages=messages)
    assert answer.choices[0].message.content == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert answer.usage is None  # the model reports no counts


def test_sampling_options_reach_the_model(client: openai.OpenAI) -> None:
    # tiny_llm takes max_tokens, temperature, seed and stop as inputs.
    short = client.chat.completions.create(model="tiny_llm", messages=USER, max_tokens=2)
    assert short.choices[0].message.content == "olleh gib"
    assert short.choices[0].finish_reason == "length"  # it reported 2 tokens of 2
    stopped = client.completions.create(model="tiny_llm", prompt="a b c d", stop=["c"])
    assert stopped.choices[0].text == "a b"
    words = " ".join(f"w{i}" for i in range(12))
    seeded = [
        client.completions.create(model="tiny_llm", prompt=words, temperature=1, seed=seed)
        .choices[0]
        .text
        for seed in (1, 1, 2)
    ]
    assert seeded[0] == seeded[1] != seeded[2]
    assert sorted(seeded[0].split()) == sorted(w[::-1] for w in words.split())
    # generate_probe takes them as one JSON string, sampling_parameters (it echoes it).
    echoed = client.completions.create(
        model="generate_probe", prompt="p", max_tokens=3, temperature=0.5, seed=4, stop="zz"
    )
    prompt, sampling = echoed.choices[0].text.split("|", 1)
    assert prompt == "p"
    assert json.loads(sampling) == {"max_tokens": 3, "temperature": 0.5, "seed": 4, "stop": ["zz"]}


def test_vllms_sampling_fields_reach_the_model_and_are_checked(client: openai.OpenAI) -> None:
    vllm = {"top_k": 3, "min_tokens": 1, "ignore_eos": True, "repetition_penalty": 1.1}
    echoed = client.completions.create(
        model="generate_probe", prompt="p", best_of=2, n=2, extra_body=vllm
    )
    sampling = json.loads(echoed.choices[0].text.split("|", 1)[1])
    assert sampling == {**vllm, "best_of": 2}
    for wrong, param in (({"top_k": -5}, "top_k"), ({"min_tokens": "1"}, "min_tokens")):
        with pytest.raises(openai.BadRequestError) as info:
            client.completions.create(model="generate_probe", prompt="p", extra_body=wrong)
        assert info.value.param == param
    with pytest.raises(openai.BadRequestError) as info:  # as OpenAI and Triton answer
        client.completions.create(model="tiny_llm", prompt="p", n=3, best_of=2)
    assert info.value.param == "best_of"


# -- completions ---------------------------------------------------------------------------------


def test_completions_n_prompts_echo_and_seeds_per_choice(client: openai.OpenAI) -> None:
    words = " ".join(f"w{i}" for i in range(10))
    answer = client.completions.create(
        model="tiny_llm", prompt=[words, "x y"], n=2, temperature=1, seed=5, echo=True
    )
    assert answer.object == "text_completion"
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    texts = [c.text for c in answer.choices]
    assert all(t.startswith(words) for t in texts[:2]) and all(
        t.startswith("x y") for t in texts[2:]
    )
    assert texts[0] != texts[1]  # seed 5 and seed 6
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 12  # once per prompt
    assert answer.usage.completion_tokens == 24


def test_completions_stream(client: openai.OpenAI) -> None:
    stream = client.completions.create(model="tiny_llm", prompt="one two three", stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == "eno owt eerht"
    assert [c.choices[0].finish_reason for c in chunks][-1] == "stop"


def test_n_choices_stream_side_by_side(client: openai.OpenAI) -> None:
    stream = client.completions.create(model="tiny_llm", prompt="a b", n=2, stream=True)
    texts: dict[int, str] = {0: "", 1: ""}
    finished = set()
    for chunk in stream:
        choice = chunk.choices[0]
        texts[choice.index] += choice.text
        if choice.finish_reason:
            finished.add(choice.index)
    assert texts == {0: "a b", 1: "a b"} and finished == {0, 1}


def test_stop_is_applied_by_pbd_for_a_model_that_cannot(client: openai.OpenAI) -> None:
    """generate_probe_sync upper-cases its prompt; it has no stop input."""
    answer = client.completions.create(
        model="generate_probe_sync", prompt="hello world", stop="WOR"
    )
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == ("HELLO ", "stop")
    stream = client.completions.create(
        model="generate_probe_sync", prompt="hello world", stop=["LO W"], stream=True
    )
    assert "".join(c.choices[0].text for c in stream) == "HEL"


# -- errors --------------------------------------------------------------------------------------


def test_errors_are_openais_objects(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=USER)
    assert missing.value.status_code == 404 and missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="tiny_llm", messages=USER, temperature=3)
    assert bad.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="tiny_llm", prompt="x", seed=-1)
    assert "seed" in bad.value.message  # the model's UINT64 input cannot take it
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model="tiny_llm", prompt=[1, 2, 3])
    assert bad.value.param == "prompt"


def test_an_error_of_the_model(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        client.completions.create(model="generate_probe", prompt="!error_first")
    assert failed.value.status_code == 500 and "first failed" in failed.value.message
    stream = client.completions.create(model="generate_probe", prompt="!error_mid", stream=True)
    with pytest.raises(openai.APIError, match="then failed"):
        list(stream)


def test_raw_errors_over_http(daemon: Daemon) -> None:
    base = f"http://{daemon.http_url}/v1"
    answer = post(f"{base}/chat/completions", "{not json")
    assert answer.status == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    answer = post(
        f"{base}/completions", '{"model": "tiny_llm", "prompt": "x", "stream_options": {}}'
    )
    assert answer.status == 400 and answer.json()["error"]["param"] == "stream_options"


# -- streams over plain HTTP, and a client that goes away ----------------------------------------


def test_curl_sees_chunks_and_done(daemon: Daemon) -> None:
    body = json.dumps({"model": "tiny_llm", "messages": USER, "stream": True})
    answer = curl(f"http://{daemon.http_url}/v1/chat/completions", body)
    assert answer.status == 200 and answer.content_type.startswith("text/event-stream")
    assert answer.events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in answer.events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == (
        "olleh gib dlrow"
    )


def test_a_client_that_goes_away_cancels_the_model(daemon: Daemon) -> None:
    name = "tiny_llm_cancelled_total"
    before = metric(daemon.metrics_url, name) or 0.0
    words = " ".join(f"w{i}" for i in range(300))
    body = json.dumps({"model": "tiny_llm", "prompt": words, "max_tokens": 300, "stream": True})
    url = f"http://{daemon.http_url}/v1/completions"
    assert len(asyncio.run(first_events_then_leave(url, body, 2))) == 2
    assert wait_for_metric(daemon.metrics_url, name, before + 1) == before + 1


def test_each_choice_is_a_request_in_the_models_statistics(
    daemon: Daemon, client: openai.OpenAI
) -> None:
    def successes() -> int:
        answer = urllib.request.urlopen(
            f"http://{daemon.http_url}/v2/models/generate_probe_sync/stats", timeout=10
        )
        with answer:
            doc = json.loads(answer.read())
        return int(doc["model_stats"][0]["inference_stats"]["success"]["count"])

    before = successes()
    client.completions.create(model="generate_probe_sync", prompt=["a", "b"], n=3)
    assert successes() == before + 6


# -- API keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--frontends", "1", "--openai-api-key", "k1", "--openai-api-key", "k2"), {}),
        (("--frontends", "2"), {"PBD_OPENAI_API_KEY": "k1,k2"}),  # /v1 passed on to the daemon
    ],
    ids=["daemon", "front-ends"],
)
def test_api_keys_are_checked_wherever_v1_is_served(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str]
) -> None:
    repository = llm_repository(tmp_path)
    with running_daemon(repository, tmp_path, *args, settle=["tiny_llm"], env=env) as running:
        base = f"http://{running.http_url}/v1"
        for key in ("k1", "k2"):
            with openai.OpenAI(base_url=base, api_key=key, max_retries=0) as right:
                answer = right.chat.completions.create(model="tiny_llm", messages=USER)
                assert answer.choices[0].message.content == "olleh gib dlrow"
                assert [c.choices[0].delta.content for c in right.chat.completions.create(
                    model="tiny_llm", messages=USER, stream=True
                ) if c.choices][1] == "olleh"  # fmt: skip
        with openai.OpenAI(base_url=base, api_key="k3", max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError) as info:
                wrong.chat.completions.create(model="tiny_llm", messages=USER)
            assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
            with pytest.raises(openai.AuthenticationError):
                wrong.models.list()
        bare = post(f"{base}/completions", json.dumps({"model": "tiny_llm", "prompt": "x"}), {})
        assert bare.status == 401
        assert json.loads(bare.body)["error"]["code"] == "invalid_api_key"
        # The rest of the HTTP port is not the OpenAI API's to guard.
        generate = post(
            f"http://{running.http_url}/v2/models/tiny_llm/generate",
            json.dumps({"text_input": "a b"}),
            {},
        )
        assert generate.status == 200


def test_restricted_groups_need_their_header_wherever_v1_is_served(tmp_path: Path) -> None:
    """--openai-restricted-api, as Triton's OpenAI front end: 401 authentication_error for a
    restricted group without its header's value; other groups stay open."""
    repository = llm_repository(tmp_path)
    rule = ("--openai-restricted-api", "inference:infer-key=s3cret")
    with running_daemon(
        repository, tmp_path, "--frontends", "2", *rule, settle=["tiny_llm"]
    ) as running:
        base = f"http://{running.http_url}/v1"
        body = json.dumps({"model": "tiny_llm", "prompt": "x"})
        refused = post(f"{base}/completions", body, {})
        assert refused.status == 401
        error = json.loads(refused.body)["error"]
        assert (error["type"], error["code"]) == ("authentication_error", "invalid_auth")
        assert (
            error["message"]
            == "This API is restricted, expecting header 'infer-key' with valid value"
        )
        assert post(f"{base}/completions", body, {"Infer-Key": "wrong"}).status == 401
        with openai.OpenAI(
            base_url=base, api_key="none", max_retries=0, default_headers={"infer-key": "s3cret"}
        ) as allowed:
            answer = allowed.chat.completions.create(model="tiny_llm", messages=USER)
            assert answer.choices[0].message.content == "olleh gib dlrow"
        with openai.OpenAI(base_url=base, api_key="none", max_retries=0) as plain:
            assert "tiny_llm" in [m.id for m in plain.models.list()]  # not restricted
            with pytest.raises(openai.AuthenticationError):
                plain.chat.completions.create(model="tiny_llm", messages=USER)


# -- the model's own chat template ---------------------------------------------------------------

HUB_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | trim }}"
    "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    "{% if greeting is defined %}{{ greeting }}{% endif %}"
    "{% if messages[-1]['role'] == 'assistant' %}{{ raise_exception('ends with the model') }}"
    "{% endif %}"
)


def test_a_models_own_jinja_template_renders_the_chat(tmp_path: Path) -> None:
    """generate_probe answers with the prompt it got; its tokenizer_config.json (as a model
    from the Hub ships it) sets the template and the special tokens."""
    repository = llm_repository(tmp_path)
    config = {"chat_template": HUB_TEMPLATE, "bos_token": "<s>", "eos_token": {"content": "</s>"}}
    (repository / "generate_probe" / "tokenizer_config.json").write_text(json.dumps(config))
    with (
        running_daemon(repository, tmp_path, settle=["generate_probe"]) as running,
        openai.OpenAI(
            base_url=f"http://{running.http_url}/v1", api_key="x", max_retries=0
        ) as client,
    ):
        messages = [{"role": "system", "content": " S "}, {"role": "user", "content": "U"}]
        answer = client.chat.completions.create(model="generate_probe", messages=messages)
        assert (
            answer.choices[0].message.content == "<s><|system|>S</s>\n<|user|>U</s>\n<|assistant|>"
        )
        kwargs = {"chat_template_kwargs": {"greeting": "hey"}, "add_generation_prompt": False}
        answer = client.chat.completions.create(
            model="generate_probe", messages=messages, extra_body=kwargs
        )
        assert answer.choices[0].message.content == "<s><|system|>S</s>\n<|user|>U</s>\nhey"
        with pytest.raises(openai.BadRequestError, match="ends with the model"):
            client.chat.completions.create(
                model="generate_probe", messages=[{"role": "assistant", "content": "a"}]
            )
