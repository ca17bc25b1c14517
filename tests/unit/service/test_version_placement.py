"""Triton's instance placement, as a pure function of the config and the visible GPUs."""

from __future__ import annotations

import pytest

from pbd.errors import Code, PbdError
from pbd.gpus import visible_gpus
from pbd.modelconfig.parse import parse_model_config
from pbd.version.placement import normalize_instance_groups, plan_instances


def _config(groups: str):
    text = f'name: "m" backend: "python" {groups}'
    return parse_model_config(text, model_name="m", source="m/config.pbtxt")


def _plans(groups: str, gpus: list[int]):
    return [(p.name, p.kind, p.device_id) for p in plan_instances(_config(groups), gpus)]


def test_gpu_groups_place_count_instances_on_each_listed_gpu():
    groups = "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0, 2 ] }, { kind: KIND_CPU } ]"
    assert _plans(groups, [0, 1, 2]) == [
        ("m_0_0", "GPU", 0),
        ("m_0_1", "GPU", 0),
        ("m_0_2", "GPU", 2),
        ("m_0_3", "GPU", 2),
        ("m_1_0", "CPU", 0),
    ]


def test_gpu_group_without_a_list_uses_every_gpu():
    assert _plans("instance_group [ { kind: KIND_GPU } ]", [0, 1]) == [
        ("m_0_0", "GPU", 0),
        ("m_0_1", "GPU", 1),
    ]


def test_auto_falls_back_to_cpu_without_gpus_and_uses_them_when_present():
    assert _plans("instance_group [ { count: 2 } ]", []) == [
        ("m_0_0", "CPU", 0),
        ("m_0_1", "CPU", 0),
    ]
    assert _plans("instance_group [ { count: 1 } ]", [0]) == [("m_0_0", "GPU", 0)]
    assert _plans("instance_group [ { kind: KIND_MODEL } ]", []) == [("m_0_0", "MODEL", 0)]


def test_kind_gpu_without_a_gpu_is_a_clear_load_error():
    with pytest.raises(PbdError) as info:
        plan_instances(_config("instance_group [ { kind: KIND_GPU } ]"), [])
    assert info.value.code is Code.INVALID_ARG
    assert "has kind KIND_GPU, but no GPU is available" in info.value.message
    with pytest.raises(PbdError, match="names GPU 3"):
        plan_instances(_config("instance_group [ { kind: KIND_GPU gpus: [ 3 ] } ]"), [0])


def test_visible_gpus_follow_the_driver_and_cuda_visible_devices(tmp_path):
    for i in range(3):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
    assert visible_gpus({}, str(tmp_path)) == [0, 1, 2]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,0"}, str(tmp_path)) == [0, 1]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,7,0"}, str(tmp_path)) == [0]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(tmp_path)) == []


def _groups(groups: str, gpus: list[int]):
    config = normalize_instance_groups(_config(groups), gpus)
    assert [(g.kind, g.gpus) for g in config.instance_groups] == [
        (g["kind"], tuple(g["gpus"])) for g in config.as_dict["instance_group"]
    ]  # the JSON form models get and clients read says the same
    return [(g.name, g.kind, g.gpus) for g in config.instance_groups]


def test_normalized_config_names_the_kind_auto_resolves_to():
    # Triton's NormalizeInstanceGroup: KIND_AUTO is CPU without a GPU, GPU (all of them) with.
    assert _groups("", []) == [("m", "KIND_CPU", ())]
    assert _groups("instance_group [ { count: 2 } ]", [0, 1]) == [("m_0", "KIND_GPU", (0, 1))]
    assert _groups("instance_group [ { kind: KIND_GPU } ]", [0, 1]) == [("m_0", "KIND_GPU", (0, 1))]


def test_normalizing_keeps_what_is_already_explicit():
    explicit = "{ kind: KIND_CPU }, { kind: KIND_GPU gpus: [ 1 ] }, { kind: KIND_MODEL }"
    config = _config(f"instance_group [ {explicit} ]")
    assert normalize_instance_groups(config, [0, 1]) is config
    # A GPU group on a machine without one stays as written; placing it is the error.
    gpu_only = _config("instance_group [ { kind: KIND_GPU } ]")
    assert normalize_instance_groups(gpu_only, []) is gpu_only
