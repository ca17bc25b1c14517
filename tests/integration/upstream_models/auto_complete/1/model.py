"""No config.pbtxt: auto_complete_config declares the tensors (python_backend's
examples/auto_complete). The test serves this file under two names, as the example has two
models: ``auto_batched`` also sets max_batch_size 4 and dynamic batching, ``auto_fixed``
sets max_batch_size 0."""

import triton_python_backend_utils as pb_utils

TENSORS = {
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
}


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        present = config.as_dict()
        for section, add in (("input", config.add_input), ("output", config.add_output)):
            declared = {tensor["name"] for tensor in present[section]}
            for tensor in TENSORS[section]:
                if tensor["name"] not in declared:
                    add(tensor)
        if present["name"] == "auto_batched":
            config.set_max_batch_size(4)
            config.set_dynamic_batching()
        else:
            config.set_max_batch_size(0)
        return config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", a + b),
                        pb_utils.Tensor("OUTPUT1", a - b),
                    ]
                )
            )
        return responses
