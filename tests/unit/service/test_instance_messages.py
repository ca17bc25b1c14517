"""pbd.instance.messages: a model instance's Initialize (Triton's initialize() arguments) and a
batch's Execute (inputs copied into the instance's arena once, or only described)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from instance_samples import model_config
from scheduling_samples import prepared

from pbd.errors import Code, PbdError
from pbd.instance.memory import InstanceMemory
from pbd.instance.messages import execute_message, initialize_message
from pbd.instance.records import InstancePlan
from pbd.settings import Settings
from pbd.types import PreparedInput
from pbd_wire.shm import Block


def test_initialize_carries_tritons_initialize_arguments(tmp_path: Path) -> None:
    settings = Settings(shm_dir=tmp_path)
    memory = InstanceMemory("pbdtest-init", settings)
    try:
        init = initialize_message(
            model_config(), 3, InstancePlan("m_1", "CPU", 0), tmp_path / "m", settings, memory
        )
        assert dict(init.args) == {
            "model_config": model_config().to_json(),
            "model_instance_kind": "CPU",
            "model_instance_name": "m_1",
            "model_instance_device_id": "0",
            "model_repository": str(tmp_path / "m"),
            "model_version": "3",
            "model_name": "m",
        }
        assert init.model_path == str(tmp_path / "m" / "3" / "model.py")
        assert init.output_region_prefix == memory.output_prefix
        assert init.cancel_region == memory.cancel.name
        assert json.loads(init.args["model_config"])["name"] == "m"
    finally:
        memory.close()


def test_an_execute_copies_each_input_once_into_the_arena(tmp_path: Path) -> None:
    memory = InstanceMemory("pbdtest-exec", Settings(shm_dir=tmp_path))
    try:
        request = prepared(0)
        request.inputs = [PreparedInput("X", "FP32", (2,), memoryview(b"\1\0\0\0\2\0\0\0"))]
        blocks: list[Block] = []
        frame = execute_message(memory, 5, [request], [9], blocks)
        (sent,) = frame.execute.requests
        assert frame.execute.batch_id == 5 and sent.request_id == 9
        (ref,) = sent.inputs
        assert (ref.name, ref.nbytes, len(blocks)) == ("X", 8, 1)
        assert bytes(blocks[0].view()) == b"\1\0\0\0\2\0\0\0"
        memory.free(blocks)
    finally:
        memory.close()


def test_an_execute_protobuf_refuses_frees_what_it_took(tmp_path: Path) -> None:
    memory = InstanceMemory("pbdtest-refused", Settings(shm_dir=tmp_path))
    try:
        first, second = prepared(0), prepared(1)
        first.inputs = [PreparedInput("X", "FP32", (2,), memoryview(bytes(8)))]
        second.request.id = "\udc80"  # not UTF-8: validation lets it through, protobuf not
        blocks: list[Block] = []
        with pytest.raises(PbdError) as caught:
            execute_message(memory, 5, [first, second], [1, 2], blocks)
        assert caught.value.code is Code.INVALID_ARG and blocks == []
        assert caught.value.message.startswith("request cannot reach the model: ")
        assert memory.arena.used == 0
    finally:
        memory.close()
