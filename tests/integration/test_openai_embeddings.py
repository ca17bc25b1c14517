"""``POST /v1/embeddings`` of the real daemon, with OpenAI's own client: hash_embedder (one
vector of 16 per string, unit length, the same for the same text) and a text model that
does not embed."""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator

import numpy as np
import openai
import pytest
from pbd_harness import EXAMPLE_MODELS, TEST_MODELS, make_repository, running_daemon


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    workdir = tmp_path_factory.mktemp("openai_embeddings")
    models = {
        "hash_embedder": TEST_MODELS / "hash_embedder",
        "tiny_llm": EXAMPLE_MODELS / "tiny_llm",
    }
    repository = make_repository(workdir, models)
    # The same embedder without its dimensions input.
    fixed = repository / "fixed_embedder"
    fixed.mkdir()
    (fixed / "1").symlink_to(repository / "hash_embedder" / "1", target_is_directory=True)
    config = (repository / "hash_embedder" / "config.pbtxt").read_text()
    config = config.replace('name: "hash_embedder"', 'name: "fixed_embedder"').replace(
        '  { name: "dimensions" data_type: TYPE_INT32 dims: [ 1 ] optional: true }\n', ""
    )
    (fixed / "config.pbtxt").write_text(config.replace("dims: [ 1 ] },\n]", "dims: [ 1 ] }\n]"))
    names = [*models, "fixed_embedder"]
    with (
        running_daemon(repository, workdir, settle=names) as daemon,
        openai.OpenAI(
            base_url=f"http://{daemon.http_url}/v1", api_key="x", max_retries=0, timeout=60
        ) as opened,
    ):
        yield opened


def test_strings_are_embedded_one_vector_each(client: openai.OpenAI) -> None:
    texts = ["the cat sat", "a dog", "the cat sat"]
    answer = client.embeddings.create(model="hash_embedder", input=texts)
    assert answer.object == "list" and answer.model == "hash_embedder"
    assert [d.index for d in answer.data] == [0, 1, 2]
    vectors = [d.embedding for d in answer.data]
    assert all(len(v) == 16 for v in vectors)
    assert all(math.isclose(float(np.linalg.norm(v)), 1.0, rel_tol=1e-5) for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (8, 8)  # words
    one = client.embeddings.create(model="hash_embedder", input="a dog")
    assert one.data[0].embedding == vectors[1]


def test_base64_is_the_same_float32s(client: openai.OpenAI) -> None:
    floats = client.embeddings.create(model="hash_embedder", input="x y", encoding_format="float")
    raw = client.embeddings.with_raw_response.create(
        model="hash_embedder", input="x y", encoding_format="base64"
    ).http_response.json()
    encoded = raw["data"][0]["embedding"]
    assert isinstance(encoded, str)
    decoded = np.frombuffer(base64.b64decode(encoded), dtype="<f4").tolist()
    assert decoded == floats.data[0].embedding


def test_dimensions_go_to_a_model_that_takes_them(client: openai.OpenAI) -> None:
    short = client.embeddings.create(model="hash_embedder", input="x y", dimensions=4)
    assert len(short.data[0].embedding) == 4
    assert math.isclose(float(np.linalg.norm(short.data[0].embedding)), 1.0, rel_tol=1e-5)
    with pytest.raises(openai.BadRequestError, match="does not support 'dimensions'") as info:
        client.embeddings.create(model="fixed_embedder", input="x", dimensions=4)
    assert info.value.param == "dimensions"
    assert len(client.embeddings.create(model="fixed_embedder", input="x").data[0].embedding) == 16


def test_what_cannot_be_embedded_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="FP32 output 'embedding'"):
        client.embeddings.create(model="tiny_llm", input="x")
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="hash_embedder", input=[1, 2, 3])
    assert info.value.param == "input" and "token ids" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="hash_embedder", input="")
    assert info.value.param == "input"


def test_embedding_models_are_listed(client: openai.OpenAI) -> None:
    assert {m.id for m in client.models.list()} == {"hash_embedder", "fixed_embedder", "tiny_llm"}
    assert client.models.retrieve("hash_embedder").id == "hash_embedder"
