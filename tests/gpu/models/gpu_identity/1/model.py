"""Identity that keeps the tensor where it is: a GPU input goes back out as the same GPU
tensor (DLPack, no copy in the model); ON_CPU says where the input arrived."""

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            if tensor.is_cpu():
                out = pb_utils.Tensor("OUTPUT0", tensor.as_numpy())
            else:
                out = pb_utils.Tensor.from_dlpack("OUTPUT0", tensor.to_dlpack())
            on_cpu = pb_utils.Tensor("ON_CPU", np.array([tensor.is_cpu()], dtype=bool))
            responses.append(pb_utils.InferenceResponse([out, on_cpu]))
        return responses
