"""Answers from a thread of its own per request, through the request's response sender, after
execute has returned; the last send carries only TRITONSERVER_RESPONSE_COMPLETE_FINAL.
finalize waits for the threads still sending."""

import json
import threading

import numpy as np

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("square_stream must be decoupled")
        self.threads = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            thread = threading.Thread(
                target=self._answer, args=(request.get_response_sender(), n), daemon=True
            )
            thread.start()
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        return None

    @staticmethod
    def _answer(sender, n):
        for _ in range(n):
            out = pb_utils.Tensor("OUT", np.array([n], np.int32))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=10)
