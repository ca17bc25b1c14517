"""Ensembles (``platform: "ensemble"``) served to the real tritonclient.

One daemon, in the test process so its spans can be read, in explicit model-control mode:
loading an ensemble loads its step models, as Triton does. The models are in
``ensemble_models/``: add_one, identity, two branches that each wait for the other (so the
fan-out test proves they run at the same time), join, and a decoupled repeat3; the
ensembles chain them. Messages were compared with Triton 2.51's.
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from inprocess import inprocess_daemon
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pbd_harness import error_of, infer_input, make_repository, wait_until

from pbd.tracing.provider import Tracing
from pbd.tracing.settings import TraceSettings, parse_trace_config

MODELS = Path(__file__).resolve().parent / "ensemble_models"
LOADED = ["pipeline", "fan", "nested", "repeat_pipeline"]
X = np.arange(4, dtype=np.float32)


class Served:
    def __init__(self, url: str, exporter: InMemorySpanExporter) -> None:
        self.url = url
        self.exporter = exporter

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.url)

    def infer(self, model: str, **kwargs: Any) -> np.ndarray:
        with self.client() as client:
            result = client.infer(model, [infer_input("IN", X, "FP32")], **kwargs)
            return result.as_numpy("OUT")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp("ensembles")
    names = [p.name for p in MODELS.iterdir() if p.is_dir()]
    repository = make_repository(workdir, {name: MODELS / name for name in names})
    exporter = InMemorySpanExporter()
    # Sampled only where a test asks (trace settings of the ensemble): rate 0 elsewhere.
    config = parse_trace_config(["level=TIMESTAMPS", "rate=0"])
    tracing = Tracing(TraceSettings(config), SimpleSpanProcessor(exporter))
    with inprocess_daemon(
        repository,
        f"pbdens{os.getpid()}",
        tracing,
        LOADED,
        model_control_mode="explicit",
        load_model=LOADED,
        allow_client_shm=True,
    ) as url:
        yield Served(url, exporter)


def test_a_two_step_pipeline_passes_a_tensor_from_step_to_step(served: Served) -> None:
    np.testing.assert_array_equal(served.infer("pipeline"), X + 1)
    with served.client() as client:
        metadata = client.get_model_metadata("pipeline", as_json=True)
        config = client.get_model_config("pipeline", as_json=True)["config"]
        assert client.is_model_ready("add_one") and client.is_model_ready("identity")
    assert metadata["platform"] == "ensemble"
    assert [i["name"] for i in metadata["inputs"]] == ["IN"]
    assert [o["name"] for o in metadata["outputs"]] == ["OUT"]
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["add_one", "identity"]


def test_shared_memory_in_and_out_of_an_ensemble(served: Served) -> None:
    """The input is read by add_one's worker in the client's region; identity's worker
    writes the output into the client's region."""
    key = f"pbdens{os.getpid()}"
    regions = [shm.create_shared_memory_region(n, f"/{key}{n}", X.nbytes) for n in ("i", "o")]
    try:
        shm.set_shared_memory_region(regions[0], [X])
        with served.client() as client:
            client.register_system_shared_memory("ens_in", f"/{key}i", X.nbytes)
            client.register_system_shared_memory("ens_out", f"/{key}o", X.nbytes)
            tensor = grpcclient.InferInput("IN", [4], "FP32")
            tensor.set_shared_memory("ens_in", X.nbytes)
            wanted = grpcclient.InferRequestedOutput("OUT")
            wanted.set_shared_memory("ens_out", X.nbytes)
            client.infer("pipeline", [tensor], outputs=[wanted])
            client.unregister_system_shared_memory()
        out = shm.get_contents_as_numpy(regions[1], np.float32, [4])
        np.testing.assert_array_equal(out, X + 1)
    finally:
        for region in regions:
            shm.destroy_shared_memory_region(region)


def test_independent_steps_run_at_once_and_fan_in(served: Served, tmp_path: Path) -> None:
    out = served.infer("fan", parameters={"marks": str(tmp_path)})
    np.testing.assert_array_equal(out, 2 * X + 3 * X)
    assert sorted(os.listdir(tmp_path)) == ["branch_a", "branch_b"]


def test_an_ensemble_runs_as_a_step_of_another(served: Served) -> None:
    np.testing.assert_array_equal(served.infer("nested"), X + 2)


