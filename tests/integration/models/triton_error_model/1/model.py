"""Answers with a TritonError response whose code is chosen by the MODE input."""

import triton_python_backend_utils as pb_utils


def _error_for(mode):
    if mode == 0:
        return pb_utils.TritonError("bad thing", pb_utils.TritonError.NOT_FOUND)
    if mode == 1:
        return pb_utils.TritonError("x")
    if mode == 2:
        return pb_utils.TritonError("come back later", pb_utils.TritonError.UNAVAILABLE)
    if mode == 3:
        return pb_utils.TritonError("wrong argument", pb_utils.TritonError.INVALID_ARG)
    if mode == 4:
        return pb_utils.TritonError("not supported here", pb_utils.TritonError.UNSUPPORTED)
    return None


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()
            error = _error_for(int(mode[0]))
            if error is None:
                responses.append(
                    pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", mode)])
                )
            else:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses
