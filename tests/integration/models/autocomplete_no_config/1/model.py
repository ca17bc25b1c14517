"""add_sub without a config.pbtxt: auto_complete_config describes the model, as in Triton's
auto-complete example. initialize() reads the output types from the completed config."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        inputs = [
            {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        outputs = [
            {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
            {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [4]},
        ]
        config = auto_complete_model_config.as_dict()
        input_names = [i["name"] for i in config["input"]]
        output_names = [o["name"] for o in config["output"]]
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        for spec in inputs:
            if spec["name"] not in input_names:
                auto_complete_model_config.add_input(spec)
        for spec in outputs:
            if spec["name"] not in output_names:
                auto_complete_model_config.add_output(spec)
        return auto_complete_model_config

    def initialize(self, args):
        model_config = json.loads(args["model_config"])
        self.dtypes = {
            name: pb_utils.triton_string_to_numpy(
                pb_utils.get_output_config_by_name(model_config, name)["data_type"]
            )
            for name in ("OUTPUT0", "OUTPUT1")
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(self.dtypes["OUTPUT0"]))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(self.dtypes["OUTPUT1"]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses
