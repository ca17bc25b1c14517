from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as triton_pb

from pbd.errors import PbdError
from pbd.grpc import convert
from pbd.stats import ModelStats
from pbd.types import InferResult, OutputTensor, Uint64


def _wire(msg: triton_pb.ModelInferRequest) -> bytes:
    return msg.SerializeToString()


def test_raw_entries_go_to_inputs_without_contents_or_shared_memory():
    msg = triton_pb.ModelInferRequest(model_name="m", id="7")
    msg.inputs.add(name="A", datatype="INT32", shape=[2])
    shm = msg.inputs.add(name="S", datatype="INT32", shape=[2])
    shm.parameters["shared_memory_region"].string_param = "r"
    msg.inputs.add(name="B", datatype="INT32", shape=[1])
    msg.raw_input_contents.extend([np.int32([1, 2]).tobytes(), np.int32([3]).tobytes()])
    request = convert.infer_request_from_wire(_wire(msg))
    data = {t.name: None if t.data is None else bytes(t.data) for t in request.inputs}
    assert data == {"A": np.int32([1, 2]).tobytes(), "S": None, "B": np.int32([3]).tobytes()}


def test_typed_contents_become_wire_bytes():
    msg = triton_pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="I8", datatype="INT8", shape=[2]).contents.int_contents.extend([-1, 5])
    msg.inputs.add(name="F", datatype="FP64", shape=[1]).contents.fp64_contents.append(2.5)
    strings = msg.inputs.add(name="S", datatype="BYTES", shape=[2])
    strings.contents.bytes_contents.extend([b"a", b""])
    request = convert.infer_request_from_wire(_wire(msg))
    by_name = {t.name: bytes(t.data) for t in request.inputs}
    assert by_name["I8"] == np.int8([-1, 5]).tobytes()
    assert by_name["F"] == np.float64([2.5]).tobytes()
    assert by_name["S"] == b"\x01\x00\x00\x00a\x00\x00\x00\x00"


def test_uint64_contents_near_two_to_the_64_stay_exact():
    # Found by tests/fuzz: a sequence with such a value went through float64 and out of range.
    msg = triton_pb.ModelInferRequest(model_name="m")
    big = [0, 2**64 - 1024, 2**64 - 1]
    msg.inputs.add(name="U", datatype="UINT64", shape=[3]).contents.uint64_contents.extend(big)
    request = convert.infer_request_from_wire(_wire(msg))
    assert np.frombuffer(request.inputs[0].data, np.uint64).tolist() == big


def test_contents_with_raw_and_mismatched_contents_are_refused():
    msg = triton_pb.ModelInferRequest(model_name="m")
    msg.inputs.add(name="A", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    msg.raw_input_contents.append(b"\0" * 4)
    with pytest.raises(PbdError, match="contents field must not be specified"):
        convert.infer_request_from_wire(_wire(msg))
    bad = triton_pb.ModelInferRequest(model_name="m")
    bad.inputs.add(name="A", datatype="FP32", shape=[1]).contents.int_contents.append(1)
    with pytest.raises(PbdError, match="unexpected explicit tensor data"):
        convert.infer_request_from_wire(_wire(bad))


def test_parameters_keep_their_types():
    msg = triton_pb.ModelInferRequest(model_name="m")
    msg.parameters["b"].bool_param = True
    msg.parameters["i"].int64_param = -3
    msg.parameters["s"].string_param = "x"
    msg.parameters["d"].double_param = 0.5
    msg.parameters["priority"].uint64_param = 9
    request = convert.infer_request_from_wire(_wire(msg))
    assert request.parameters == {"b": True, "i": -3, "s": "x", "d": 0.5, "priority": Uint64(9)}


@pytest.mark.parametrize("where", ["request", "input", "output"])
def test_a_parameter_without_a_value_is_refused(where):
    """Issue 18, finding 8: an empty InferParameter was dropped as if never sent."""
    msg = triton_pb.ModelInferRequest(model_name="m")
    target = {
        "request": lambda: msg.parameters,
        "input": lambda: msg.inputs.add(name="X", datatype="FP32").parameters,
        "output": lambda: msg.outputs.add(name="Y").parameters,
    }[where]()
    target["empty"].SetInParent()
    with pytest.raises(PbdError, match="parameter 'empty' has no value"):
        convert.infer_request_from_wire(_wire(msg))


def _result() -> InferResult:
    out = np.float32([1, 2])
    return InferResult("m", "1", "id", [OutputTensor("Y", "FP32", (2,), memoryview(out.tobytes()))])


def test_infer_response_decodes_with_tritonclient():
    parsed = triton_pb.ModelInferResponse.FromString(convert.infer_response_to_wire(_result()))
    assert parsed.model_version == "1" and parsed.id == "id"
    assert np.frombuffer(parsed.raw_output_contents[0], np.float32).tolist() == [1.0, 2.0]


def test_stream_responses_carry_the_final_flag():
    ok = triton_pb.ModelStreamInferResponse.FromString(convert.stream_response_to_wire(_result()))
    assert ok.error_message == ""
    assert ok.infer_response.parameters["triton_final_response"].bool_param is True
    assert ok.infer_response.outputs[0].name == "Y"
    failed = triton_pb.ModelStreamInferResponse.FromString(
        convert.stream_error_to_wire(None, "boom")
    )
    assert failed.error_message == "boom"
    assert failed.infer_response.parameters["triton_final_response"].bool_param is True


# Found by tests/fuzz: protobuf's DecodeError (not a ValueError) reached the servicer, which
# answered UNKNOWN "Unexpected <class 'DecodeError'>" instead of INVALID_ARGUMENT.
@pytest.mark.parametrize(
    "data",
    [
        b"\x0b\x0cidentity_all",  # a group start tag: protobuf rejects the message
        b"\n\ridentity_all",  # a length past the end
        b"\n",  # a tag without its length
        b"\x1a" + b"\xff" * 11,  # a length varint longer than 64 bits
        b"\n\x02\xff\xfe",  # model_name that is not UTF-8
    ],
)
def test_undecodable_requests_are_invalid_arguments(data):
    with pytest.raises(PbdError) as info:
        convert.infer_request_from_wire(data)
    assert info.value.code.name == "INVALID_ARG"
    assert info.value.message.startswith("malformed request: ")


def test_statistics_carry_batch_stats_per_batch_size() -> None:
    stats = ModelStats()
    stats.executed(2, 10, 100, 1000, batch_size=5)  # two requests of 5 rows in one execute
    stats.executed(1, 20, 200, 2000, batch_size=5)
    stats.executed(1, 1, 2, 3)  # batch size defaults to the request count
    wire = triton_pb.ModelStatisticsResponse.FromString(
        convert.statistics_to_pb([("m", 1, stats)]).SerializeToString()
    )
    (entry,) = wire.model_stats
    assert (entry.inference_count, entry.execution_count) == (11, 3)
    assert entry.inference_stats.compute_infer.count == 4  # per request
    assert [
        (b.batch_size, b.compute_infer.count, b.compute_infer.ns) for b in entry.batch_stats
    ] == [
        (1, 1, 2),
        (5, 2, 300),
    ]
    assert entry.batch_stats[1].compute_output.ns == 3000
