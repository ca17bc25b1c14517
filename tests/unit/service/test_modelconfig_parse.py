from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_samples import ADD_SUB
from config_samples import parse as _parse
from google.protobuf import json_format

from pbd._proto import model_config_pb2 as mc
from pbd.modelconfig.model import InstanceGroupConfig, TensorConfig, VersionPolicy
from pbd.modelconfig.parse import ConfigError, load_model_config, model_config_from_json
from pbd_wire import dtypes


def test_add_sub() -> None:
    config = _parse(ADD_SUB, "add_sub")
    assert (config.name, config.backend, config.platform) == ("add_sub", "python", "")
    assert config.max_batch_size == 0
    assert config.inputs == (
        TensorConfig("INPUT0", "FP32", (4,), None),
        TensorConfig("INPUT1", "FP32", (4,), None),
    )
    assert [o.name for o in config.outputs] == ["OUTPUT0", "OUTPUT1"]
    assert config.instance_groups == (InstanceGroupConfig("add_sub_0", "KIND_CPU", 1, ()),)
    assert config.version_policy == VersionPolicy("latest", num_versions=1)
    assert config.default_model_filename == "model.py"
    assert config.parameters == {}
    assert config.decoupled is False
    assert config.input("INPUT1") == config.inputs[1]
    assert config.output("OUTPUT0") == config.outputs[0]
    assert config.input("OUTPUT0") is None and config.output("nope") is None


def test_list_and_repeated_syntax_read_alike() -> None:
    repeated = """
    input { name: "A" data_type: TYPE_INT32 dims: 2 dims: -1 }
    input { name: "B" data_type: TYPE_BOOL dims: 1 }
    """
    listed = """
    input [ { name: "A", data_type: TYPE_INT32, dims: [ 2, -1 ] },
            { name: "B"; data_type: TYPE_BOOL; dims: [ 1 ] } ]
    """
    assert _parse(repeated).inputs == _parse(listed).inputs
    assert _parse(listed).inputs[0] == TensorConfig("A", "INT32", (2, -1), None)


def test_comments_and_colon_before_messages() -> None:
    config = _parse(
        """
        # a comment
        max_batch_size: 2  # trailing comment
        input: [ { name: "X" data_type: TYPE_UINT8 dims: [ 3 ] reshape: { shape: [ 3, 1 ] } } ]
        model_transaction_policy: { decoupled: True }
        """
    )
    assert config.inputs[0].reshape == (3, 1)
    assert config.decoupled is True


def test_parameters_map() -> None:
    config = _parse(
        """
        parameters {
          key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/e" }
        }
        parameters: [ { key: "a" value { string_value: "1" } }, { key: "empty" value: {} } ]
        """
    )
    assert dict(config.parameters) == {
        "EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/e",
        "a": "1",
        "empty": "",
    }
    with pytest.raises(TypeError):
        config.parameters["b"] = "2"  # type: ignore[index]


@pytest.mark.parametrize("datatype", dtypes.ALL, ids=lambda d: d.config_name)
def test_data_types_by_name_and_number(datatype: dtypes.DataType) -> None:
    by_name = _parse(f'output [ {{ name: "O" data_type: {datatype.config_name} dims: [ 1 ] }} ]')
    by_number = _parse(f'output [ {{ name: "O" data_type: {datatype.config_number} dims: [1] }} ]')
    assert by_name.outputs[0].datatype == datatype.name
    assert by_number.outputs == by_name.outputs


def test_type_string_is_bytes() -> None:
    config = _parse('input [ { name: "S" data_type: TYPE_STRING dims: [ -1 ] optional: true } ]')
    assert config.inputs[0] == TensorConfig("S", "BYTES", (-1,), None, optional=True)


def test_optional_applies_to_inputs_only() -> None:
    # ModelOutput has no 'optional' field: the text format refuses it.
    with pytest.raises(ConfigError, match='no field named "optional"'):
        _parse('output [ { name: "O" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]')


def test_instance_groups() -> None:
    config = _parse(
        """
        instance_group [
          { count: 2 kind: KIND_CPU },
          { name: "gpu_group" kind: KIND_GPU gpus: [ 0, 1 ] },
          { kind: KIND_MODEL count: 0 },
          { }
        ]
        """
    )
    assert config.instance_groups == (
        InstanceGroupConfig("m_0", "KIND_CPU", 2, ()),
        InstanceGroupConfig("gpu_group", "KIND_GPU", 1, (0, 1)),
        InstanceGroupConfig("m_2", "KIND_MODEL", 1, ()),
        InstanceGroupConfig("m_3", "KIND_AUTO", 1, ()),
    )


