"""Sum and difference of two INT32 vectors (add_sub with integer tensors)."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # The output datatypes come from config.pbtxt, so the same code serves
        # any numeric variant of this model.
        model_config = json.loads(args["model_config"])
        sum_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
        diff_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
        self.sum_dtype = pb_utils.triton_string_to_numpy(sum_config["data_type"])
        self.diff_dtype = pb_utils.triton_string_to_numpy(diff_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            total = pb_utils.Tensor("OUTPUT0", (a + b).astype(self.sum_dtype))
            difference = pb_utils.Tensor("OUTPUT1", (a - b).astype(self.diff_dtype))
            responses.append(pb_utils.InferenceResponse(output_tensors=[total, difference]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info("add_sub_int32: finalize")
