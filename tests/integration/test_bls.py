"""BLS: models calling models (``InferenceRequest.exec`` / ``async_exec``), and model control
from a model (``load_model`` / ``unload_model`` / ``is_model_ready``), through real clients."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from pbd_harness import (
    EXAMPLE_MODELS,
    TEST_MODELS,
    Daemon,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)

BLS = "bls_identity"

BLS_MODELS = [
    "bls_add_sub",
    "bls_add_sub_async",
    "bls_identity",
    "bls_self",
    "bls_cycle",
    "bls_cycle_peer",
    "bls_unknown",
    "bls_control",
    "bls_repeat",
    "bls_reiterate",
    "repeat_decoupled",
    "cancel_probe_decoupled",
]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("bls")
    models = {name: TEST_MODELS / name for name in [*BLS_MODELS, "sleepy"]}
    models |= {name: EXAMPLE_MODELS / name for name in ("add_sub", "identity_fp32")}
    repository = make_repository(workdir, models)
    with running_daemon(repository, workdir, settle=sorted(models)) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> grpcclient.InferenceServerClient:
    return daemon.client()


def add_sub_inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    return [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]


def int_input(name: str, value: int) -> grpcclient.InferInput:
    return infer_input(name, np.array([value], dtype=np.int32), "INT32")


A = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
B = np.array([0.5, 0.25, 2.0, -1.0], dtype=np.float32)


def test_sync_bls_chains_two_models(client: grpcclient.InferenceServerClient) -> None:
    for _ in range(3):  # the callee's blocks are released and reused between calls
        result = client.infer("bls_add_sub", add_sub_inputs(A, B))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_async_bls_awaits_two_calls_at_once(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer("bls_add_sub_async", add_sub_inputs(A, B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


@pytest.mark.parametrize(
    "params",
    [{}, {"async": True}, {"decoupled": True}, {"decoupled": True, "async": True},
     {"model": "add_sub", "version": 7}],
    ids=["exec", "async_exec", "exec-decoupled", "async_exec-decoupled", "unknown-version"],
)  # fmt: skip
def test_bls_to_a_model_that_is_not_ready_gets_tritons_response_error(
    client: grpcclient.InferenceServerClient, params: dict[str, Any]
) -> None:
    error = error_of(lambda: client.infer("bls_unknown", [], parameters=params))
    model = params.get("model", "no_such_model")
    # Triton 2.51's words and code (python_backend's examples/bls client prints them).
    assert error.message() == (
        f"Model {model} - Error when running inference: Failed for execute the inference "
        f"request. Model '{model}' is not ready."
    )
    assert error.status() == "StatusCode.INTERNAL"
    # The daemon and the caller go on serving.
    np.testing.assert_array_equal(
        client.infer("bls_add_sub", add_sub_inputs(A, B)).as_numpy("OUTPUT0"), A + B
    )


def test_bls_timeout_is_honoured(client: grpcclient.InferenceServerClient) -> None:
    params = {"model": "sleepy", "timeout_us": 200_000}
    error = error_of(
        lambda: client.infer("bls_unknown", [int_input("DELAY_MS", 3000)], parameters=params)
    )
    assert "Request timeout expired" in error.message()
    assert error.status() == "StatusCode.UNAVAILABLE"
    # Without a timeout the same call completes.
    params = {"model": "sleepy"}
    result = client.infer("bls_unknown", [int_input("DELAY_MS", 10)], parameters=params)
    assert result.as_numpy("OK").tolist() == [1]


def test_decoupled_exec_of_a_plain_model_yields_its_one_response(
    client: grpcclient.InferenceServerClient,
) -> None:
    params = {"model": "sleepy", "decoupled": True}
    result = client.infer("bls_unknown", [int_input("DELAY_MS", 1)], parameters=params)
    assert result.as_numpy("OK").tolist() == [1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_bls_iterates_a_decoupled_models_responses(
    client: grpcclient.InferenceServerClient, mode: str
) -> None:
    values = np.array([3, 1, 4, 1, 5, 9], dtype=np.int32)
    result = client.infer(
        "bls_repeat", [infer_input("IN", values, "INT32")], parameters={"mode": mode}
    )
    assert result.as_numpy("TOTAL").tolist() == [int(values.sum())]
    assert result.as_numpy("COUNT").tolist() == [len(values)]
    # repeat_decoupled sends its final flag alone: the iterator's last response is empty.
    assert result.as_numpy("EMPTY").tolist() == [1]


def test_a_finished_decoupled_iterator_iterated_again_replays_its_responses(
    client: grpcclient.InferenceServerClient,
) -> None:
    # Triton 2.51 on the same models: FIRST == SECOND == [5, 6, 7], COUNTS [4, 4].
    values = np.array([5, 6, 7], dtype=np.int32)
    result = client.infer("bls_reiterate", [infer_input("IN", values, "INT32")])
    assert result.as_numpy("FIRST").tolist() == result.as_numpy("SECOND").tolist() == [5, 6, 7]
    assert result.as_numpy("COUNTS").tolist() == [4, 4]  # with the empty final one


def test_cancelling_a_decoupled_bls_iterator_cancels_the_callee(
    client: grpcclient.InferenceServerClient, tmp_path: Path
) -> None:
    values = np.array([7], dtype=np.int32)
    params = {"take": 3, "dir": str(tmp_path)}
    result = client.infer("bls_repeat", [infer_input("IN", values, "INT32")], parameters=params)
    assert result.as_numpy("COUNT").tolist() == [3]
    # The callee streams until it sees is_cancelled(), then leaves its marker.
    wait_until(lambda: (tmp_path / "cancelled-7").exists(), 30, "the callee's cancel marker")


def test_plain_exec_of_a_decoupled_model_gets_tritons_error(
    client: grpcclient.InferenceServerClient,
) -> None:
    error = error_of(
        lambda: client.infer("bls_unknown", [], parameters={"model": "repeat_decoupled"})
    )
    assert error.message().startswith(
        "Model repeat_decoupled - Error when running inference: Model repeat_decoupled is using "
        "the decoupled."
    )
    assert "Please use 'decoupled=True' argument" in error.message()
    assert error.status() == "StatusCode.INTERNAL"  # as Triton 2.51


def test_a_model_calls_itself_on_its_other_instance(
    client: grpcclient.InferenceServerClient,
) -> None:
    result = client.infer("bls_self", [int_input("DEPTH", 1)])
    assert result.as_numpy("REACHED").tolist() == [1]


def test_a_call_no_instance_can_take_is_refused_not_hung(
    client: grpcclient.InferenceServerClient,
) -> None:
    # Depth 2 with two instances: both wait, the third level can never run.
    error = error_of(lambda: client.infer("bls_self", [int_input("DEPTH", 2)]))
    assert "BLS request to model 'bls_self' can never run" in error.message()
    assert error.status() == "StatusCode.UNAVAILABLE"
    result = client.infer("bls_self", [int_input("DEPTH", 1)])
    assert result.as_numpy("REACHED").tolist() == [1]


def test_a_bls_cycle_is_detected(client: grpcclient.InferenceServerClient) -> None:
    result = client.infer("bls_cycle", [int_input("HOPS", 1)])  # bls_cycle -> peer: no cycle
    assert result.as_numpy("HOPS_DONE").tolist() == [1]
    error = error_of(lambda: client.infer("bls_cycle", [int_input("HOPS", 2)]))
    assert "BLS request to model 'bls_cycle' can never run" in error.message()
    # Both models serve on.
    assert client.infer("bls_cycle_peer", [int_input("HOPS", 1)]).as_numpy("HOPS_DONE") == [1]
    assert client.infer("bls_cycle", [int_input("HOPS", 0)]).as_numpy("HOPS_DONE") == [0]


def _socket_bytes(pids: list[int]) -> int:
    """Bytes the processes read and wrote through system calls (their only I/O is the
    daemon socket and their log)."""
    total = 0
    for pid in pids:
        fields = dict(
            line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().split("\n") if line
        )
        total += int(fields["rchar"]) + int(fields["wchar"])
    return total


def test_bls_tensors_travel_as_descriptors(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    big = np.random.default_rng(0).random((1024, 4096), dtype=np.float32)  # 16 MiB
    pids = [*daemon.workers_of("bls_identity"), *daemon.workers_of("identity_fp32")]
    assert len(pids) == 2
    client.infer("bls_identity", [infer_input("INPUT0", big[:1, :8], "FP32")])  # warm up
    before = _socket_bytes(pids)
    result = client.infer("bls_identity", [infer_input("INPUT0", big, "FP32")])
    moved = _socket_bytes(pids) - before
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), big)
    assert moved < 64 * 1024, f"the workers moved {moved} bytes through sockets"


def test_model_control_outside_explicit_mode_is_refused(
    client: grpcclient.InferenceServerClient,
) -> None:
    params = {"op": "load", "model": "add_sub"}
    error = error_of(lambda: client.infer("bls_control", [], parameters=params))
    assert "explicit model load / unload is not allowed if polling is enabled" in error.message()
    params = {"op": "ready", "model": "add_sub"}
    assert client.infer("bls_control", [], parameters=params).as_numpy("READY").tolist() == [True]


def test_model_control_from_a_model_in_explicit_mode(tmp_path: Path) -> None:
    models = {"bls_control": TEST_MODELS / "bls_control", "add_sub": EXAMPLE_MODELS / "add_sub"}
    repository = make_repository(tmp_path, models)
    args = ("--model-control-mode", "explicit", "--load-model", "bls_control")
    with running_daemon(repository, tmp_path, *args, settle=["bls_control"]) as daemon:
        client = daemon.client()

        def control(op: str, model: str = "add_sub") -> list[bool]:
            params = {"op": op, "model": model}
            return client.infer("bls_control", [], parameters=params).as_numpy("READY").tolist()

        assert control("ready") == [False]
        assert control("load") == [True]
        assert client.is_model_ready("add_sub") is True
        np.testing.assert_array_equal(
            client.infer("add_sub", add_sub_inputs(A, B)).as_numpy("OUTPUT0"), A + B
        )
        assert control("unload") == [False]
        assert client.is_model_ready("add_sub") is False
        error = error_of(lambda: control("load", "not_in_repository"))
        assert "failed to load 'not_in_repository'" in error.message()


def test_callee_blocks_are_released_when_the_caller_drops_them(
    client: grpcclient.InferenceServerClient, daemon: Daemon
) -> None:
    data = np.ones((256, 1024), dtype=np.float32)  # 1 MiB: a held block would need a new one
    tensor = [infer_input("INPUT0", data, "FP32")]
    for _ in range(3):
        client.infer("bls_identity", tensor)
    segments = set(daemon.shm_segments())
    for _ in range(10):
        np.testing.assert_array_equal(
            client.infer("bls_identity", tensor).as_numpy("OUTPUT0"), data
        )
    assert set(daemon.shm_segments()) == segments


def test_the_callee_joins_the_callers_trace(tmp_path: Path) -> None:
    from inprocess import inprocess_daemon
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pbd.tracing.provider import Tracing
    from pbd.tracing.settings import TraceSettings, parse_trace_config

    models = {BLS: TEST_MODELS / BLS, "identity_fp32": EXAMPLE_MODELS / "identity_fp32"}
    repository = make_repository(tmp_path, models)
    exporter = InMemorySpanExporter()
    settings = TraceSettings(parse_trace_config(["level=TIMESTAMPS", "rate=1"]))
    tracing = Tracing(settings, SimpleSpanProcessor(exporter))
    prefix = f"pbdblstrace{os.getpid()}"
    with inprocess_daemon(repository, prefix, tracing, sorted(models)) as url:
        with grpcclient.InferenceServerClient(url) as client:
            data = np.arange(4, dtype=np.float32).reshape(1, 4)
            client.infer(BLS, [infer_input("INPUT0", data, "FP32")])

        def servers() -> dict[str, Any]:
            spans = exporter.get_finished_spans()
            return {s.name.rsplit("/", 1)[1]: s for s in spans if s.parent is None or "/" in s.name}

        def executes() -> list[Any]:
            return [s for s in exporter.get_finished_spans() if s.name == "execute"]

        wait_until(lambda: {"ModelInfer", "BLS"} <= set(servers()), 30, "both server spans")
        wait_until(lambda: len(executes()) == 2, 30, "both execute spans")
        caller, callee = servers()["ModelInfer"], servers()["BLS"]
        assert callee.context.trace_id == caller.context.trace_id
        assert callee.parent is not None
        assert callee.attributes is not None and callee.attributes["model.name"] == "identity_fp32"
        # The callee's execute span hangs under it, in the same trace.
        assert {s.context.trace_id for s in executes()} == {caller.context.trace_id}
