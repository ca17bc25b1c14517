from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as triton_pb

from pbd.grpc import wire


def _request(raws: list[bytes]) -> bytes:
    msg = triton_pb.ModelInferRequest(model_name="m", model_version="1", id="r")
    msg.parameters["sequence_id"].int64_param = 7
    for i, raw in enumerate(raws):
        t = msg.inputs.add(name=f"IN{i}", datatype="UINT8", shape=[len(raw)])
        t.parameters["p"].string_param = "v"
    msg.raw_input_contents.extend(raws)
    return msg.SerializeToString()


@given(st.lists(st.binary(max_size=300), max_size=5))
def test_split_gives_views_of_each_raw_entry_and_a_header_without_them(raws):
    data = _request(raws)
    header, views = wire.split_raw_inputs(data)
    assert [bytes(v) for v in views] == raws
    parsed = triton_pb.ModelInferRequest.FromString(header)
    assert parsed.model_name == "m" and len(parsed.inputs) == len(raws)
    if raws:
        assert len(parsed.raw_input_contents) == 0


def test_views_do_not_copy():
    data = _request([b"\x01" * 1000])
    _, (view,) = wire.split_raw_inputs(data)
    assert view.obj is data


def test_truncated_message_is_rejected():
    data = _request([b"abc" * 100])
    with pytest.raises(wire.WireError):
        wire.split_raw_inputs(data[:-10])


def test_join_builds_a_response_tritonclient_decodes():
    header = triton_pb.ModelInferResponse(model_name="m", model_version="1", id="x")
    header.outputs.add(name="A", datatype="FP32", shape=[3])
    header.outputs.add(name="B", datatype="BYTES", shape=[0])
    a = np.array([1.5, 2.5, 3.5], np.float32)
    data = wire.join_raw_outputs(header.SerializeToString(), [memoryview(a.tobytes()), b""])
    parsed = triton_pb.ModelInferResponse.FromString(data)
    assert list(parsed.raw_output_contents) == [a.tobytes(), b""]
    assert [o.name for o in parsed.outputs] == ["A", "B"]


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_varint_round_trip(value):
    encoded = wire.encode_varint(value)
    assert wire._varint(memoryview(encoded), 0) == (value, len(encoded))
