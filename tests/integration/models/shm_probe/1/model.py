"""Reads VALUE, says so (DIR/started), waits for DIR/go, reads VALUE again.

When VALUE lives in the client's shared memory and the client changes it in between, the two
reads differ: the model's input array is the client's memory, not a copy.
"""

import os
import time

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "VALUE").as_numpy()
            folder = pb_utils.get_input_tensor_by_name(request, "DIR").as_numpy()[0].decode()
            first = int(value[0])
            open(os.path.join(folder, "started"), "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(folder, "go")) and time.monotonic() < deadline:
                time.sleep(0.01)
            seen = np.array([first, int(value[0])], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]))
        return responses
