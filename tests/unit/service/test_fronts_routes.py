"""``pbd.fronts.routes``: which model versions the direct path may serve."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from config_samples import ADD_SUB, parse

from pbd.fronts.routes import refusal
from pbd.modelconfig.model import ModelConfig
from pbd.settings import Settings
from pbd.tracing.provider import Tracing
from pbd.tracing.settings import TraceConfig, TraceSetting, TraceSettings


@dataclass
class Policy:
    enabled: bool = False


@dataclass
class Runtime:
    """What ``refusal`` reads of a version runtime."""

    config: ModelConfig
    policy: Policy = field(default_factory=Policy)
    execute_timeout: float = 0.0


def why(text: str = "", settings: Settings | None = None, **changes: object) -> str:
    runtime = Runtime(parse(ADD_SUB + text, "add_sub"))
    for key, value in changes.items():
        setattr(runtime, key, value)
    return refusal(runtime, settings or Settings(), None)  # type: ignore[arg-type]


def test_a_plain_version_is_served_directly() -> None:
    assert why() == ""


def test_what_must_stay_one_keeps_a_version_on_the_daemons_path() -> None:
    # Dynamic batching: served directly (batches form in the worker) unless its settings
    # need the daemon's queue.
    assert why("max_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 4 ] }") == ""
    assert why("dynamic_batching { }") == "dynamic batching without max_batch_size"
    levels = "max_batch_size: 8\ndynamic_batching { priority_levels: 2 }"
    assert why(levels) == ""  # the worker serves higher levels first
    bounded = "max_batch_size: 8\ndynamic_batching { default_queue_policy { max_queue_size: 2 } }"
    assert why(bounded) == ""  # each worker bounds its share (pbd_worker.front_batcher)
    ordered = "max_batch_size: 8\ndynamic_batching { preserve_ordering: true }"
    assert why(ordered) == "dynamic batching with preserve_ordering"
    assert why("sequence_batching { }") == "sequence batching"
    assert why("model_transaction_policy { decoupled: true }") == ""  # streamed directly
    assert why(policy=Policy(enabled=True)) == ""  # counted through pbd.fronts.inflight
    # An execute() time limit: the worker says when it passes (Heartbeat.overdue_ms).
    assert why(execute_timeout=5.0) == ""
    assert why(settings=Settings(frontend_direct=False)) == "--frontend-direct is off"
    assert why(settings=Settings(max_queue_size=4)) == "--max-queue-size"
    # The first-response histogram: each front end observes its own requests.
    assert why(settings=Settings(metrics_histogram_latencies=True)) == ""
    # The response cache only when the daemon has one.
    assert why("response_cache { enable: true }") == ""
    cached = Settings(cache_local_size_bytes=1 << 20)
    assert why("response_cache { enable: true }", cached) == "the response cache"


def test_a_model_the_trace_settings_could_sample_is_not_served_directly() -> None:
    runtime = Runtime(parse(ADD_SUB, "add_sub"))
    off = Tracing(TraceSettings())
    assert refusal(runtime, Settings(), off) == ""  # type: ignore[arg-type]
    on = TraceSettings(TraceConfig(setting=TraceSetting(level=("TIMESTAMPS",), rate=1)))
    without_exporter = Tracing(on)
    assert refusal(runtime, Settings(), without_exporter) == ""  # type: ignore[arg-type]
    exporting = Tracing(on)
    exporting.processor = object()  # type: ignore[assignment]
    assert refusal(runtime, Settings(), exporting) == "traced"  # type: ignore[arg-type]
    assert replace(on.global_setting, level=()).level == ()
