from __future__ import annotations

import numpy as np
import pytest

from pbd.errors import Code, PbdError
from pbd.memory.client_shm import ClientShmRegistry
from pbd.modelconfig.parse import parse_model_config
from pbd.types import (
    SEQUENCE_END,
    SEQUENCE_START,
    InferRequest,
    InputTensor,
    RequestedOutput,
    Uint64,
)
from pbd.validation import prepare_request, release_regions

ADD_SUB = """
name: "add_sub"
backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

BATCHED = """
name: "batched"
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] },
        { name: "S" data_type: TYPE_STRING dims: [ 1 ] optional: true },
        { name: "R" data_type: TYPE_FP32 dims: [ 6 ] reshape: { shape: [ 2, 3 ] } optional: true } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""


def _config(text: str, name: str):
    return parse_model_config(text, model_name=name, source=f"{name}/config.pbtxt")


def _fp32(name: str, values, shape=None) -> InputTensor:
    arr = np.asarray(values, np.float32)
    return InputTensor(name, "FP32", tuple(shape or arr.shape), memoryview(arr.tobytes()))


def _bytes_tensor(name: str, items: list[bytes], shape=None) -> InputTensor:
    raw = b"".join(len(i).to_bytes(4, "little") + i for i in items)
    return InputTensor(name, "BYTES", tuple(shape or (len(items),)), memoryview(raw))


def _request(*inputs, outputs=(), params=None, rid="") -> InferRequest:
    return InferRequest(
        "m", "", rid, list(inputs), [RequestedOutput(o) for o in outputs], dict(params or {})
    )


def _error(request, config) -> PbdError:
    with pytest.raises(PbdError) as info:
        prepare_request(request, config)
    return info.value


def test_valid_request_passes_with_requested_outputs():
    cfg = _config(ADD_SUB, "add_sub")
    p = prepare_request(
        _request(_fp32("INPUT0", [1, 2, 3, 4]), _fp32("INPUT1", [1] * 4), outputs=["OUTPUT1"]), cfg
    )
    assert [i.name for i in p.inputs] == ["INPUT0", "INPUT1"]
    assert p.requested_outputs == ["OUTPUT1"]
    assert p.inputs[0].shape == (4,)


def test_triton_messages_for_bad_inputs():
    cfg = _config(ADD_SUB, "add_sub")
    good = _fp32("INPUT1", [0] * 4)
    err = _error(_request(_fp32("INPUT0", [1] * 3), good, rid="r1"), cfg)
    assert err.code is Code.INVALID_ARG
    assert err.message.startswith(
        "[request id: r1] unexpected shape for input 'INPUT0' for model 'add_sub'. "
        "Expected [4], got [3]."
    )
    wrong_type = InputTensor("INPUT0", "INT32", (4,), memoryview(bytes(16)))
    assert _error(_request(wrong_type, good), cfg).message == (
        "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT32', but model "
        "'add_sub' expects 'FP32'"
    )
    short = InputTensor("INPUT0", "FP32", (4,), memoryview(bytes(12)))
    assert _error(_request(short, good), cfg).message.endswith(
        "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 16, got 12"
    )
    missing = _error(_request(good), cfg).message
    assert "expected 2 inputs but got 1 inputs for model 'add_sub'" in missing
    assert "missing required input(s) ['INPUT0']" in missing
    unknown = _error(_request(good, _fp32("INPUT0", [0] * 4), _fp32("NOPE", [1])), cfg)
    assert "unexpected inference input 'NOPE' for model 'add_sub'" in unknown.message
    no_data = InputTensor("INPUT0", "FP32", (4,), None)
    assert (
        "unable to find data for input tensor 'INPUT0'"
        in _error(_request(no_data, good), cfg).message
    )
    bad_out = _error(_request(_fp32("INPUT0", [0] * 4), good, outputs=["ZZ"]), cfg)
    assert "unexpected inference output 'ZZ' for model 'add_sub'" in bad_out.message


