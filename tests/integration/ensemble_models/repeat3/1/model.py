"""Decoupled: three responses, Y = X + 0, X + 1, X + 2, then the final flag alone."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            for i in range(3):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + i)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
