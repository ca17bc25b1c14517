"""The inputs as torch tensors through an nn.Module; its outputs back to numpy."""

import torch

import triton_python_backend_utils as pb_utils


class SumDiff(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class TritonPythonModel:
    def initialize(self, args):
        self.net = SumDiff().eval()

    def execute(self, requests):
        responses = []
        for request in requests:
            a, b = (
                torch.from_numpy(pb_utils.get_input_tensor_by_name(request, name).as_numpy())
                for name in ("INPUT0", "INPUT1")
            )
            with torch.no_grad():
                total, diff = self.net(a, b)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUTPUT0", total.numpy()),
                        pb_utils.Tensor("OUTPUT1", diff.numpy()),
                    ]
                )
            )
        return responses
