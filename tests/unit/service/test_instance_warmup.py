"""model_warmup's samples as Triton makes them: data, shapes, skipped samples and the errors
that fail a load before any worker starts (the running is tests/integration/test_warmup.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pbd.errors import Code, PbdError
from pbd.instance.warmup import WarmupInput, WarmupSample, warmup_samples
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import parse_model_config

IO = """max_batch_size: {mbs}
input [ { name: "A" data_type: TYPE_FP32 dims: [ 2 ] } ]
input [ { name: "S" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _config(warmup: str, mbs: int = 4) -> ModelConfig:
    text = IO.replace("{mbs}", str(mbs)) + f"model_warmup [ {warmup} ]"
    return parse_model_config(text, model_name="m", source="m/config.pbtxt")


def _sample(a: str, s: str = "zero_data: true", extra: str = "") -> str:
    return (
        f'{{ name: "w" batch_size: 2 {extra} '
        f'inputs {{ key: "A" value: {{ data_type: TYPE_FP32 dims: [ 2 ] {a} }} }} '
        f'inputs {{ key: "S" value: {{ data_type: TYPE_STRING dims: [ 2 ] {s} }} }} }}'
    )


def _by_name(sample: WarmupSample) -> tuple[WarmupInput, WarmupInput]:
    inputs = {i.name: i for i in sample.inputs}
    return inputs["A"], inputs["S"]


def test_zero_and_random_data_with_the_batch_dimension(tmp_path: Path) -> None:
    (sample,) = warmup_samples(_config(_sample("random_data: true", "random_data: true")), tmp_path)
    a, s = _by_name(sample)
    assert (sample.batch_size, sample.count) == (2, 1)  # count 0 runs once, as in Triton
    assert (a.datatype, a.shape, len(a.data)) == ("FP32", (1, 2), 8)
    assert (s.datatype, s.shape, s.data) == ("BYTES", (1, 2), bytes(8))  # two empty strings


def test_no_batch_dimension_without_batching(tmp_path: Path) -> None:
    (sample,) = warmup_samples(_config(_sample("zero_data: true"), mbs=0), tmp_path)
    a, _ = _by_name(sample)
    assert a.shape == (2,) and a.data == bytes(8)


def test_files_first_bytes_and_whole_bytes_files(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "a.bin").write_bytes(struct.pack("<3f", 1, 2, 3))
    strings = struct.pack("<I", 2) + b"hi" + struct.pack("<I", 0)
    (tmp_path / "warmup" / "s.bin").write_bytes(strings)
    warmup = _sample('input_data_file: "a.bin"', 'input_data_file: "s.bin"')
    a, s = _by_name(warmup_samples(_config(warmup), tmp_path)[0])
    assert a.data == struct.pack("<2f", 1, 2)  # the tensor's 8 bytes of the file's 12
    assert s.data == strings


def test_a_zero_batch_sample_is_skipped(tmp_path: Path) -> None:
    skipped = _sample("zero_data: true").replace("batch_size: 2", "batch_size: 0")
    assert warmup_samples(_config(skipped), tmp_path) == []


@pytest.mark.parametrize(
    ("warmup", "code", "message"),
    [
        (
            _sample("zero_data: true").replace("dims: [ 2 ] zero", "dims: [ -1 ] zero", 1),
            Code.INVALID_ARG,
            "warmup setting expects all variable-size dimensions are specified for input 'A'",
        ),
        (
            _sample(""),
            Code.INVALID_ARG,
            "[request id: <id_unknown>] warmup setting expects input 'A' to have "
            "input_data_type set",
        ),
        (
            _sample('input_data_file: "none.bin"'),
            Code.INTERNAL,
            "failed to open text file for read {dir}/warmup/none.bin: No such file or directory",
        ),
        (
            _sample("zero_data: true").replace("TYPE_FP32", "TYPE_INT32"),
            Code.INVALID_ARG,
            "[request id: <id_unknown>] inference input 'A' data-type is 'INT32', but model 'm' "
            "expects 'FP32'",
        ),
    ],
)
def test_errors_before_the_worker_starts(
    tmp_path: Path, warmup: str, code: Code, message: str
) -> None:
    with pytest.raises(PbdError) as info:
        warmup_samples(_config(warmup), tmp_path)
    assert info.value.code is code
    assert info.value.message == message.format(dir=tmp_path)
