"""One cached response: a copy of the outputs, sized as Triton sizes its entries."""

from __future__ import annotations

from pbd.cache.entry import CachedResponse
from pbd.types import InferRequest, InferResult, OutputTensor


def result(released: list[bool]) -> InferResult:
    data = bytearray(b"\x01\x02\x03\x04" * 4)
    return InferResult(
        "m",
        "1",
        "first",
        [OutputTensor("OUT", "FP32", (2, 2), memoryview(data))],
        {"note": "x"},
        _release=lambda: released.append(True),
    )


def test_the_outputs_are_copied_and_the_result_can_go() -> None:
    released: list[bool] = []
    original = result(released)
    entry = CachedResponse.of(original)
    original.outputs[0].data[:4] = b"\x00\x00\x00\x00"  # the worker reuses its memory
    original.release()
    assert released == [True]
    assert entry.outputs[0].data == b"\x01\x02\x03\x04" * 4


def test_a_hit_answers_its_own_request_with_parameters_of_its_own() -> None:
    entry = CachedResponse.of(result([]))
    answer = entry.result(InferRequest("m", "", "second", []), "m", "1")
    assert (answer.id, answer.model_version, answer.outputs[0].shape) == ("second", "1", (2, 2))
    answer.parameters["triton_final_response"] = True  # what a stream adds
    assert entry.result(InferRequest("m", "", "third", []), "m", "1").parameters == {"note": "x"}


def test_its_size_is_counted_as_triton_packs_it() -> None:
    # uint32 count; per output: uint64 size, then name, datatype, 8 bytes a dimension and the
    # data, each behind its length (uint32, uint32, uint32, uint64)
    assert CachedResponse.of(result([])).nbytes == 4 + 8 + (4 + 3) + (4 + 4) + (4 + 16) + (8 + 16)
