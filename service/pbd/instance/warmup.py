"""``model_warmup``: the config's samples run through each instance before it takes requests.

As Triton 2.51 does it (``TritonModelInstance::GenerateWarmupData`` and ``WarmUp``): each
sample with a ``batch_size`` becomes that many requests of one row each (no batch dimension for
a model without batching), executed together as one batch, ``count`` times (at least once). An
input's data is zeros (``zero_data``), random bytes (``random_data``; empty strings for BYTES)
or ``<model>/warmup/<input_data_file>`` (its first bytes, or the whole file for BYTES, which
must be serialized as the protocol serializes BYTES). The requests are checked as a client's
would be; inputs the config does not declare are passed on as given. A response with an error
fails the load with Triton's message, ``failed to run warmup sample '<name>': <error>; ...``;
the data is made and the requests checked before the worker starts, so a missing file, a
variable dimension or a request the model would refuse fails before ``initialize()`` runs,
with the message alone. Warmup requests count in the model's statistics, as Triton's do.

Better than Triton: one sample may take at most ``--model-init-timeout-secs`` (Triton waits
forever for a model that never answers its warmup request).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pbd.errors import Code, PbdError, invalid_arg
from pbd.instance.inflight import InFlightBatches
from pbd.instance.records import InstancePlan
from pbd.modelconfig.model import ModelConfig
from pbd.responses import ResponseStream
from pbd.settings import Settings
from pbd.stats import failure_reason
from pbd.types import (
    InferRequest,
    InferResult,
    InputTensor,
    PreparedInput,
    PreparedRequest,
    batch_rows,
)
from pbd.validation import prepare_request
from pbd_wire import dtypes

WARMUP_DIR = "warmup"  # Triton's kWarmupDataFolder, in the model's directory
_BY_CONFIG_NAME = {d.config_name: d for d in dtypes.ALL}
_LOG_ID = "[request id: <id_unknown>] "  # how Triton names a warmup request in its errors


@dataclass(frozen=True)
class WarmupInput:
    name: str
    datatype: str  # protocol string ("INVALID" for a type the config leaves unset)
    shape: tuple[int, ...]  # with the batch dimension of 1 when the model batches
    data: bytes


@dataclass(frozen=True)
class WarmupSample:
    name: str
    batch_size: int  # requests executed together
    count: int  # times the batch runs
    inputs: tuple[WarmupInput, ...]


class WarmingInstance(Protocol):
    """What warming up uses of an instance (``pbd.instance.instance.Instance``)."""

    @property
    def config(self) -> ModelConfig: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def plan(self) -> InstancePlan: ...
    @property
    def batches(self) -> InFlightBatches: ...  # its room, and the version's statistics

    async def execute(
        self, batch: list[PreparedRequest], in_order: bool = True
    ) -> list[InferResult | PbdError]: ...


def warmup_samples(config: ModelConfig, model_dir: Path) -> list[WarmupSample]:
    """The config's samples with their data; PbdError (Triton's message) for one that cannot
    be made. Samples with ``batch_size`` 0 are skipped, as in Triton."""
    batching = config.max_batch_size > 0
    samples = []
    for setting in config.as_dict.get("model_warmup", []):
        batch_size = int(setting.get("batch_size", 0))
        if batch_size == 0:
            continue
        inputs = tuple(
            _input(name, spec, batching, model_dir)
            for name, spec in setting.get("inputs", {}).items()
        )
        count = max(int(setting.get("count", 0)), 1)
        sample = WarmupSample(setting.get("name", ""), batch_size, count, inputs)
        _prepare(sample, config)  # checked as a client's request, as Triton checks it here
        samples.append(sample)
    return samples


def _input(name: str, spec: Mapping[str, Any], batching: bool, model_dir: Path) -> WarmupInput:
    datatype = _BY_CONFIG_NAME.get(spec.get("data_type", ""))
    dims = tuple(int(d) for d in spec.get("dims", []))
    if any(d < 0 for d in dims):
        raise invalid_arg(
            f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )
    is_bytes = datatype is not None and datatype.is_bytes
    itemsize = 4 if datatype is None or is_bytes else datatype.itemsize  # BYTES: 4-byte lengths
    nbytes = math.prod(dims) * itemsize
    if "zero_data" in spec or ("random_data" in spec and is_bytes):
        data = bytes(nbytes)  # BYTES elements of length 0: empty strings
    elif "random_data" in spec:
        data = random.randbytes(nbytes)
    elif "input_data_file" in spec:
        data = _file_data(model_dir, spec["input_data_file"], nbytes, is_bytes)
    else:
        raise invalid_arg(
            f"{_LOG_ID}warmup setting expects input '{name}' to have input_data_type set"
        )
    shape = (1, *dims) if batching else dims
    return WarmupInput(name, datatype.name if datatype else "INVALID", shape, data)


def _file_data(model_dir: Path, filename: str, nbytes: int, is_bytes: bool) -> bytes:
    path = model_dir / WARMUP_DIR / filename
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PbdError(
            Code.INTERNAL, f"failed to open text file for read {path}: {exc.strerror}"
        ) from None
    if is_bytes:
        return data  # already serialized, one 4-byte length before each element
    if len(data) < nbytes:
        # Triton's message, its missing space included.
        raise invalid_arg(
            f"{_LOG_ID}warmup setting expects {nbytes} bytes, but the data provided from "
            f"{filename}only has {len(data)} bytes"
        )
    return data[:nbytes]


async def warm_up(instance: WarmingInstance, samples: list[WarmupSample]) -> None:
    """Run every sample through ``instance``, in order; PbdError(INVALID_ARG) with Triton's
    message at the first sample a response fails."""
    timeout = instance.settings.model_init_timeout_secs
    for sample in samples:
        for _ in range(sample.count):
            try:
                errors = await asyncio.wait_for(_run(instance, sample), timeout)
            except TimeoutError:
                errors = [f"did not finish within {timeout:g}s (--model-init-timeout-secs)"]
            if errors:
                failed = "".join(f"{e}; " for e in errors)
                raise invalid_arg(f"failed to run warmup sample '{sample.name}': {failed}")


async def _run(instance: WarmingInstance, sample: WarmupSample) -> list[str]:
    """One execution of ``sample``: the messages of the responses that failed."""
    config = instance.config
    began = time.perf_counter_ns()
    batch = [_prepare(sample, config) for _ in range(sample.batch_size)]
    limit = _batch_limit_error(batch, config, instance.plan.name)
    if limit:  # Triton's python backend refuses the whole batch
        return [limit] * len(batch)
    if config.decoupled:
        for prepared in batch:
            prepared.stream = ResponseStream()
    instance.batches.inflight += 1  # the room the dispatch takes for a batch it hands over
    outcomes = await instance.execute(batch, in_order=True)
    stats = instance.batches.stats
    errors = []
    for prepared, outcome in zip(batch, outcomes, strict=True):
        failures = [outcome] if isinstance(outcome, PbdError) else []
        if isinstance(outcome, InferResult):
            outcome.release()
        if isinstance(prepared.stream, ResponseStream):
            failures += [e async for e in _stream_errors(prepared.stream)]
        ns = time.perf_counter_ns() - began
        stats.queue.add(0)
        if failures:
            stats.failed(ns, failure_reason(failures[0]))
        else:
            stats.success.add(ns)
        errors += [f.message for f in failures]
    return errors


async def _stream_errors(stream: ResponseStream) -> AsyncIterator[PbdError]:
    """The errors among a decoupled request's responses, up to its final flag."""
    async for item in stream:
        if item.result is not None:
            item.result.release()
        if item.error is not None:
            yield item.error
    stream.close()


def _prepare(sample: WarmupSample, config: ModelConfig) -> PreparedRequest:
    """One request of ``sample``, checked as a client's; undeclared inputs passed on as is."""
    declared = [i for i in sample.inputs if config.input(i.name) is not None]
    request = InferRequest(config.name, "", "", [_tensor(i) for i in declared])
    prepared = prepare_request(request, config)
    for extra in sample.inputs:
        if config.input(extra.name) is None:
            view = memoryview(extra.data)
            prepared.inputs.append(PreparedInput(extra.name, extra.datatype, extra.shape, view))
    return prepared


def _tensor(warmup_input: WarmupInput) -> InputTensor:
    data = memoryview(warmup_input.data)
    return InputTensor(warmup_input.name, warmup_input.datatype, warmup_input.shape, data)


def _batch_limit_error(batch: list[PreparedRequest], config: ModelConfig, name: str) -> str:
    """Triton's python backend's check of a batch's size (the scheduler never makes one too
    large, but a warmup sample can ask for one)."""
    total = batch_rows(batch, config.max_batch_size)
    if total != 1 and total > config.max_batch_size:
        return f"batch size {total} for '{name}', max allowed is {config.max_batch_size}"
    return ""
