"""python_backend's examples, each in pbd's own equivalent (tests/integration/upstream_models):
the same model API used the same way, driven the way the examples' clients drive them (HTTP
for the plain models, gRPC streams for the decoupled ones).

add_sub -> sum_diff, auto_complete -> auto_fixed/auto_batched, bls sync/async -> bls_router/
bls_fanout, bls_decoupled sync/async -> bls_stream_sum(_async), custom_metrics -> metered,
decoupled repeat/square -> repeat_stream/square_stream, pytorch -> torch_sum_diff, jax ->
jax_sum_diff. The last two run only where torch or jax is installed (neither is a test
dependency).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import Daemon, DaemonFactory, make_repository, running_daemon
from streaming_helpers import final_flag, open_stream, repeat_inputs
from test_metrics import labels, scrape
from tritonclient.utils import InferenceServerException

UPSTREAM_MODELS = Path(__file__).resolve().parent / "upstream_models"
OPTIONAL = {"torch_sum_diff": "torch", "jax_sum_diff": "jax"}
# Served name -> model directory. The auto_complete model is served under both of the
# example's names; it tells them apart by name.
CORE_MODELS = {
    p.name: p
    for p in UPSTREAM_MODELS.iterdir()
    if p.is_dir() and p.name not in {*OPTIONAL, "auto_complete"}
} | dict.fromkeys(("auto_fixed", "auto_batched"), UPSTREAM_MODELS / "auto_complete")
NO_GPU = not Path("/proc/driver/nvidia/gpus").is_dir() or not any(
    Path("/proc/driver/nvidia/gpus").iterdir()
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("upstream")
    repository = make_repository(workdir, CORE_MODELS)
    with running_daemon(repository, workdir, settle=sorted(CORE_MODELS)) as served:
        yield served


@pytest.fixture(scope="module")
def http(daemon: Daemon) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(daemon.http_url)
    yield client
    client.close()


def pair(a: np.ndarray, b: np.ndarray) -> list[httpclient.InferInput]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


def random_pair(seed: int, shape: tuple[int, ...] = (4,)) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random(shape, dtype=np.float32), rng.random(shape, dtype=np.float32)


def check_sum_diff(
    http: httpclient.InferenceServerClient, model: str, seed: int
) -> httpclient.InferResult:
    a, b = random_pair(seed)
    outputs = [httpclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    result = http.infer(model, pair(a, b), request_id="1", outputs=outputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    return result


# -- add_sub -------------------------------------------------------------------------------------


def test_add_sub_answers_sum_and_difference(http: httpclient.InferenceServerClient) -> None:
    result = check_sum_diff(http, "sum_diff", seed=1)
    response = result.get_response()
    assert (response["model_name"], response["model_version"], response["id"]) == (
        "sum_diff",
        "1",
        "1",
    )
    assert [(o["name"], o["datatype"]) for o in response["outputs"]] == [
        ("OUTPUT0", "FP32"),
        ("OUTPUT1", "FP32"),
    ]


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: KIND_AUTO resolves to it")
def test_instance_group_without_kind_reads_kind_cpu(
    http: httpclient.InferenceServerClient,
) -> None:
    """Triton's NormalizeInstanceGroup: KIND_AUTO becomes KIND_CPU where there is no GPU, in the
    config clients read (and models get) as much as in the placement."""
    [group] = http.get_model_config("sum_diff")["instance_group"]
    assert (group["name"], group["kind"], group["count"]) == ("sum_diff", "KIND_CPU", 1)


# -- auto_complete -------------------------------------------------------------------------------


def test_auto_complete_fills_the_config(http: httpclient.InferenceServerClient) -> None:
    expected = [
        {"name": n, "data_type": "TYPE_FP32", "dims": [4]}
        for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    ]
    for model, max_batch_size in (("auto_fixed", 0), ("auto_batched", 4)):
        config = http.get_model_config(model)
        assert config["max_batch_size"] == max_batch_size, model
        tensors = [
            {k: t[k] for k in ("name", "data_type", "dims")}
            for t in config["input"] + config["output"]
        ]
        assert tensors == expected, model
        assert ("dynamic_batching" in config) == (max_batch_size > 0), model


def test_auto_complete_batching_model_takes_a_batch(
    http: httpclient.InferenceServerClient,
) -> None:
    a, b = random_pair(2, shape=(3, 4))
    result = http.infer("auto_batched", pair(a, b))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
    check_sum_diff(http, "auto_fixed", seed=3)


# -- bls -----------------------------------------------------------------------------------------


def routed(
    http: httpclient.InferenceServerClient, callee: str, a: np.ndarray, b: np.ndarray
) -> httpclient.InferResult:
    name = httpclient.InferInput("MODEL_NAME", [1], "BYTES")
    name.set_data_from_numpy(np.array([callee], dtype=np.object_))
    return http.infer("bls_router", [*pair(a, b), name], request_id="1")


def test_bls_sync_calls_the_model_a_string_input_names(
    http: httpclient.InferenceServerClient,
) -> None:
    for seed, callee in enumerate(("sum_diff", "auto_fixed")):
        a, b = random_pair(seed)
        result = routed(http, callee, a, b)
        np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_bls_sync_to_a_missing_model_fails_the_request(
    http: httpclient.InferenceServerClient,
) -> None:
    a, b = random_pair(4)
    with pytest.raises(InferenceServerException) as info:
        routed(http, "undefined_model", a, b)
    # The example's client prints this message; the model raised it as TritonModelException.
    assert "TritonModelException" in info.value.message()
    assert "undefined_model" in info.value.message()


def test_bls_async_gathers_two_calls(http: httpclient.InferenceServerClient) -> None:
    check_sum_diff(http, "bls_fanout", seed=5)


# -- bls_decoupled -------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "calls"), [("bls_stream_sum", 1), ("bls_stream_sum_async", 2)])
def test_bls_sums_a_decoupled_models_responses(
    http: httpclient.InferenceServerClient, model: str, calls: int
) -> None:
    for n in (4, 2, 0, 1):
        count = httpclient.InferInput("IN", [1], "INT32")
        count.set_data_from_numpy(np.array([n], dtype=np.int32))
        result = http.infer(model, [count], outputs=[httpclient.InferRequestedOutput("SUM")])
        assert result.as_numpy("SUM").tolist() == [calls * n * n], (model, n)
        # The tensor as the model made it (numpy's default integer), not the config's INT32:
        # Triton 2.51 answers the same.
        assert result.get_output("SUM")["datatype"] == "INT64"


def test_http_refuses_a_decoupled_model_with_tritons_words(
    http: httpclient.InferenceServerClient,
) -> None:
    count = httpclient.InferInput("IN", [1], "INT32")
    count.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        http.infer("square_stream", [count])
    assert info.value.status() == "501"
    assert info.value.message() == (
        "HTTP end point doesn't support models with decoupled transaction policy"
    )


# -- custom_metrics ------------------------------------------------------------------------------


def test_custom_metrics_of_each_kind_reach_the_metrics_endpoint(
    daemon: Daemon, http: httpclient.InferenceServerClient
) -> None:
    sums = [4.0, 40.0, 400.0]
    counts = []
    for total in sums:
        data = np.full(4, total / 4, dtype=np.float32)
        tensor = httpclient.InferInput("INPUT0", [4], "FP32")
        tensor.set_data_from_numpy(data)
        counts.append(float(http.infer("metered", [tensor]).as_numpy("COUNT")[0]))
    assert counts == [1.0, 2.0, 3.0]  # Metric.value() read back inside the model

    text, samples = scrape(daemon.metrics_url)
    for name, kind, help_text in (
        ("metered_requests", "counter", "Requests the metered model answered"),
        ("metered_last_sum", "gauge", "INPUT0 summed, last request"),
        ("metered_sum", "histogram", "INPUT0 summed, every request"),
    ):
        assert f"# HELP {name} {help_text}\n" in text
        assert f"# TYPE {name} {kind}\n" in text
    mine = labels(model="metered", version="1")
    assert samples[("metered_requests", mine)] == 3
    assert samples[("metered_last_sum", mine)] == 400
    assert samples[("metered_sum_count", mine)] == 3
    assert samples[("metered_sum_sum", mine)] == sum(sums)
    cumulative = {"1": 0, "10": 1, "100": 2, "+Inf": 3}
    buckets = {
        le: samples[("metered_sum_bucket", labels(model="metered", version="1", le=le))]
        for le in cumulative
    }
    assert buckets == cumulative


# -- decoupled -----------------------------------------------------------------------------------


def test_decoupled_square_answers_n_times_per_request(daemon: Daemon) -> None:
    values = [4, 2, 0, 1]
    with open_stream(daemon) as (client, answers):
        for index, n in enumerate(values):
            count = grpcclient.InferInput("IN", [1], "INT32")
            count.set_data_from_numpy(np.array([n], dtype=np.int32))
            client.async_stream_infer(
                "square_stream",
                [count],
                request_id=str(index),
                outputs=[grpcclient.InferRequestedOutput("OUT")],
                enable_empty_final_response=True,
            )
        # Each request ends with an empty response carrying only the final flag.
        got = answers.take(sum(values) + len(values))
    by_id: dict[str, list[Any]] = {str(i): [] for i in range(len(values))}
    for result, error in got:
        assert error is None, error
        by_id[result.get_response().id].append(result)
    for index, n in enumerate(values):
        results = by_id[str(index)]
        assert [final_flag(r) for r in results] == [False] * n + [True], index
        assert [r.as_numpy("OUT").tolist() for r in results[:-1]] == [[n]] * n
        assert results[-1].get_response().outputs == []


def test_decoupled_repeat_answers_each_element_in_order(daemon: Daemon) -> None:
    values = [4, 2, 0, 1]
    with open_stream(daemon) as (client, answers):
        # WAIT shorter than the DELAYs: execute returns while responses are still being sent.
        client.async_stream_infer(
            "repeat_stream", repeat_inputs(values, delay_ms=3, wait_ms=1), request_id="0"
        )
        got = answers.take(len(values))
    for index, (result, error) in enumerate(got):
        assert error is None, error
        assert result.get_response().id == "0"
        assert result.as_numpy("OUT").tolist() == [values[index]]
        assert result.as_numpy("IDX").tolist() == [index]


# -- pytorch and jax -----------------------------------------------------------------------------


@pytest.mark.parametrize("model", sorted(OPTIONAL))
def test_framework_model(model: str, start_daemon: DaemonFactory, tmp_path: Path) -> None:
    framework = OPTIONAL[model]
    if importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed (an optional framework, not a test dependency)")
    served = start_daemon(
        make_repository(tmp_path, {model: UPSTREAM_MODELS / model}), settle=[model]
    )
    client = httpclient.InferenceServerClient(served.http_url)
    try:
        check_sum_diff(client, model, seed=6)
    finally:
        client.close()


def test_every_core_model_is_ready(daemon: Daemon) -> None:
    ready = {m: daemon.control().is_model_ready(m) for m in CORE_MODELS}
    assert ready == dict.fromkeys(CORE_MODELS, True)
