"""The worker protocol's messages that start a model instance and carry its batches: the
Initialize of a model instance (Triton's initialize() arguments) and a batch's Execute. What the
ExecuteResult turns into is ``pbd.instance.inflight``'s."""

from __future__ import annotations

import time
from pathlib import Path

from pbd.errors import Code, PbdError
from pbd.instance.memory import InstanceMemory
from pbd.instance.records import InstancePlan
from pbd.modelconfig.backends import model_file
from pbd.modelconfig.model import ModelConfig
from pbd.settings import Settings
from pbd.types import PreparedRequest
from pbd.worker_client.describe import Held
from pbd_wire import worker_pb2 as wpb
from pbd_wire.shm import ShmExhausted


def execute_message(
    memory: InstanceMemory,
    batch_id: int,
    batch: list[PreparedRequest],
    request_ids: list[int],
    blocks: list[Held],
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


def initialize_message(
    config: ModelConfig,
    version: int,
    plan: InstancePlan,
    model_dir: Path,
    settings: Settings,
    memory: InstanceMemory,
) -> wpb.Initialize:
    path, backend_dir = model_file(config, model_dir, version, settings.backend_directory)
    args = {
        "model_config": config.to_json(),
        "model_instance_kind": plan.kind,
        "model_instance_name": plan.name,
        "model_instance_device_id": str(plan.device_id),
        "model_repository": str(model_dir),
        "model_version": str(version),
        "model_name": config.name,
    }
    return wpb.Initialize(
        args=args,
        model_path=str(path),
        model_dir=str(model_dir),
        version=str(version),
        output_region_prefix=memory.output_prefix,
        output_region_bytes=settings.shm_default_byte_size,
        heartbeat_interval_ms=settings.worker_heartbeat_ms,
        log_verbose=settings.log_verbose,
        shm_dir=str(settings.shm_dir),
        cancel_region=memory.cancel.name,
        backend_dir=str(backend_dir or ""),
    )
