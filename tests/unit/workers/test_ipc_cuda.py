"""The worker's CUDA side without a GPU: placement of CUDA inputs (Triton's parameter), and a
request naming a CUDA region in a worker without CuPy failing that request, not the worker.
The real IPC path runs where a GPU is: tests/gpu/test_cuda_shm.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import triton_python_backend_utils as pb_utils
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cuda import gpu_inputs
from pbd_wire.shm import Arena, SegmentMap
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.executor import BatchExecutor
from pbd_worker.ipc.daemon_link import DaemonLink

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _args(kind: str, value: str | None) -> dict[str, str]:
    params = {} if value is None else {"FORCE_CPU_ONLY_INPUT_TENSORS": {"string_value": value}}
    return {"model_instance_kind": kind, "model_config": json.dumps({"parameters": params})}


def test_gpu_inputs_follow_force_cpu_only_input_tensors() -> None:
    assert gpu_inputs(_args("GPU", "no")) is True
    assert gpu_inputs(_args("GPU", "yes")) is False
    assert gpu_inputs(_args("GPU", None)) is False  # Triton's default: "yes"
    assert gpu_inputs(_args("CPU", "no")) is False  # a CPU instance takes host tensors
    with pytest.raises(ValueError, match="can only be 'yes' or 'no'"):
        gpu_inputs(_args("GPU", "maybe"))


class _Identity:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "IN")])
            for r in requests
        ]


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed here")
def test_cuda_input_without_cupy_fails_the_request(tmp_path: Path) -> None:
    aio = WorkerLoop(DaemonLink("@unused", lambda: None))
    arena = Arena("pbdtest-cuda-w", 4096, 4096)
    try:
        executor = BatchExecutor(
            _Identity(),
            instance_name="m_0",
            model_name="m",
            model_version=1,
            inputs=SegmentMap(str(tmp_path)),
            outputs=arena,
            aio=aio,
        )
        ref = wpb.TensorRef(name="IN", datatype="FP32", shape=[4], offset=0, nbytes=16)
        ref.cuda.device_id, ref.cuda.ipc_handle, ref.cuda.generation = 0, b"\1" * 64, 1
        execute = wpb.Execute(batch_id=1, requests=[wpb.Request(request_id=7, inputs=[ref])])
        result = executor.run(execute)
        (response,) = result.responses
        assert response.request_id == 7
        assert response.error.code == "UNSUPPORTED"
        assert "has no CuPy" in response.error.message
        # The worker goes on serving host-memory requests.
        segment = arena.allocate(16)
        np.frombuffer(segment.view(), np.float32)[:] = [1, 2, 3, 4]
        host = wpb.TensorRef(
            name="IN", datatype="FP32", shape=[4], region=segment.segment.name,
            offset=segment.offset, nbytes=16,
        )  # fmt: skip
        executor.inputs = SegmentMap(str(tmp_path))
        ok = executor.run(
            wpb.Execute(batch_id=2, requests=[wpb.Request(request_id=8, inputs=[host])])
        )
        assert not ok.responses[0].HasField("error")
        assert ok.responses[0].outputs[0].nbytes == 16
    finally:
        arena.close()
        aio.loop.close()
