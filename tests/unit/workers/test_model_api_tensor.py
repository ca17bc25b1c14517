"""pb_utils.Tensor: construction, the wire round trip the runtime relies on, and DLPack."""

from __future__ import annotations

import gc
import struct

import numpy as np
import pytest
import tritonclient.utils as tc

import triton_python_backend_utils as pb_utils
from pbd_wire import dtypes
from pbd_worker.model_api import dlpack
from pbd_worker.model_api.tensor import Tensor

FIXED = [d for d in dtypes.ALL if d.numpy is not None and not d.is_bytes]


def _sample(dt: dtypes.DataType, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(7)
    if dt.name == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dt.numpy.kind == "f":
        return rng.standard_normal(size=shape).astype(dt.numpy)
    info = np.iinfo(dt.numpy)
    return rng.integers(info.min, info.max, size=shape, dtype=dt.numpy, endpoint=True)


def _through_wire(tensor: Tensor) -> Tensor:
    """What the runtime does: write the wire form, then read it back as an input."""
    buffer = bytearray(tensor._wire_nbytes())
    tensor._write_into(memoryview(buffer))
    return Tensor._from_buffer(tensor.name(), tensor._datatype, tensor.shape(), memoryview(buffer))


@pytest.mark.parametrize("dt", FIXED, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(2, 3), (5,), (), (0,), (2, 0, 3)], ids=str)
def test_fixed_size_round_trip(dt, shape):
    array = _sample(dt, shape)
    tensor = pb_utils.Tensor("T", array)
    assert tensor._datatype == dt.name
    assert tensor.triton_dtype() == dt.config_number
    assert tensor.shape() == list(shape)
    assert tensor._wire_nbytes() == array.nbytes
    back = _through_wire(tensor)
    assert back.as_numpy().dtype == dt.numpy
    np.testing.assert_array_equal(back.as_numpy(), array)


@pytest.mark.parametrize("dt", FIXED, ids=lambda d: d.name)
def test_non_contiguous_arrays_are_accepted_and_sent_in_c_order(dt):
    base = _sample(dt, (4, 6))
    for view in (base.T, base[:, ::2], base[::-1, 1:5:3]):
        assert not view.flags.c_contiguous
        tensor = pb_utils.Tensor("T", view)
        assert tensor.shape() == list(view.shape)
        np.testing.assert_array_equal(tensor.as_numpy(), view)
        np.testing.assert_array_equal(_through_wire(tensor).as_numpy(), view)


def test_write_into_a_larger_block_writes_only_the_prefix():
    tensor = pb_utils.Tensor("T", np.arange(3, dtype=np.int32))
    block = bytearray(b"\xff" * 64)
    tensor._write_into(memoryview(block))
    assert bytes(block[:12]) == np.arange(3, dtype="<i4").tobytes()
    assert bytes(block[12:]) == b"\xff" * 52


def test_write_into_a_too_small_block_fails():
    tensor = pb_utils.Tensor("T", np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError, match="needs 12 bytes"):
        tensor._write_into(memoryview(bytearray(8)))


def test_input_from_buffer_is_a_zero_copy_view():
    buffer = bytearray(np.arange(4, dtype=np.float32).tobytes())
    tensor = Tensor._from_buffer("IN", "FP32", [2, 2], memoryview(buffer))
    array = tensor.as_numpy()
    assert array.shape == (2, 2) and array.dtype == np.float32
    buffer[:4] = np.float32(42).tobytes()
    assert array[0, 0] == 42
    assert tensor._array_or_none() is array


def test_output_array_is_exposed_for_the_zero_copy_check():
    array = np.zeros(4, dtype=np.int64)
    assert pb_utils.Tensor("OUT", array)._array_or_none() is array
    assert pb_utils.Tensor("S", np.array([b"x"], dtype=np.object_))._array_or_none() is None


def test_buffer_of_the_wrong_size_is_refused():
    with pytest.raises(pb_utils.TritonModelException, match="needs 16 bytes, the buffer holds 12"):
        Tensor._from_buffer("IN", "FP32", [4], memoryview(bytearray(12)))


