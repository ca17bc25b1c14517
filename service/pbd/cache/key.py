"""Which requests are the same request: the cache key.

Two requests share a key when the model could not tell them apart: the same loaded model
version, the same inputs (name, datatype, shape as the model sees it, bytes), the same
requested outputs, the same parameters the model reads (``request.parameters()``, the
correlation ID, the sequence flags). Triton's key is the model, version and the inputs' names
and bytes only, so there two requests differing only in shape, requested outputs or parameters
get each other's response; here they don't.

A request whose bytes the daemon does not hold has no key and is never cached: inputs in a
client's shared-memory region (the daemon never maps clients' memory; the worker does), GPU
inputs, outputs aimed at a client's region (its answer is written there, not returned).
"""

from __future__ import annotations

import hashlib
import json

from pbd.types import PreparedRequest


def request_key(
    prepared: PreparedRequest, model: str, version: int, generation: int
) -> bytes | None:
    """SHA-256 over what the model sees of ``prepared`` (``generation``: which load of the
    version; a reloaded model never gets its predecessor's answers), or None when the request
    cannot be cached."""
    if prepared.output_targets:
        return None
    inputs = sorted(prepared.inputs, key=lambda t: t.name)
    if any(t.data is None for t in inputs):
        return None
    header = [
        model,
        version,
        generation,
        sorted(prepared.requested_outputs),
        prepared.parameters_json,
        prepared.correlation_id,
        prepared.flags,
        [(t.name, t.datatype, t.shape, len(t.data or b"")) for t in inputs],
    ]
    digest = hashlib.sha256(json.dumps(header).encode())
    for tensor in inputs:
        assert tensor.data is not None
        digest.update(tensor.data)
    return digest.digest()
