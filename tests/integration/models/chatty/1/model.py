"""Two instances print long lines at the same time (see config.pbtxt)."""

import os
import sys
import time

import triton_python_backend_utils as pb_utils

LINES = 300
LINE_CHARS = 3000
LONG_LINES = 3
LONG_LINE_CHARS = 10_000
LONGEST_WAIT_S = 60.0


class TritonPythonModel:
    def initialize(self, args):
        directory = args["model_repository"]
        if not os.path.exists(os.path.join(directory, "print_lines")):
            return
        me = args["model_instance_name"]
        open(os.path.join(directory, f"up_{me}"), "w").close()
        deadline = time.monotonic() + LONGEST_WAIT_S
        while time.monotonic() < deadline:
            if len([n for n in os.listdir(directory) if n.startswith("up_")]) >= 2:
                break
            time.sleep(0.01)
        for i in range(LINES):
            print(f"chatty-line {me} {i} " + "x" * LINE_CHARS + " end")
        for i in range(LONG_LINES):
            print(f"chatty-long {me} {i} " + "y" * LONG_LINE_CHARS + " end", file=sys.stderr)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(r, "X")])
            for r in requests
        ]
