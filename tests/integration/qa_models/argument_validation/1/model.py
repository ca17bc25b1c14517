"""What pb_utils raises for bad arguments (Triton's argument_validation QA), case by case."""

import numpy as np

import triton_python_backend_utils as pb_utils

ARRAY = np.asarray([1, 2], dtype=np.int32)
NAMES = ["my_output"]


def cases():
    """The cases, made when execute() runs (Triton's pb_utils has no Tensor at import)."""
    inputs = [pb_utils.Tensor("INPUT0", ARRAY)]
    log = pb_utils.Logger
    return {
        "request inputs=[None]": lambda: pb_utils.InferenceRequest(
            inputs=[None], model_name="m", requested_output_names=NAMES
        ),
        "request inputs=None": lambda: pb_utils.InferenceRequest(
            inputs=None, model_name="m", requested_output_names=NAMES
        ),
        "request model_name=None": lambda: pb_utils.InferenceRequest(
            model_name=None, inputs=inputs, requested_output_names=NAMES
        ),
        "request no model_name": lambda: pb_utils.InferenceRequest(
            inputs=inputs, requested_output_names=NAMES
        ),
        "request no inputs": lambda: pb_utils.InferenceRequest(
            model_name="m", requested_output_names=NAMES
        ),
        "request no requested_output_names": lambda: pb_utils.InferenceRequest(
            model_name="m", inputs=inputs
        ),
        "request requested_output_names=[None]": lambda: pb_utils.InferenceRequest(
            requested_output_names=[None], inputs=inputs, model_name="m"
        ),
        "request requested_output_names=None": lambda: pb_utils.InferenceRequest(
            requested_output_names=None, inputs=inputs, model_name="m"
        ),
        "request correlation_id=None": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name="m", correlation_id=None
        ),
        "request request_id=None": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name="m", request_id=None
        ),
        "request model_version=None": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name="m", model_version=None
        ),
        "request flags=None": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name="m", flags=None
        ),
        "request empty lists": lambda: pb_utils.InferenceRequest(
            requested_output_names=[], inputs=[], model_name="m"
        ),
        "response output_tensors=[None]": lambda: pb_utils.InferenceResponse(output_tensors=[None]),
        "response output_tensors=None": lambda: pb_utils.InferenceResponse(output_tensors=None),
        "response output_tensors=[]": lambda: pb_utils.InferenceResponse(output_tensors=[]),
        "tensor name=None": lambda: pb_utils.Tensor(None, ARRAY),
        "tensor array=None": lambda: pb_utils.Tensor("OUTPUT0", None),
        "tensor name='' array=None": lambda: pb_utils.Tensor("", None),
        "from_dlpack capsule=None": lambda: pb_utils.Tensor.from_dlpack("OUTPUT0", None),
        "from_dlpack name='' capsule=None": lambda: pb_utils.Tensor.from_dlpack("", None),
        "log level=None": lambda: log.log("Invalid Level", None),
        "log level=1": lambda: log.log("Invalid Level", 1),
        "log level=Invalid Level": lambda: log.log("message", "Invalid Level"),
        "log_info(None)": lambda: log.log_info(None),
        "log_warn(None)": lambda: log.log_warn(None),
        "log_error(None)": lambda: log.log_error(None),
        "log_verbose(None)": lambda: log.log_verbose(None),
        "log without level": lambda: log.log("Level unspecified"),
        "log level=Logger.WARNING": lambda: log.log("message", log.WARNING),
        "log_info(123)": lambda: log.log_info(123),
        "request inputs=[ndarray]": lambda: pb_utils.InferenceRequest(
            inputs=[ARRAY], model_name="m", requested_output_names=NAMES
        ),
        "request inputs=tuple": lambda: pb_utils.InferenceRequest(
            inputs=tuple(inputs), model_name="m", requested_output_names=NAMES
        ),
        "request correlation_id=1.5": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name="m", correlation_id=1.5
        ),
        "request model_name=b'm'": lambda: pb_utils.InferenceRequest(
            requested_output_names=NAMES, inputs=inputs, model_name=b"m"
        ),
        "response error only": lambda: pb_utils.InferenceResponse(
            error=pb_utils.TritonError("failed")
        ),
        "response output_tensors=[ndarray]": lambda: pb_utils.InferenceResponse([ARRAY]),
        "tensor name=''": lambda: pb_utils.Tensor("", ARRAY),
        "tensor array=list": lambda: pb_utils.Tensor("OUTPUT0", [1, 2]),
    }


def _raised(case):
    try:
        case()
    except Exception as exc:  # noqa: BLE001 - what was raised is the answer
        return type(exc).__name__
    return ""


class TritonPythonModel:
    def execute(self, requests):
        table = cases()
        names = list(table)
        raised = [_raised(table[name]) for name in names]
        tensors = [
            pb_utils.Tensor("CASES", np.array([n.encode() for n in names], np.object_)),
            pb_utils.Tensor("RAISED", np.array([r.encode() for r in raised], np.object_)),
        ]
        return [pb_utils.InferenceResponse(tensors) for _ in requests]