def test_unknown_datatype_is_refused():
    with pytest.raises(pb_utils.TritonModelException, match="unknown datatype 'FP8'"):
        Tensor._from_buffer("IN", "FP8", [1], memoryview(bytearray(1)))


BYTES_CASES = {
    "bytes": np.array([b"alpha", b"", b"\x00\xffbin\x00"], dtype=np.object_),
    "empty_strings": np.array([b"", b""], dtype=np.object_),
    "non_ascii_str": np.array(["héllo", "日本語", "🙂"], dtype=np.object_),
    "zero_elements": np.empty((0,), dtype=np.object_),
    "zero_rows": np.empty((0, 3), dtype=np.object_),
    "2d": np.array([[b"a", b"bb"], [b"ccc", b""]], dtype=np.object_),
    "scalar": np.array(b"only", dtype=np.object_),
    "bytes_dtype": np.array([b"ab", b"c"], dtype=np.bytes_),
    "str_dtype": np.array(["ab", "ü"], dtype=np.str_),
    "transposed": np.array([[b"a", b"b", b"c"], [b"d", b"e", b"f"]], dtype=np.object_).T,
}


def _as_bytes(array: np.ndarray) -> np.ndarray:
    return (
        np.vectorize(
            lambda v: v if isinstance(v, bytes) else str(v).encode("utf-8"), otypes=[np.object_]
        )(array)
        if array.size
        else array.astype(np.object_)
    )


@pytest.mark.parametrize("array", BYTES_CASES.values(), ids=BYTES_CASES.keys())
def test_bytes_round_trip(array):
    tensor = pb_utils.Tensor("S", array)
    assert tensor._datatype == "BYTES"
    assert tensor.triton_dtype() == 13
    assert tensor.as_numpy() is array  # a model's own array comes back as it gave it
    back = _through_wire(tensor)
    decoded = back.as_numpy()
    assert decoded.dtype == np.object_
    assert decoded.shape == array.shape
    assert all(type(v) is bytes for v in decoded.flat)
    np.testing.assert_array_equal(decoded, _as_bytes(array))
    assert back.as_numpy() is decoded  # decoded once, then cached


@pytest.mark.parametrize("array", BYTES_CASES.values(), ids=BYTES_CASES.keys())
def test_bytes_wire_form_matches_tritonclient(array):
    expected = tc.serialize_byte_tensor(np.ascontiguousarray(_as_bytes(array)))
    expected_bytes = expected.item() if expected.size else b""
    tensor = pb_utils.Tensor("S", array)
    assert tensor._wire_nbytes() == len(expected_bytes)
    block = bytearray(len(expected_bytes))
    tensor._write_into(memoryview(block))
    assert bytes(block) == expected_bytes


def test_bytes_input_is_decoded_lazily():
    payload = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)
    tensor = Tensor._from_buffer("S", "BYTES", [2], memoryview(bytearray(payload)))
    assert tensor._array is None
    assert tensor._wire_nbytes() == len(payload)
    assert tensor.as_numpy().tolist() == [b"hi", b""]


@pytest.mark.parametrize(
    ("payload", "shape", "message"),
    [
        (b"\x05\x00", [1], "truncated length prefix"),
        (struct.pack("<I", 9) + b"abc", [1], "declares 9 bytes but only 3 remain"),
        (struct.pack("<I", 1) + b"a", [2], r"shape \[2\] needs 2 elements, the data holds 1"),
    ],
)
def test_malformed_bytes_input_raises_a_clear_error(payload, shape, message):
    tensor = Tensor._from_buffer("S", "BYTES", shape, memoryview(bytearray(payload)))
    with pytest.raises(pb_utils.TritonModelException, match=message):
        tensor.as_numpy()


def test_empty_name_is_refused():
    with pytest.raises(
        pb_utils.TritonModelException, match="Tensor name cannot be an empty string."
    ):
        pb_utils.Tensor("", np.zeros(1))


@pytest.mark.parametrize("dtype", [np.complex64, "datetime64[s]", ">f4", "V4"])
def test_unsupported_numpy_dtype_is_refused(dtype):
    with pytest.raises(pb_utils.TritonModelException, match="NumPy dtype is not supported."):
        pb_utils.Tensor("T", np.zeros(2, dtype=dtype))


