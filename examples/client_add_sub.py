"""Send one request to the add_sub example model and check the answer.

Start the daemon on the bundled repository first:

    python -m pbd serve --model-repository examples/models

then run ``python examples/client_add_sub.py [--url localhost:8001]``.
"""

import argparse
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

MODEL_NAME = "add_sub"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="localhost:8001", help="gRPC address of the server")
    args = parser.parse_args()

    with grpcclient.InferenceServerClient(url=args.url) as client:
        input0_data = np.random.rand(4).astype(np.float32)
        input1_data = np.random.rand(4).astype(np.float32)

        inputs = [
            grpcclient.InferInput("INPUT0", input0_data.shape, "FP32"),
            grpcclient.InferInput("INPUT1", input1_data.shape, "FP32"),
        ]
        inputs[0].set_data_from_numpy(input0_data)
        inputs[1].set_data_from_numpy(input1_data)
        outputs = [
            grpcclient.InferRequestedOutput("OUTPUT0"),
            grpcclient.InferRequestedOutput("OUTPUT1"),
        ]

        try:
            response = client.infer(MODEL_NAME, inputs, request_id="1", outputs=outputs)
        except InferenceServerException as error:
            print(f"inference failed: {error}")
            return 1

        output0_data = response.as_numpy("OUTPUT0")
        output1_data = response.as_numpy("OUTPUT1")
        print(f"INPUT0 ({input0_data}) + INPUT1 ({input1_data}) = OUTPUT0 ({output0_data})")
        print(f"INPUT0 ({input0_data}) - INPUT1 ({input1_data}) = OUTPUT1 ({output1_data})")

        if not np.allclose(input0_data + input1_data, output0_data):
            print("add_sub example error: incorrect sum")
            return 1
        if not np.allclose(input0_data - input1_data, output1_data):
            print("add_sub example error: incorrect difference")
            return 1

    print("PASS: add_sub")
    return 0


if __name__ == "__main__":
    sys.exit(main())