def test_batching_shapes_reshape_and_bytes():
    cfg = _config(BATCHED, "batched")
    x = InputTensor("X", "INT32", (2, 3), memoryview(bytes(24)))
    r = _fp32("R", np.zeros((2, 6)))
    s = _bytes_tensor("S", [b"a", b""], shape=(2, 1))
    p = prepare_request(_request(x, r, s), cfg)
    assert {i.name: i.shape for i in p.inputs} == {"X": (2, 3), "R": (2, 2, 3), "S": (2, 1)}
    too_big = InputTensor("X", "INT32", (9, 1), memoryview(bytes(36)))
    assert "batch-size must be <= 8 for 'batched'" in _error(_request(too_big), cfg).message
    lying = InputTensor("S", "BYTES", (1, 1), memoryview((50).to_bytes(4, "little") + b"abc"))
    assert "incomplete string" in _error(_request(x, lying), cfg).message
    count = _bytes_tensor("S", [b"a", b"b"], shape=(1, 1))
    assert "unexpected number of string elements 2 for inference input 'S'" in (
        _error(_request(x, count), cfg).message
    )
    few = InputTensor("S", "BYTES", (2, 1), memoryview((1).to_bytes(4, "little") + b"a"))
    assert "expected 2 string elements for inference input 'S'" in (
        _error(_request(x, few), cfg).message
    )
    stub = InputTensor("S", "BYTES", (1, 1), memoryview(b"\x01\x00"))
    assert "incomplete string length indicator" in _error(_request(x, stub), cfg).message


def test_parameters_sequence_priority_custom_and_reserved():
    cfg = _config(BATCHED, "batched")
    x = InputTensor("X", "INT32", (1, 1), memoryview(bytes(4)))
    p = prepare_request(
        _request(
            x,
            params={
                "sequence_id": "abc",
                "sequence_start": True,
                "sequence_end": True,
                "priority": Uint64(3),
                "timeout": 100,
                "mine": 1.5,
                "flag": True,
            },
        ),
        cfg,
    )
    assert p.correlation_id == "abc" and p.flags == SEQUENCE_START | SEQUENCE_END
    assert p.priority == 3 and p.timeout_us == 100
    assert p.parameters_json == '{"mine": 1.5, "flag": true}'
    reserved = _error(_request(x, params={"triton_x": True}), cfg)
    assert "reserved for Triton usage" in reserved.message
    assert "uint64_param" in _error(_request(x, params={"mine": Uint64(1)}), cfg).message
    assert "sequence_id" in _error(_request(x, params={"sequence_id": 1.5}), cfg).message


# Found by tests/fuzz: a negative int64 sequence_id (or, over HTTP, numbers past 64 bits)
# passed validation and then broke building the worker's uint64 fields with a ValueError,
# failing every request batched with it.
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sequence_id", -1),
        ("sequence_id", 2**64),
        ("priority", 2**64),
        ("priority", Uint64(2**64)),
        ("timeout", 2**64),
    ],
)
def test_numeric_parameters_must_fit_the_worker_descriptor(key, value):
    cfg = _config(BATCHED, "batched")
    x = InputTensor("X", "INT32", (1, 1), memoryview(bytes(4)))
    err = _error(_request(x, params={key: value}), cfg)
    assert err.code is Code.INVALID_ARG and f"'{key}' parameter" in err.message
    p = prepare_request(_request(x, params={"sequence_id": 2**64 - 1, "priority": 2**64 - 1}), cfg)
    assert p.correlation_id == p.priority == 2**64 - 1


def test_shared_memory_parameters_follow_triton(tmp_path):
    cfg = _config(ADD_SUB, "add_sub")
    other = _fp32("INPUT1", [0] * 4)

    def shm_input(params):
        return InputTensor("INPUT0", "FP32", (4,), None, params)

    off = ClientShmRegistry(enabled=False, key_prefixes=[], shm_dir=str(tmp_path))
    err = _error_with(
        _request(shm_input({"shared_memory_region": "r", "shared_memory_byte_size": 16}), other),
        cfg,
        off,
    )
    assert err.code is Code.UNSUPPORTED and "--allow-client-shm" in err.message
    on = ClientShmRegistry(enabled=True, key_prefixes=[], shm_dir=str(tmp_path))
    (tmp_path / "key").write_bytes(bytes(64))
    on.register("r", "/key", 16, 32)
    cases = [
        ({"shared_memory_region": "r"}, "'shared_memory_byte_size' must be specified"),
        ({"shared_memory_byte_size": 16}, "can not be specified without 'shared_memory_region'"),
        ({"shared_memory_region": 5, "shared_memory_byte_size": 16}, "expected string_param"),
        (
            {"shared_memory_region": "x", "shared_memory_byte_size": 16},
            "Unable to find shared memory region: 'x'",
        ),
        (
            {
                "shared_memory_region": "r",
                "shared_memory_byte_size": 16,
                "shared_memory_offset": 32,
            },
            "Invalid offset for shared memory region",
        ),
        (
            {"shared_memory_region": "r", "shared_memory_byte_size": 32, "shared_memory_offset": 8},
            "Invalid offset + byte size",
        ),
        ({"shared_memory_region": "r", "shared_memory_byte_size": 8}, "input byte size mismatch"),
    ]
    for params, message in cases:
        assert message in _error_with(_request(shm_input(params), other), cfg, on).message
        assert on.regions["r"].in_use == 0  # a refused request holds no region
    good = prepare_request(
        _request(
            shm_input(
                {
                    "shared_memory_region": "r",
                    "shared_memory_byte_size": 16,
                    "shared_memory_offset": 4,
                }
            ),
            other,
        ),
        cfg,
        on,
    )
    assert good.inputs[0].shm is not None and good.inputs[0].shm.offset == 20
    assert on.regions["r"].in_use == 1
    on.unregister("r")  # deferred while in use
    assert on.regions["r"].awaiting_unregister
    release_regions(good, on)
    assert "r" not in on.regions