@pytest.mark.parametrize("array", [[[1, 2], [3, 4]], None, np.float32(1.0)])
def test_only_a_numpy_array_makes_a_tensor_as_in_triton(array):
    with pytest.raises(TypeError, match="numpy.ndarray"):
        pb_utils.Tensor("T", array)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        pb_utils.Tensor("", array)  # the array is looked at before the name


def test_accessors():
    tensor = pb_utils.Tensor("T", np.zeros((2, 3), dtype=np.float16))
    assert tensor.name() == "T"
    assert tensor.shape() == [2, 3] and all(type(d) is int for d in tensor.shape())
    assert tensor.triton_dtype() == 10
    assert tensor.is_cpu()
    assert tensor.__dlpack_device__() == (1, 0)


# -- BF16 -------------------------------------------------------------------------------

BF16_BITS = np.array([0x3FC0, 0x4000, 0xC040], dtype=np.uint16)  # 1.5, 2.0, -3.0


def _bf16_input() -> Tensor:
    return Tensor._from_buffer("B", "BF16", [3], memoryview(bytearray(BF16_BITS.tobytes())))


def test_bf16_refuses_numpy_with_tritons_message():
    with pytest.raises(
        pb_utils.TritonModelException,
        match="Tensor dtype is BF16 and cannot be "
        r"converted to NumPy. Use to_dlpack\(\) and from_dlpack\(\) instead.",
    ):
        _bf16_input().as_numpy()


def test_bf16_travels_by_dlpack_and_over_the_wire():
    tensor = _bf16_input()
    assert tensor.triton_dtype() == 14
    copy = pb_utils.Tensor.from_dlpack("C", tensor.to_dlpack())
    assert copy._datatype == "BF16"
    np.testing.assert_array_equal(copy._array_or_none(), BF16_BITS)
    assert bytes(_wire_bytes(copy)) == BF16_BITS.tobytes()


def _wire_bytes(tensor: Tensor) -> bytes:
    block = bytearray(tensor._wire_nbytes())
    tensor._write_into(memoryview(block))
    return bytes(block)


def test_bf16_capsule_is_labelled_bfloat16():
    capsule = _bf16_input().to_dlpack()
    tensor = dlpack._managed(capsule).dl_tensor
    assert (tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes) == (4, 16, 1)


# -- DLPack -----------------------------------------------------------------------------


@pytest.mark.parametrize("dt", FIXED, ids=lambda d: d.name)
def test_numpy_consumes_tensors_through_dlpack(dt):
    array = _sample(dt, (2, 3))
    tensor = pb_utils.Tensor("T", array)
    np.testing.assert_array_equal(np.from_dlpack(tensor), array)
    view = np.from_dlpack(_through_wire(tensor))
    np.testing.assert_array_equal(view, array)


@pytest.mark.parametrize("dt", FIXED, ids=lambda d: d.name)
def test_from_dlpack_is_zero_copy(dt):
    array = _sample(dt, (3, 2))
    for source in (array, array.__dlpack__()):
        tensor = pb_utils.Tensor.from_dlpack("D", source)
        assert tensor._datatype == dt.name
        assert tensor.shape() == [3, 2]
        assert np.shares_memory(tensor.as_numpy(), array)
        np.testing.assert_array_equal(tensor.as_numpy(), array)


def test_to_dlpack_round_trip_shares_memory():
    array = np.arange(6, dtype=np.float32)
    tensor = pb_utils.Tensor("T", array)
    again = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    assert np.shares_memory(again.as_numpy(), array)


def test_non_contiguous_tensor_exports_its_strides():
    view = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(np.from_dlpack(pb_utils.Tensor("T", view)), view)


def test_read_only_memory_can_be_exported():
    array = np.frombuffer(bytes(8), dtype=np.float32)
    np.testing.assert_array_equal(np.from_dlpack(pb_utils.Tensor("T", array)), [0, 0])


def test_from_dlpack_refuses_non_contiguous():
    with pytest.raises(pb_utils.TritonModelException, match="DLPack tensor is not contiguous."):
        pb_utils.Tensor.from_dlpack("D", np.arange(12.0).reshape(3, 4).T)


