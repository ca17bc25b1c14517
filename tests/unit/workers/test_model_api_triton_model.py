"""A model written the way Triton's add_sub example is runs unchanged on this API."""

from __future__ import annotations

import importlib.util
import json
import textwrap

import numpy as np

import triton_python_backend_utils as pb_utils
from pbd_worker.model_api.tensor import Tensor

MODEL_SOURCE = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.model_config = model_config = json.loads(args["model_config"])
            output0_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT0")
            output1_config = pb_utils.get_output_config_by_name(model_config, "OUTPUT1")
            self.output0_dtype = pb_utils.triton_string_to_numpy(output0_config["data_type"])
            self.output1_dtype = pb_utils.triton_string_to_numpy(output1_config["data_type"])

        def execute(self, requests):
            responses = []
            for request in requests:
                in_0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
                in_1 = pb_utils.get_input_tensor_by_name(request, "INPUT1")
                out_0, out_1 = (
                    in_0.as_numpy() + in_1.as_numpy(),
                    in_0.as_numpy() - in_1.as_numpy(),
                )
                out_tensor_0 = pb_utils.Tensor("OUTPUT0", out_0.astype(self.output0_dtype))
                out_tensor_1 = pb_utils.Tensor("OUTPUT1", out_1.astype(self.output1_dtype))
                inference_response = pb_utils.InferenceResponse(
                    output_tensors=[out_tensor_0, out_tensor_1]
                )
                responses.append(inference_response)
            return responses

        def finalize(self):
            print("Cleaning up...")
    """
)

CONFIG = {
    "name": "add_sub",
    "backend": "python",
    "input": [
        {"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "INPUT1", "data_type": "TYPE_FP32", "dims": [4]},
    ],
    "output": [
        {"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]},
        {"name": "OUTPUT1", "data_type": "TYPE_INT32", "dims": [4]},
    ],
}


def _load(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_SOURCE)
    spec = importlib.util.spec_from_file_location("add_sub_like_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel()


def _shm_input(name: str, array: np.ndarray) -> Tensor:
    source = pb_utils.Tensor(name, array)
    block = bytearray(source._wire_nbytes())
    source._write_into(memoryview(block))
    return Tensor._from_buffer(name, source._datatype, source.shape(), memoryview(block))


def test_add_sub_model_runs_unchanged(tmp_path, capsys):
    model = _load(tmp_path)
    model.initialize({"model_config": json.dumps(CONFIG), "model_name": "add_sub"})
    a = np.array([1.5, 2.0, 3.0, 4.0], dtype=np.float32)
    b = np.array([0.5, 1.0, 1.0, 9.0], dtype=np.float32)
    requests = [
        pb_utils.InferenceRequest._from_runtime(
            inputs=[_shm_input("INPUT0", a * k), _shm_input("INPUT1", b)],
            request_id=f"r{k}",
            correlation_id=0,
            requested_output_names=[],
            flags=0,
            timeout=0,
            parameters_json="{}",
            model_name="add_sub",
            model_version=1,
            trace_context=None,
        )
        for k in (1, 2)
    ]
    responses = model.execute(requests)
    assert len(responses) == 2
    for k, response in zip((1, 2), responses, strict=True):
        assert not response.has_error()
        out0 = pb_utils.get_output_tensor_by_name(response, "OUTPUT0")
        out1 = pb_utils.get_output_tensor_by_name(response, "OUTPUT1")
        assert out0._datatype == "FP32" and out1._datatype == "INT32"
        np.testing.assert_array_equal(out0.as_numpy(), a * k + b)
        np.testing.assert_array_equal(out1.as_numpy(), (a * k - b).astype(np.int32))
    model.finalize()
    assert "Cleaning up..." in capsys.readouterr().out
