"""Writes b"PBD!" over the first bytes of its GPU input, in place: the client sees it in its
own CUDA region afterwards only if the model's input *is* the client's memory."""

import cupy
import numpy as np

import triton_python_backend_utils as pb_utils

MARKER = np.frombuffer(b"PBD!", dtype=np.uint8)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor.is_cpu():
                raise pb_utils.TritonModelException("expected a GPU input")
            array = cupy.from_dlpack(tensor.to_dlpack())
            array.data.copy_from_host(MARKER.ctypes.data, MARKER.nbytes)
            cupy.cuda.runtime.deviceSynchronize()
            done = pb_utils.Tensor("DONE", np.array([1], dtype=np.int32))
            responses.append(pb_utils.InferenceResponse([done]))
        return responses
