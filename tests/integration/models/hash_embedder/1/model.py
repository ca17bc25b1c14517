"""Embeds a string as the sum of its words' hashes: each word's SHA-256 gives 16 numbers in
[-1, 1), summed over the words and scaled to length 1. ``dimensions`` (when given) keeps the
first that many numbers, scaled to length 1 again. ``num_input_tokens``: the words.
"""

import hashlib

import numpy as np

import triton_python_backend_utils as pb_utils

SIZE = 16


def _embed(text, dimensions):
    vector = np.zeros(SIZE, dtype=np.float64)
    for word in text.split():
        digest = np.frombuffer(hashlib.sha256(word.encode()).digest()[:SIZE], dtype=np.uint8)
        vector += digest / 128.0 - 1.0
    vector = vector[:dimensions]
    norm = np.linalg.norm(vector)
    return (vector / norm if norm else vector).astype(np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy().reshape(-1)
            texts = [t.decode("utf-8") for t in texts]
            dims = pb_utils.get_input_tensor_by_name(request, "dimensions")
            dimensions = SIZE if dims is None else int(dims.as_numpy().reshape(-1)[0])
            if not 1 <= dimensions <= SIZE:
                error = pb_utils.TritonError(f"dimensions must be from 1 to {SIZE}")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            vectors = np.stack([_embed(t, dimensions) for t in texts])
            words = np.array([[len(t.split())] for t in texts], dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("embedding", vectors),
                        pb_utils.Tensor("num_input_tokens", words),
                    ]
                )
            )
        return responses
