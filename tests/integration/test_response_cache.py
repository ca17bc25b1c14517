"""The response cache (``response_cache { enable: true }`` with a cache on the server), with
real tritonclient (gRPC and HTTP) and a Prometheus scrape.

Compared with Triton 2.51 on the same models (``counter``: Y = X + executions so far): a
repeated request is answered without executing, the statistics count it as Triton does (a
success and a cache hit, no inference, no execution), the ``nv_cache_*`` families carry
Triton's names, an ensemble's top-level cache answers without running its steps. Where Triton
keys on the inputs only (so a request for other outputs or with other parameters gets the
first one's response), pbd keys on what the model sees.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from pbd_harness import Daemon, DaemonFactory, infer_input, make_repository
from test_metrics import labels, scrape

MODELS = Path(__file__).resolve().parent / "cache_models"
CACHE_BYTES = 4096  # about 30 small answers


def repository(tmp_path: Path) -> Path:
    return make_repository(tmp_path, {p.name: p for p in MODELS.iterdir() if p.is_dir()})


def counter(
    client: grpcclient.InferenceServerClient,
    x: np.ndarray,
    model: str = "counter",
    outputs: tuple[str, ...] = (),
    k: int | None = None,
) -> dict[str, np.ndarray]:
    name = "IN" if model == "counter_pipeline" else "X"
    result = client.infer(
        model,
        [infer_input(name, x, "FP32")],
        outputs=[grpcclient.InferRequestedOutput(n) for n in outputs] or None,
        parameters=None if k is None else {"k": k},
    )
    response = result.get_response()
    return {out.name: result.as_numpy(out.name) for out in response.outputs}


def stats_of(client: grpcclient.InferenceServerClient, model: str) -> dict[str, object]:
    (stats,) = client.get_inference_statistics(model, as_json=True)["model_stats"]
    return dict(stats)


def cached_daemon(start_daemon: DaemonFactory, tmp_path: Path) -> Daemon:
    """Every model of cache_models, with a cache of CACHE_BYTES on the server."""
    names = [p.name for p in MODELS.iterdir() if p.is_dir()]
    return start_daemon(
        repository(tmp_path), "--cache-local-size-bytes", str(CACHE_BYTES), settle=names
    )


def test_repeated_requests_are_answered_from_the_cache(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = cached_daemon(start_daemon, tmp_path)
    client = daemon.client()
    x = np.arange(4, dtype=np.float32)
    first = counter(client, x)
    assert first["Y"].tolist() == [1, 2, 3, 4]
    for _ in range(3):  # answered from the cache: the model would have added 2, 3, 4
        assert counter(client, x)["Y"].tolist() == [1, 2, 3, 4]
    assert counter(client, x + 10)["Y"].tolist() == [12, 13, 14, 15]  # other bytes: it ran

    stats = stats_of(client, "counter")
    infer = stats["inference_stats"]
    assert isinstance(infer, dict)
    assert (int(infer["cache_hit"]["count"]), int(infer["cache_miss"]["count"])) == (3, 2)
    assert int(infer["success"]["count"]) == 5 and int(infer["queue"]["count"]) == 5
    assert int(infer["compute_infer"]["count"]) == 2
    assert (int(stats["inference_count"]), int(stats["execution_count"])) == (2, 2)
    assert int(infer["cache_hit"]["ns"]) > 0 and int(infer["cache_miss"]["ns"]) > 0

    # Triton answers these two from the cache too, with the first request's outputs and Z.
    only_z = counter(client, x, outputs=("Z",))
    assert list(only_z) == ["Z"]
    assert counter(client, x, k=5)["Z"].tolist() == [5, 5, 5, 5]

    http = httpclient.InferenceServerClient(daemon.http_url)
    (over_http,) = http.get_inference_statistics("counter")["model_stats"]
    assert over_http["inference_stats"]["cache_hit"]["count"] == 3

    _, samples = scrape(daemon.metrics_url)
    model = labels(model="counter", version="1")
    assert samples[("nv_cache_num_hits_per_model", model)] == 3
    assert samples[("nv_cache_num_misses_per_model", model)] == 4
    assert ("nv_cache_num_hits_per_model", labels(model="counter_plain", version="1")) not in (
        samples
    )
    assert samples[("nv_cache_num_entries", ())] == 4
    assert samples[("nv_cache_num_lookups", ())] == 7
    assert 0 < samples[("nv_cache_util", ())] < 1


def test_an_ensemble_and_a_bls_call_are_answered_from_the_cache(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = cached_daemon(start_daemon, tmp_path)
    client = daemon.client()
    x = np.zeros(4, dtype=np.float32)
    for _ in range(3):  # the step (no cache of its own) runs once
        assert counter(client, x, "counter_pipeline")["OUT"].tolist() == [1, 1, 1, 1]
    pipeline = stats_of(client, "counter_pipeline")["inference_stats"]
    assert isinstance(pipeline, dict)
    assert (int(pipeline["cache_hit"]["count"]), int(pipeline["cache_miss"]["count"])) == (2, 1)
    assert int(stats_of(client, "counter_plain")["execution_count"]) == 1

    # The second BLS call is a hit: its outputs are copied into the caller's shared memory.
    both = counter(client, x, "bls_counter")
    assert both["FIRST"].tolist() == both["SECOND"].tolist() == [1, 1, 1, 1]
    assert int(stats_of(client, "counter")["execution_count"]) == 1


def test_the_cache_is_bounded_least_recently_used_first(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = cached_daemon(start_daemon, tmp_path)
    client = daemon.client()
    big = np.zeros(1024, dtype=np.float32)  # its answer (8 KiB) is bigger than the cache
    counter(client, big)
    assert counter(client, big)["Y"][0] == 2  # not kept: it ran again
    for n in range(40):  # about 30 fit: the oldest leave
        counter(client, np.full(4, n, np.float32))
    _, samples = scrape(daemon.metrics_url)
    assert samples[("nv_cache_num_evictions", ())] > 0
    assert samples[("nv_cache_num_entries", ())] < 40
    executions = int(stats_of(client, "counter")["execution_count"])
    counter(client, np.full(4, 0, np.float32))  # the first of the 40 was evicted
    assert int(stats_of(client, "counter")["execution_count"]) == executions + 1
    counter(client, np.full(4, 39, np.float32))  # the last is still there
    assert int(stats_of(client, "counter")["execution_count"]) == executions + 1


def test_without_a_cache_on_the_server_every_request_runs(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    daemon = start_daemon(repository(tmp_path), settle=["counter"])
    client = daemon.client()
    x = np.arange(4, dtype=np.float32)
    assert [counter(client, x)["Y"][0] for _ in range(2)] == [1, 2]
    text, samples = scrape(daemon.metrics_url)
    # As Triton: the model's families are there (zero), the cache-wide ones are not.
    assert samples[("nv_cache_num_hits_per_model", labels(model="counter", version="1"))] == 0
    assert "nv_cache_util" not in text


@pytest.mark.parametrize(
    "cache_flag",
    [f"--cache-config=local,size={CACHE_BYTES}", f"--response-cache-byte-size={CACHE_BYTES}"],
)
def test_tritons_cache_and_metrics_flags(
    start_daemon: DaemonFactory, tmp_path: Path, cache_flag: str
) -> None:
    """Triton's spellings: the local cache's size is the server's cache; with
    counter_latencies=false the per-model cache families go, as in Triton 2.51 (its latency
    counters); histogram_latencies=true serves the first-response histogram."""
    daemon = start_daemon(
        repository(tmp_path),
        cache_flag,
        "--metrics-config=counter_latencies=false",
        "--metrics-config=histogram_latencies=true",
        settle=["counter"],
    )
    client = daemon.client()
    x = np.arange(4, dtype=np.float32)
    assert [counter(client, x)["Y"][0] for _ in range(3)] == [1, 1, 1]  # ran once
    text, samples = scrape(daemon.metrics_url)
    assert samples[("nv_cache_num_hits", ())] == 2
    assert 0 < samples[("nv_cache_util", ())] < 1  # of CACHE_BYTES
    assert "nv_cache_num_hits_per_model" not in text and "_duration_us" not in text
    model = labels(model="counter", version="1")
    assert samples[("nv_inference_first_response_histogram_ms_count", model)] == 3