def test_default_instance_group_is_named_after_the_model() -> None:
    # Triton's NormalizeInstanceGroup: the group it adds takes the model's name; KIND_AUTO
    # is left for the daemon, which knows whether there is a GPU.
    config = _parse("", "plain")
    assert config.instance_groups == (InstanceGroupConfig("plain", "KIND_AUTO", 1, ()),)


def test_defaults() -> None:
    config = _parse("", "from_dir")
    assert config.name == "from_dir"
    assert config.backend == "python"
    assert config.default_model_filename == "model.py"
    assert config.version_policy == VersionPolicy("latest", num_versions=1)
    assert config.as_dict["optimization"]["input_pinned_memory"] == {"enable": True}
    assert config.as_dict["optimization"]["output_pinned_memory"] == {"enable": True}
    assert "dynamic_batching" not in config.as_dict
    assert "sequence_batching" not in config.as_dict


def test_explicit_values_are_kept() -> None:
    config = _parse(
        """
        name: "m" default_model_filename: "entry.py"
        optimization { input_pinned_memory { enable: false } }
        """
    )
    assert config.default_model_filename == "entry.py"
    assert config.as_dict["optimization"]["input_pinned_memory"] == {"enable": False}


def test_batching_defaults_follow_triton() -> None:
    dynamic = _parse("max_batch_size: 8 dynamic_batching { }")
    assert dynamic.as_dict["dynamic_batching"]["preferred_batch_size"] == [8]
    assert _parse("dynamic_batching { }").as_dict["dynamic_batching"]["preferred_batch_size"] == []
    given = _parse("max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 4 ] }")
    assert given.as_dict["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    sequence = _parse("max_batch_size: 4 sequence_batching { oldest { } }").as_dict
    assert sequence["sequence_batching"]["max_sequence_idle_microseconds"] == 1_000_000
    assert sequence["sequence_batching"]["oldest"]["preferred_batch_size"] == [4]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", VersionPolicy("latest", num_versions=1)),
        ("version_policy: { latest: { num_versions: 2 } }", VersionPolicy("latest", 2)),
        ("version_policy: { all: {} }", VersionPolicy("all")),
        ("version_policy { all { } }", VersionPolicy("all")),
        (
            "version_policy: { specific: { versions: [ 3, 1, 3 ] } }",
            VersionPolicy("specific", versions=(1, 3)),
        ),
    ],
)
def test_version_policies(text: str, expected: VersionPolicy) -> None:
    assert _parse(text).version_policy == expected


@pytest.mark.parametrize(
    ("policy", "available", "selected"),
    [
        (VersionPolicy("latest"), [3, 1, 2], [3]),
        (VersionPolicy("latest", num_versions=2), [5, 1, 9, 2], [5, 9]),
        (VersionPolicy("latest", num_versions=5), [2, 1], [1, 2]),
        (VersionPolicy("all"), [3, 1, 2, 2], [1, 2, 3]),
        (VersionPolicy("specific", versions=(1, 3, 7)), [1, 2, 3], [1, 3]),
        (VersionPolicy("specific", versions=(7,)), [1, 2], []),
        (VersionPolicy("latest"), [], []),
    ],
)
def test_version_policy_select(policy: VersionPolicy, available: list[int], selected: list[int]):
    assert policy.select(iter(available)) == selected


FULL = """
name: "full"
backend: "python"
max_batch_size: 16
version_policy: { specific: { versions: [ 2, 4 ] } }
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1, 6 ] reshape: { shape: [ -1, 2, 3 ] } } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { default_timeout_microseconds: 5000 }
  priority_queue_policy { key: 2 value: { default_timeout_microseconds: 7 max_queue_size: 3 } }
}
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ]
                   secondary_devices [ { kind: KIND_NVDLA device_id: 3 } ] } ]
model_warmup [ { name: "w" batch_size: 1
                 inputs { key: "IN"
                          value: { data_type: TYPE_FP32 dims: [ 2, 6 ] zero_data: true } } } ]
parameters { key: "k" value: { string_value: "v" } }
model_transaction_policy { decoupled: true }
"""


