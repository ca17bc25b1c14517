"""The worker protocol's messages as an instance builds and reads them: the Initialize of a
model instance (Triton's initialize() arguments), a batch's Execute, and its ExecuteResult
turned into one result or error per request, with outputs as views into shared memory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

from pbd.errors import Code, PbdError, Rescheduled
from pbd.instances.error_log import ErrorBucket, log_failed_batch
from pbd.instances.memory import InstanceMemory
from pbd.instances.records import InstancePlan
from pbd.instances.streaming import InstanceStreams, json_params
from pbd.repository.backends import model_file
from pbd.repository.config import ModelConfig
from pbd.settings import Settings
from pbd.types import InferResult, OutputTensor, PreparedRequest, request_batch_size
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import Block, ShmExhausted


class ExecutingInstance(Protocol):
    """What building and reading an instance's messages uses of it
    (``pbd.instances.instance.Instance``, which imports this module)."""

    @property
    def config(self) -> ModelConfig: ...
    @property
    def version(self) -> int: ...
    @property
    def model_dir(self) -> Path: ...
    @property
    def plan(self) -> InstancePlan: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def memory(self) -> InstanceMemory: ...
    @property
    def streams(self) -> InstanceStreams: ...
    @property
    def error_bucket(self) -> ErrorBucket: ...
    def describe(self) -> str: ...
    def release_batch(
        self, batch_id: int, blocks: list[Block], worker_holds: bool = True
    ) -> None: ...


def execute_message(
    memory: InstanceMemory,
    batch_id: int,
    batch: list[PreparedRequest],
    request_ids: list[int],
    blocks: list[Block],
) -> wpb.DaemonToWorker:
    """The frame carrying the Execute of ``batch`` (built in place: protobuf copies a
    message given to a constructor): inputs copied into the instance's arena (their blocks
    added to ``blocks``), each traced request's input copy recorded. On failure the blocks are
    freed and a PbdError says why (RESOURCE_EXHAUSTED: no shared memory left)."""
    frame = wpb.DaemonToWorker()
    message = frame.execute
    message.batch_id = batch_id
    try:
        for request_id, prepared in zip(request_ids, batch, strict=True):
            trace = prepared.request.trace
            began = time.time_ns() if trace is not None else 0
            request = message.requests.add()
            memory.request_message(request_id, prepared, blocks, request)
            if trace is not None:
                request.traceparent = trace.input_copied(began, time.time_ns())
    except ShmExhausted as exc:
        memory.free(blocks)
        raise PbdError(Code.RESOURCE_EXHAUSTED, exc.message) from None
    except ValueError as exc:  # a value validation let through that protobuf refuses
        memory.free(blocks)
        raise PbdError(Code.INVALID_ARG, f"request cannot reach the model: {exc}") from None
    return frame


def initialize_message(instance: ExecutingInstance) -> wpb.Initialize:
    config, settings = instance.config, instance.settings
    path, backend_dir = model_file(
        config, instance.model_dir, instance.version, settings.backend_directory
    )
    args = {
        "model_config": config.to_json(),
        "model_instance_kind": instance.plan.kind,
        "model_instance_name": instance.plan.name,
        "model_instance_device_id": str(instance.plan.device_id),
        "model_repository": str(instance.model_dir),
        "model_version": str(instance.version),
        "model_name": config.name,
    }
    return wpb.Initialize(
        args=args,
        model_path=str(path),
        model_dir=str(instance.model_dir),
        version=str(instance.version),
        output_region_prefix=instance.memory.output_prefix,
        output_region_bytes=settings.shm_default_byte_size,
        heartbeat_interval_ms=settings.worker_heartbeat_ms,
        log_verbose=settings.log_verbose,
        shm_dir=str(settings.shm_dir),
        cancel_region=instance.memory.cancel.name,
        backend_dir=str(backend_dir or ""),
    )


def batch_results(
    instance: ExecutingInstance,
    batch: list[PreparedRequest],
    result: wpb.ExecuteResult,
    blocks: list[Block],
    request_ids: list[int],
) -> list[Any]:
    """One entry per request: an InferResult, a PbdError, or (answered later by the response
    sender) what ``instance.streams.resolve`` waits for."""
    responses = list(result.responses)
    if len(responses) == 1 and len(request_ids) == 1:
        by_id = {request_ids[0]: responses[0]} if responses[0].request_id == request_ids[0] else {}
    else:
        by_id = {r.request_id: r for r in responses}
    outstanding = 1  # held by this loop, so a stream that already ended cannot free early
    results: list[Any] = []
    # The worker keeps blocks for the batch only for outputs it wrote into its own arena
    # (not those written into a client's region, nor an input returned in place); a batch
    # with none needs no Release. Found out in the loop below, before anything is released.
    prefix = instance.memory.output_prefix
    worker_holds = len(by_id) != len(request_ids)  # a response for no request: be safe

    def release_one() -> None:
        nonlocal outstanding
        outstanding -= 1
        if outstanding == 0:
            instance.release_batch(result.batch_id, blocks, worker_holds)

    streams = instance.streams
    failed: wpb.Error | None = None
    for request_id, prepared in zip(request_ids, batch, strict=True):
        response = by_id.get(request_id)
        if response is None:
            results.append(streams.answered(
                request_id, PbdError(Code.INTERNAL, f"{instance.describe()} returned no response")
            ))  # fmt: skip
        elif response.rescheduled:
            worker_holds = True
            results.append(streams.rescheduled(request_id, instance.config.iterative_sequence))
        elif response.streamed:
            worker_holds = True
            outstanding += 1  # the batch's inputs stay until its final response
            results.append(streams.streamed(request_id, release_one))
        elif response.HasField("error"):
            # An output that failed after others were written into the arena leaves their
            # blocks held by the worker (the response carries none of them): tell it.
            worker_holds = True
            err = response.error
            if failed is None:
                failed = err
            error = PbdError(Code.parse(err.code), err.message)
            results.append(streams.answered(request_id, error))
        else:
            try:
                targets = prepared.output_targets
                outputs: list[OutputTensor] = []
                for ref in response.outputs:
                    outputs.append(instance.memory.output(ref, ref.name in targets))
                    if ref.region.startswith(prefix):
                        worker_holds = True
            except ValueError as exc:
                worker_holds = True
                error = PbdError(Code.INTERNAL, f"{instance.describe()}: {exc}")
                results.append(streams.answered(request_id, error))
                continue
            outstanding += 1
            results.append(streams.answered(request_id,
                InferResult(
                    model_name=instance.config.name,
                    model_version=str(instance.version),
                    id=prepared.request.id,
                    outputs=outputs,
                    parameters=json_params(response.parameters_json),
                    _release=release_one,
                )
            ))  # fmt: skip
    release_one()
    if failed is not None:
        log_failed_batch(instance.error_bucket, instance.describe(), failed)
    return results


def failed_share(
    batch: list[PreparedRequest], results: list[Any], config: ModelConfig
) -> tuple[int, int]:
    """(requests, batch rows) of ``batch`` that ``results`` answer with an error."""
    requests = rows = 0
    for prepared, result in zip(batch, results, strict=True):
        if isinstance(result, PbdError) and not isinstance(result, Rescheduled):
            requests += 1
            rows += request_batch_size(prepared, config.max_batch_size)
    return requests, rows
