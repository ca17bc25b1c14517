"""Opens a span of its own with the plain OpenTelemetry API, logs an info and a verbose line,
and returns its input with the request's trace context (``request.trace().get_context()``)."""

import numpy as np
from opentelemetry import trace

import triton_python_backend_utils as pb_utils

tracer = trace.get_tracer("traced_model")


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            with tracer.start_as_current_span("model.work") as span:
                span.set_attribute("work.items", 1)
                value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            pb_utils.Logger.log_info("traced: info line")
            pb_utils.Logger.log_verbose("traced: verbose line")
            context = request.trace().get_context() or ""
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", value),
                        pb_utils.Tensor("CONTEXT", np.array([context.encode()], dtype=np.object_)),
                    ]
                )
            )
        return responses