def test_each_response_of_a_decoupled_step_runs_the_steps_after_it(served: Served) -> None:
    with served.client() as client:
        config = client.get_model_config("repeat_pipeline", as_json=True)["config"]
        refused = error_of(lambda: client.infer("repeat_pipeline", [infer_input("IN", X, "FP32")]))
    assert config["model_transaction_policy"] == {"decoupled": True}
    assert refused.status() == "StatusCode.UNIMPLEMENTED"
    assert "doesn't support models with decoupled transaction policy" in refused.message()
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with served.client() as client:
        client.start_stream(lambda result, error: answers.put((result, error)))
        client.async_stream_infer("repeat_pipeline", [infer_input("IN", X, "FP32")])
        got = [answers.get(timeout=60) for _ in range(3)]
        client.stop_stream()
    assert [error for _, error in got] == [None, None, None]
    outs = sorted(tuple(r.as_numpy("OUT")) for r, _ in got)
    assert outs == [tuple(X + 1), tuple(X + 2), tuple(X + 3)]
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r, _ in got]
    assert finals == [False, False, True]  # Triton's: the flag rides on the last answer


def _successes(client: grpcclient.InferenceServerClient, model: str) -> int:
    stats = client.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return int(stats["inference_stats"]["success"].get("count", 0))


def test_the_ensemble_and_its_steps_count_their_requests(served: Served) -> None:
    with served.client() as client:
        before = {m: _successes(client, m) for m in ("pipeline", "add_one", "identity")}
        for _ in range(3):
            client.infer("pipeline", [infer_input("IN", X, "FP32")])
        after = {m: _successes(client, m) for m in before}
        stats = client.get_inference_statistics("pipeline", as_json=True)["model_stats"][0]
    assert {m: after[m] - before[m] for m in after} == {"pipeline": 3, "add_one": 3, "identity": 3}
    assert int(stats["execution_count"]) >= 3 and int(stats["inference_count"]) >= 3


def test_one_trace_holds_the_ensemble_and_its_steps(served: Served) -> None:
    with served.client() as client:
        client.update_trace_settings(model_name="pipeline", settings={"trace_rate": "1"})
    served.exporter.clear()
    try:
        served.infer("pipeline")
        wait_until(
            lambda: sum(s.name == "execute" for s in served.exporter.get_finished_spans()) >= 2,
            30,
            "the steps' worker spans",
        )
    finally:
        with served.client() as client:
            client.update_trace_settings(model_name="pipeline", settings={"trace_rate": None})
    spans = list(served.exporter.get_finished_spans())
    assert len({s.context.trace_id for s in spans}) == 1
    servers = {s.attributes["model.name"]: s for s in spans if s.attributes.get("model.name")}
    root = servers["pipeline"]
    assert root.parent is None
    for step in ("add_one", "identity"):
        assert servers[step].parent is not None
        assert servers[step].parent.span_id == root.context.span_id


@pytest.mark.parametrize(
    ("model", "code", "message"),
    [
        (  # Triton 2.51, word for word after pbd's prefix
            "unknown_step",
            "StatusCode.INVALID_ARGUMENT",
            "ensemble unknown_step contains models that are not available or ambiguous: nosuch",
        ),
        (
            "wrong_type",
            "StatusCode.INVALID_ARGUMENT",
            "in ensemble wrong_type, ensemble tensor IN: inconsistent data type: TYPE_INT32 is "
            "inferred from model wrong_type while TYPE_FP32 is inferred from model add_one",
        ),
        (
            "never_written",
            "StatusCode.INVALID_ARGUMENT",
            "ensemble output 'OUT' for ensemble never_written' is not used",
        ),
    ],
)
def test_a_wrong_ensemble_fails_to_load_with_tritons_words(
    served: Served, model: str, code: str, message: str
) -> None:
    with served.client() as client:
        error = error_of(lambda: client.load_model(model))
        ready = client.is_model_ready(model)
    assert error.status() == code
    assert message in error.message()
    assert not ready


def test_unloading_a_step_model_unloads_the_ensembles_using_it(served: Served) -> None:
    with served.client() as client:
        client.unload_model("identity")
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert not client.is_model_ready("pipeline") and not client.is_model_ready("nested")
        assert index["pipeline"]["reason"] == "unloaded"
        assert client.is_model_ready("add_one")  # used by them, not using them: stays
        client.load_model("nested")  # loads pipeline, which loads identity again
        assert client.is_model_ready("pipeline") and client.is_model_ready("identity")
    np.testing.assert_array_equal(served.infer("nested"), X + 2)
