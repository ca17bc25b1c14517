"""The add_sub client, over HTTP, the way Triton's examples write it.

python examples/client_add_sub_http.py [--url localhost:8000]
"""

import argparse
import sys

import numpy as np
import tritonclient.http as httpclient

parser = argparse.ArgumentParser()
parser.add_argument("--url", default="localhost:8000")
args = parser.parse_args()

model_name = "add_sub"
shape = [4]

with httpclient.InferenceServerClient(args.url) as client:
    input0_data = np.random.rand(*shape).astype(np.float32)
    input1_data = np.random.rand(*shape).astype(np.float32)
    inputs = [
        httpclient.InferInput("INPUT0", input0_data.shape, "FP32"),
        httpclient.InferInput("INPUT1", input1_data.shape, "FP32"),
    ]
    inputs[0].set_data_from_numpy(input0_data)
    inputs[1].set_data_from_numpy(input1_data)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0"),
        httpclient.InferRequestedOutput("OUTPUT1"),
    ]
    response = client.infer(model_name, inputs, request_id=str(1), outputs=outputs)
    output0_data = response.as_numpy("OUTPUT0")
    output1_data = response.as_numpy("OUTPUT1")

    print(f"INPUT0 ({input0_data}) + INPUT1 ({input1_data}) = OUTPUT0 ({output0_data})")
    print(f"INPUT0 ({input0_data}) - INPUT1 ({input1_data}) = OUTPUT1 ({output1_data})")
    if not np.allclose(input0_data + input1_data, output0_data):
        print("add_sub example error: incorrect sum")
        sys.exit(1)
    if not np.allclose(input0_data - input1_data, output1_data):
        print("add_sub example error: incorrect difference")
        sys.exit(1)
    print("PASS: add_sub")