def test_json_form_prints_64_bit_integers_as_numbers() -> None:
    doc = _parse(FULL, "full").as_dict
    assert doc["input"][0]["dims"] == [-1, 6]
    assert doc["input"][0]["reshape"] == {"shape": [-1, 2, 3]}
    assert doc["output"][0]["dims"] == [1]
    assert doc["version_policy"] == {"specific": {"versions": [2, 4]}}
    batching = doc["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 100
    assert (batching["priority_levels"], batching["default_priority_level"]) == (2, 1)
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 5000
    # JSON object keys are strings, so a uint64 map key stays one (as in Triton).
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 7
    assert doc["instance_group"][0]["secondary_devices"] == [{"kind": "KIND_NVDLA", "device_id": 3}]
    assert doc["model_warmup"][0]["inputs"]["IN"]["dims"] == [2, 6]
    assert doc["max_batch_size"] == 16  # int32: a number already


def test_json_form_prints_fields_with_no_presence() -> None:
    doc = _parse(ADD_SUB, "add_sub").as_dict
    assert doc["platform"] == "" and doc["runtime"] == ""
    assert doc["max_batch_size"] == 0
    assert doc["batch_input"] == [] and doc["model_warmup"] == []
    assert doc["cc_model_filenames"] == {} and doc["parameters"] == {}
    assert doc["input"][0] == {
        "name": "INPUT0",
        "data_type": "TYPE_FP32",
        "format": "FORMAT_NONE",
        "dims": [4],
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
        "is_non_linear_format_io": False,
    }
    assert doc["instance_group"] == [
        {
            "name": "add_sub_0",
            "kind": "KIND_CPU",
            "count": 1,
            "gpus": [],
            "secondary_devices": [],
            "profile": [],
            "passive": False,
            "host_policy": "",
        }
    ]
    # Keys follow the .proto declaration order, as Triton prints them.
    assert list(doc)[:6] == [
        "name",
        "platform",
        "backend",
        "runtime",
        "version_policy",
        "max_batch_size",
    ]


@pytest.mark.parametrize("text", [ADD_SUB, FULL, ""], ids=["add_sub", "full", "empty"])
def test_json_form_round_trips(text: str) -> None:
    name = {ADD_SUB: "add_sub", FULL: "full"}.get(text, "m")
    config = _parse(text, name)
    assert json.loads(config.to_json()) == config.as_dict
    # What the ModelConfig RPC does with it.
    message = json_format.ParseDict(config.as_dict, mc.ModelConfig())
    assert message.name == name
    again = model_config_from_json(config.to_json(), model_name=name, source="override")
    assert again == config


def test_json_parameter_form() -> None:
    # RepositoryModelLoad's 'config': the JSON form, int64 written as numbers or strings.
    text = json.dumps(
        {
            "backend": "python",
            "max_batch_size": 2,
            "input": [{"name": "A", "data_type": "TYPE_INT64", "dims": ["-1"]}],
            "instanceGroup": [{"count": 3, "kind": "KIND_CPU"}],
        }
    )
    config = model_config_from_json(text, model_name="j", source="j (override)")
    assert config.name == "j"
    assert config.inputs == (TensorConfig("A", "INT64", (-1,), None),)
    assert config.instance_groups == (InstanceGroupConfig("j_0", "KIND_CPU", 3, ()),)


def test_load_from_directory(tmp_path: Path) -> None:
    model_dir = tmp_path / "add_sub"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text(ADD_SUB)
    config = load_model_config(model_dir)
    assert config == _parse(ADD_SUB, "add_sub")


def test_load_with_override_ignores_the_file(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.pbtxt").write_text("this is not protobuf text")
    config = load_model_config(model_dir, override_json='{"max_batch_size": 4}')
    assert config.max_batch_size == 4
    with pytest.raises(ConfigError, match=r"\('config' parameter\): max_batch_size must be"):
        load_model_config(model_dir, override_json='{"max_batch_size": -4}')


def test_missing_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model_config(tmp_path / "m")
    assert info.value.message == f"{tmp_path / 'm'}: missing config.pbtxt"


def test_unreadable_config(tmp_path: Path) -> None:
    (tmp_path / "m" / "config.pbtxt").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"config.pbtxt: cannot read: "):
        load_model_config(tmp_path / "m")
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "config.pbtxt").write_bytes(b"name: \xff")
    with pytest.raises(ConfigError, match=r"n/config.pbtxt: cannot read: "):
        load_model_config(tmp_path / "n")
