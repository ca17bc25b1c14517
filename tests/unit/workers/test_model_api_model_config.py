"""pb_utils.ModelConfig: what auto_complete_config may fill in, and Triton's conflict errors."""

from __future__ import annotations

import json

import pytest

import triton_python_backend_utils as pb_utils


def config(**fields: object) -> pb_utils.ModelConfig:
    base = {"name": "m", "max_batch_size": 0, "input": [], "output": []}
    base.update(fields)
    return pb_utils.ModelConfig(json.dumps(base))


FP32_4 = {"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}


def test_as_dict_is_the_live_configuration() -> None:
    c = config()
    c.as_dict()["parameters"] = {"k": {"string_value": "v"}}
    assert c.as_dict()["parameters"]["k"]["string_value"] == "v"


def test_a_config_without_inputs_or_outputs_gets_empty_lists() -> None:
    c = pb_utils.ModelConfig('{"name": "m"}')
    assert c.as_dict() == {"name": "m", "max_batch_size": 0, "input": [], "output": []}


def test_set_max_batch_size_raises_but_never_lowers() -> None:
    c = config()
    c.set_max_batch_size(8)
    assert c.as_dict()["max_batch_size"] == 8
    c.set_max_batch_size(16)
    with pytest.raises(ValueError) as info:
        c.set_max_batch_size(4)
    assert str(info.value) == (
        "configuration specified max_batch_size 16, but in auto-complete-config function for "
        "model 'm' specified max_batch_size 4"
    )


def test_add_input_and_output() -> None:
    c = config()
    c.add_input(FP32_4)
    c.add_input({"name": "OPT", "data_type": "TYPE_INT32", "dims": [-1], "optional": True})
    c.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]})
    assert [i["name"] for i in c.as_dict()["input"]] == ["IN", "OPT"]
    assert c.as_dict()["output"] == [{"name": "OUT", "data_type": "TYPE_STRING", "dims": [1]}]


def test_a_tensor_config_left_open_is_completed() -> None:
    c = config(input=[{"name": "IN", "data_type": "TYPE_INVALID", "dims": []}])
    c.add_input(FP32_4)
    assert c.as_dict()["input"] == [FP32_4]


def test_the_same_tensor_again_is_no_change() -> None:
    c = config(input=[dict(FP32_4)])
    c.add_input(FP32_4)
    assert c.as_dict()["input"] == [FP32_4]


def test_datatype_conflict() -> None:
    c = config(input=[{"name": "IN", "data_type": "TYPE_INT32", "dims": [4]}])
    with pytest.raises(ValueError) as info:
        c.add_input(FP32_4)
    assert str(info.value) == (
        "unable to load model 'm', configuration expects datatype TYPE_INT32 for input 'IN', "
        "model provides TYPE_FP32"
    )


def test_dims_conflict() -> None:
    c = config(output=[{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}])
    with pytest.raises(ValueError) as info:
        c.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    assert str(info.value) == (
        "model 'm', tensor 'OUT': the model expects dims [4] but the model configuration "
        "specifies dims [2]"
    )


def test_optional_conflict() -> None:
    c = config(input=[dict(FP32_4, optional=False)])
    with pytest.raises(ValueError, match="the model expects optional True but the model "):
        c.add_input(dict(FP32_4, optional=True))


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (
            {"data_type": "TYPE_FP32", "dims": [1]},
            "input in auto-complete-config function for model 'm' is missing 'name' property.",
        ),
        (
            {"name": "IN", "dims": [1]},
            "input 'IN' in auto-complete-config function for model 'm' is missing 'data_type' "
            "property.",
        ),
        (
            {"name": "IN", "data_type": "TYPE_FP32"},
            "input 'IN' in auto-complete-config function for model 'm' is missing 'dims' property.",
        ),
        (
            dict(FP32_4, format="FORMAT_NHWC"),
            "input 'IN' in auto-complete-config function for model 'm' contains property other "
            "than 'name', 'data_type', 'dims' and 'optional'.",
        ),
    ],
)
def test_malformed_inputs(tensor: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        config().add_input(tensor)
    assert str(info.value) == message


def test_outputs_take_no_optional() -> None:
    with pytest.raises(ValueError) as info:
        config().add_output(dict(FP32_4, optional=True))
    assert str(info.value).endswith("contains property other than 'name', 'data_type' and 'dims'.")


def test_set_dynamic_batching() -> None:
    c = config()
    c.set_dynamic_batching()
    c.set_dynamic_batching()
    assert c.as_dict()["dynamic_batching"] == {}
    preset = config(dynamic_batching={"max_queue_delay_microseconds": 100})
    preset.set_dynamic_batching()
    assert preset.as_dict()["dynamic_batching"] == {"max_queue_delay_microseconds": 100}


def test_set_dynamic_batching_with_another_scheduler() -> None:
    with pytest.raises(ValueError) as info:
        config(sequence_batching={}).set_dynamic_batching()
    assert str(info.value) == (
        "Configuration specified scheduling_choice as 'sequence_batching', but "
        "auto-complete-config function for model 'm' tries to set scheduling_choice as "
        "'dynamic_batching'"
    )


def test_set_model_transaction_policy() -> None:
    c = config()
    c.set_model_transaction_policy({"decoupled": True})
    assert c.as_dict()["model_transaction_policy"] == {"decoupled": True}
    c.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError) as info:
        c.set_model_transaction_policy({"decoupled": False})
    assert str(info.value) == (
        "trying to change decoupled property in auto-complete-config for model 'm', which is "
        "already set to 'True'"
    )
    with pytest.raises(ValueError, match="contains property other than 'decoupled'"):
        c.set_model_transaction_policy({"streaming": True})
