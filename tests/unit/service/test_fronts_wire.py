"""pbd.fronts.wire: a request and its answer cross the front-end link and come back the same,
their bytes in real shared-memory segments (an arena on one side, a map of it on the other)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pbd._proto import front_pb2 as fpb
from pbd.errors import Code, PbdError
from pbd.fronts import wire
from pbd.types import InferRequest, InferResult, InputTensor, OutputTensor, RequestedOutput
from pbd_wire.framing import HEADER, decode_length
from pbd_wire.shm import Arena, SegmentMap


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[Arena]:
    arena = Arena("pbdunitfront-a", 1 << 16, 1 << 16)
    yield arena
    arena.close()


def _message(frame: bytes, kind: type[fpb.FrontToDaemon] | type[fpb.DaemonToFront]) -> object:
    message = kind()
    assert decode_length(frame[: HEADER.size]) == len(frame) - HEADER.size
    message.ParseFromString(frame[HEADER.size :])
    return message


def test_an_infer_carries_its_inputs_as_places_and_comes_back_as_views(
    arena: Arena, tmp_path: Path
) -> None:
    data = np.arange(16, dtype=np.float32)
    block = arena.allocate(data.nbytes)
    block.view()[:] = data.tobytes()
    request = InferRequest(
        model_name="m",
        model_version="2",
        id="req-1",
        inputs=[
            InputTensor("X", "FP32", (1, 16), memoryview(data.tobytes()), {"p": 1}),
            InputTensor("S", "FP32", (4,), None, {"shared_memory_region": "r"}),
        ],
        outputs=[RequestedOutput("Y", {"classification": 2})],
        parameters={"sequence_id": 7, "flag": True, "text": "x"},
        first_answer=True,
    )
    places: list[wire.Place] = [(block.segment.name, block.offset, data.nbytes), None]
    trace = wire.TraceAsk("ModelInfer", "grpc", 123, "00-aa-bb-01")
    frame = wire.infer_frame(9, request, places, stream=True, trace=trace, release=[4, 5])
    message = _message(frame, fpb.FrontToDaemon)
    assert isinstance(message, fpb.FrontToDaemon)
    infer = message.infer
    assert (infer.call, infer.stream, list(infer.release)) == (9, True, [4, 5])
    assert wire.trace_ask(infer) == trace

    segments = SegmentMap(str(tmp_path), allowed_prefix="pbdunitfront-")
    try:
        back = wire.request_from_infer(infer, segments.view)
        assert (back.model_name, back.model_version, back.id) == ("m", "2", "req-1")
        assert back.parameters == {"sequence_id": 7, "flag": True, "text": "x"}
        assert back.first_answer
        x, s = back.inputs
        assert x.placed is not None and x.placed.region == block.segment.name
        assert x.data is not None
        assert np.frombuffer(x.data, np.float32).tolist() == data.tolist()
        assert (x.shape, x.parameters) == ((1, 16), {"p": 1})
        assert s.data is None and s.placed is None  # a client's region: no bytes travel
        assert back.outputs == [RequestedOutput("Y", {"classification": 2})]
        del x, s, back
    finally:
        segments.close()


def test_a_segment_of_another_peer_is_refused(arena: Arena, tmp_path: Path) -> None:
    block = arena.allocate(8)
    request = InferRequest("m", "", "", [InputTensor("X", "INT32", (2,), memoryview(b"\0" * 8))])
    frame = wire.infer_frame(1, request, [(block.segment.name, 0, 8)], stream=False, trace=None)
    message = _message(frame, fpb.FrontToDaemon)
    assert isinstance(message, fpb.FrontToDaemon)
    segments = SegmentMap(str(tmp_path), allowed_prefix="pbdunitfront-b")
    try:
        with pytest.raises(ValueError, match="not one of this peer's"):
            wire.request_from_infer(message.infer, segments.view)
    finally:
        segments.close()


def test_an_answer_names_where_outputs_lie_and_carries_stray_bytes_inline(
    arena: Arena, tmp_path: Path
) -> None:
    block = arena.allocate(8)
    block.view()[:] = np.array([3, 4], np.int32).tobytes()
    result = InferResult(
        model_name="m",
        model_version="1",
        id="r",
        outputs=[
            OutputTensor("A", "INT32", (2,), block.view(), block.segment.name, block.offset),
            OutputTensor("B", "BYTES", (1,), memoryview(b"\x02\0\0\0hi")),
            OutputTensor("C", "FP32", (0,), memoryview(b"")),
        ],
        parameters={"triton_final_response": False},
    )
    frame = wire.answer_frame(3, result, final=False, hold=11, inputs_free=True)
    message = _message(frame, fpb.DaemonToFront)
    assert isinstance(message, fpb.DaemonToFront)
    answer = message.answer
    assert (answer.call, answer.final, answer.hold, answer.response) == (3, False, 11, True)
    assert list(answer.inline) == [1]
    segments = SegmentMap(str(tmp_path), allowed_prefix="pbdunitfront-")
    try:
        back = wire.result_from_answer(answer, segments.view)
        a, b, c = back.outputs
        assert np.frombuffer(a.data, np.int32).tolist() == [3, 4]
        assert bytes(b.data) == b"\x02\0\0\0hi"
        assert (c.shape, bytes(c.data)) == ((0,), b"")
        assert back.parameters == {"triton_final_response": False}
        del a, b, c, back
    finally:
        segments.close()


def test_an_error_keeps_its_code_and_whether_a_model_saw_it() -> None:
    error = PbdError(Code.INVALID_ARG, "unexpected inference input 'Z'")
    error.before_model = True
    message = _message(wire.answer_frame(5, None, error=error), fpb.DaemonToFront)
    assert isinstance(message, fpb.DaemonToFront)
    assert not message.answer.response and message.answer.final
    back = wire.error_from_answer(message.answer)
    assert (back.code, back.message, back.before_model) == (
        Code.INVALID_ARG,
        "unexpected inference input 'Z'",
        True,
    )