# Found by tests/fuzz: request parameters are checked after the regions are acquired, and a
# bad one left the region held for good (in_use never back to 0: unregister deferred forever).
def test_a_bad_request_parameter_releases_the_regions_already_acquired(tmp_path):
    cfg = _config(ADD_SUB, "add_sub")
    shm = ClientShmRegistry(enabled=True, key_prefixes=[], shm_dir=str(tmp_path))
    (tmp_path / "key").write_bytes(bytes(64))
    shm.register("r", "/key", 0, 64)
    region = {"shared_memory_region": "r", "shared_memory_byte_size": 16}
    request = _request(
        InputTensor("INPUT0", "FP32", (4,), None, dict(region)),
        _fp32("INPUT1", [0] * 4),
        outputs=["OUTPUT0"],
        params={"sequence_id": 1.5},
    )
    request.outputs[0].parameters.update(region)
    assert "sequence_id" in _error_with(request, cfg, shm).message
    assert shm.regions["r"].in_use == 0
    shm.unregister("r")
    assert "r" not in shm.regions


def _error_with(request, config, shm) -> PbdError:
    with pytest.raises(PbdError) as info:
        prepare_request(request, config, shm)
    return info.value


def test_classification_outputs_are_refused_not_ignored():
    cfg = _config(ADD_SUB, "add_sub")
    request = _request(_fp32("INPUT0", [0] * 4), _fp32("INPUT1", [0] * 4), outputs=["OUTPUT0"])
    request.outputs[0].parameters["classification"] = 3
    err = _error(request, cfg)
    assert err.code is Code.UNSUPPORTED and "classification" in err.message


# Issue 18, findings 7 and 8.


def test_an_input_given_twice_is_refused_as_triton_does():
    cfg = _config(ADD_SUB, "add_sub")
    request = _request(_fp32("INPUT0", [1] * 4), _fp32("INPUT0", [2] * 4), _fp32("INPUT1", [0] * 4))
    err = _error(request, cfg)
    assert err.code is Code.INVALID_ARG
    assert err.message == "input 'INPUT0' already exists in request"


def test_a_zero_element_shape_no_array_can_have_is_refused():
    cfg = _config(BATCHED, "batched")
    err = _error(_request(InputTensor("X", "INT32", (0, 2**62), memoryview(b""))), cfg)
    assert err.code is Code.INVALID_ARG and "exceeds the largest tensor size" in err.message


def test_a_string_sequence_id_over_128_characters_is_refused():
    cfg = _config(ADD_SUB, "add_sub")
    inputs = (_fp32("INPUT0", [1] * 4), _fp32("INPUT1", [0] * 4))
    prepare_request(_request(*inputs, params={"sequence_id": "s" * 128}), cfg)
    err = _error(_request(*inputs, params={"sequence_id": "s" * 129}), cfg)
    assert "'sequence_id'" in err.message and "at most 128 characters, got 129" in err.message


@pytest.mark.parametrize("value", [1, "true", 0.0])
def test_enable_empty_final_response_must_be_a_bool(value):
    cfg = _config(ADD_SUB, "add_sub")
    inputs = (_fp32("INPUT0", [1] * 4), _fp32("INPUT1", [0] * 4))
    err = _error(_request(*inputs, params={"triton_enable_empty_final_response": value}), cfg)
    assert err.message == (
        "invalid value type for 'triton_enable_empty_final_response' parameter, expected "
        "bool_param."
    )
