"""The response cache's key: same for requests the model cannot tell apart, different as soon
as anything the model sees differs; none for requests whose bytes the daemon does not hold."""

from __future__ import annotations

import numpy as np
from config_samples import ADD_SUB, parse

from pbd.cache.key import request_key
from pbd.types import (
    InferRequest,
    InputTensor,
    ParamValue,
    PreparedRequest,
    RequestedOutput,
    ShmSlice,
)
from pbd.validation import prepare_request

CONFIG = parse(ADD_SUB, name="add_sub")


def prepared(
    first: np.ndarray | None = None,
    *,
    outputs: tuple[str, ...] = (),
    parameters: dict[str, ParamValue] | None = None,
    ident: str = "",
    order: tuple[str, str] = ("INPUT0", "INPUT1"),
) -> PreparedRequest:
    values = {
        "INPUT0": np.arange(4, dtype=np.float32) if first is None else first,
        "INPUT1": np.ones(4, np.float32),
    }
    inputs = [InputTensor(n, "FP32", (4,), memoryview(values[n].tobytes())) for n in order]
    request = InferRequest(
        "add_sub",
        "",
        ident,
        inputs,
        outputs=[RequestedOutput(n) for n in outputs],
        parameters=dict(parameters or {}),
    )
    return prepare_request(request, CONFIG)


def key(p: PreparedRequest, version: int = 1, generation: int = 1) -> bytes | None:
    return request_key(p, "add_sub", version, generation)


def test_requests_the_model_cannot_tell_apart_share_a_key() -> None:
    # The request id, the inputs' order and what is not passed to the model do not matter.
    base = key(prepared())
    assert base is not None and len(base) == 32
    assert key(prepared(ident="other", order=("INPUT1", "INPUT0"))) == base
    assert key(prepared(parameters={"priority": 3, "timeout": 100})) == base


def test_anything_the_model_sees_makes_another_key() -> None:
    base = key(prepared())
    others = [
        key(prepared(np.arange(1, 5, dtype=np.float32))),  # bytes
        key(prepared(outputs=("OUTPUT0",))),  # requested outputs
        key(prepared(parameters={"k": 5})),  # request.parameters()
        key(prepared(), version=2),
        key(prepared(), generation=2),  # the same version loaded again
    ]
    assert base not in others and len(set(others)) == len(others)


def test_the_shape_is_part_of_the_key_not_only_the_bytes() -> None:
    flat = prepared()
    square = prepared()
    square.inputs[0].shape = (2, 2)
    assert key(flat) != key(square)


def test_a_request_with_client_shared_memory_has_no_key() -> None:
    in_region = prepared()
    in_region.inputs[0].data = None
    in_region.inputs[0].shm = ShmSlice("client#1", 0, 16)
    assert key(in_region) is None
    out_region = prepared()
    out_region.output_targets["OUTPUT0"] = ShmSlice("client#1", 0, 16)
    assert key(out_region) is None