def test_from_dlpack_accepts_size_one_dims_with_any_stride_and_empty_tensors():
    odd = np.arange(4.0).reshape(4, 1)[:, :1]
    assert pb_utils.Tensor.from_dlpack("D", odd).shape() == [4, 1]
    empty = pb_utils.Tensor.from_dlpack("E", np.zeros((0, 3), dtype=np.int8))
    assert empty.shape() == [0, 3] and empty.as_numpy().size == 0


def test_from_dlpack_refuses_what_is_not_dlpack():
    with pytest.raises(pb_utils.TritonModelException, match="Provided tensor is not supported."):
        pb_utils.Tensor.from_dlpack("D", [1, 2, 3])


def test_from_dlpack_refuses_unsupported_element_types():
    with pytest.raises(pb_utils.TritonModelException, match="unsupported data type"):
        pb_utils.Tensor.from_dlpack("D", np.zeros(2, dtype=np.complex64))


def test_a_capsule_is_consumed_once():
    capsule = pb_utils.Tensor("T", np.zeros(2)).to_dlpack()
    pb_utils.Tensor.from_dlpack("A", capsule)
    with pytest.raises(pb_utils.TritonModelException, match="already consumed"):
        pb_utils.Tensor.from_dlpack("B", capsule)


def test_bytes_tensors_have_no_dlpack():
    tensor = pb_utils.Tensor("S", np.array([b"x"], dtype=np.object_))
    with pytest.raises(
        pb_utils.TritonModelException, match="DLPack does not have support for string tensors."
    ):
        tensor.to_dlpack()


def test_exported_memory_is_released_by_consumer_or_by_garbage_collection():
    before = len(dlpack._exported)
    tensor = pb_utils.Tensor("T", np.arange(3.0))
    consumed = np.from_dlpack(tensor)
    unconsumed = tensor.to_dlpack()
    assert len(dlpack._exported) == before + 2
    del consumed, unconsumed
    gc.collect()
    assert len(dlpack._exported) == before


def test_imported_producer_is_released_when_the_view_dies():
    tensor = pb_utils.Tensor.from_dlpack("D", pb_utils.Tensor("T", np.arange(3.0)).to_dlpack())
    before = len(dlpack._exported)
    del tensor
    gc.collect()
    assert len(dlpack._exported) == before - 1


class _CudaLike:
    def __dlpack__(self, stream=None):
        raise AssertionError("must not be consumed without CuPy")

    def __dlpack_device__(self):
        return (2, 0)


def test_cuda_tensors_need_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(pb_utils.TritonModelException, match="needs CuPy"):
            pb_utils.Tensor.from_dlpack("G", _CudaLike())
    else:
        pytest.skip("CuPy is installed: the GPU path belongs to tests/gpu")


def test_an_input_over_a_descriptors_bytes_is_a_view_with_from_buffers_checks():
    buffer = bytearray(np.arange(6, dtype=np.float32).tobytes())
    tensor = Tensor._over_bytes("IN", "FP32", [2, 3], memoryview(buffer))
    assert tensor.shape() == [2, 3] and tensor.as_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    buffer[:4] = np.float32(9).tobytes()
    assert tensor.as_numpy()[0, 0] == 9  # a view: nothing copied
    strings = Tensor._over_bytes("S", "BYTES", [1], memoryview(bytearray(b"\1\0\0\0x")))
    assert strings.as_numpy().tolist() == [b"x"]
    with pytest.raises(pb_utils.TritonModelException, match="cannot be an empty string"):
        Tensor._over_bytes("", "FP32", [0], memoryview(b""))
    with pytest.raises(pb_utils.TritonModelException, match="negative dimension in \\[-1\\]"):
        Tensor._over_bytes("IN", "FP32", [-1], memoryview(b""))
    with pytest.raises(pb_utils.TritonModelException, match="needs 24 bytes, the buffer holds 4"):
        Tensor._over_bytes("IN", "FP32", [2, 3], memoryview(buffer)[:4])
    with pytest.raises(pb_utils.TritonModelException, match="unknown datatype 'FP8'"):
        Tensor._over_bytes("IN", "FP8", [1], memoryview(b"\0"))
