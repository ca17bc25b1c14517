"""config.pbtxt validation: every error names the file and the field."""

from __future__ import annotations

from typing import Any

import pytest
from config_samples import SRC
from config_samples import parse as _parse
from config_samples import tensor as _tensor

from pbd.errors import Code, PbdError
from pbd.modelconfig.parse import ConfigError, model_config_from_json, parse_model_config


def test_errors_are_invalid_arg_pbd_errors() -> None:
    with pytest.raises(PbdError) as info:
        _parse("max_batch_size: -1")
    assert isinstance(info.value, ConfigError)
    assert info.value.code is Code.INVALID_ARG
    assert str(info.value) == info.value.message


@pytest.mark.parametrize(
    "read",
    [
        lambda: _parse("max_batch_size: ["),
        lambda: _parse('name: "other"'),
        lambda: model_config_from_json("{", model_name="m", source="m (override)"),
        lambda: model_config_from_json("[1]", model_name="m", source="m (override)"),
        lambda: model_config_from_json('{"bogus": 1}', model_name="m", source="m (override)"),
    ],
    ids=["text syntax", "other name", "json syntax", "json not an object", "json field"],
)
def test_a_config_triton_cannot_read_is_internal(read: Any) -> None:
    """Triton 2.51 finds these while polling the repository: INTERNAL ("failed to poll from
    model repository"), whatever the client; pbd keeps its message and uses Triton's code."""
    with pytest.raises(ConfigError) as info:
        read()
    assert info.value.code is Code.INTERNAL


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size: [", "invalid model configuration: 1:"),
        ('name: "m"\nbogus: 1', "invalid model configuration: 2:1 : Message type"),
        ("max_batch_size: 1 max_batch_size: 2", 'should not have multiple "max_batch_size"'),
        ("dynamic_batching {} sequence_batching {}", 'another member of oneof "scheduling_choice"'),
        (
            "input [ { data_type: TYPE_KAPUTT } ]",
            'Enum type "inference.DataType" has no value named TYPE_KAPUTT',
        ),
    ],
)
def test_text_format_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert info.value.message.startswith(f"{SRC}: ")
    assert message in info.value.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "invalid model configuration JSON: Expecting property name"),
        ("[1]", "the model configuration JSON must be an object"),
        ('{"bogus": 1}', 'invalid model configuration JSON: Message type "inference.ModelConfig"'),
        ('{"input": [{"dims": [1.5]}]}', "invalid model configuration JSON: Failed to parse"),
        # Found by tests/fuzz: json's RecursionError escaped RepositoryModelLoad.
        pytest.param(
            "[" * 100_000, "invalid model configuration JSON: maximum recursion", id="deep"
        ),
    ],
)
def test_json_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        model_config_from_json(text, model_name="m", source="m (override)")
    assert info.value.message.startswith("m (override): " + message)


DIMS_RULE = "each dimension must be an integer >= 1, or -1 for a variable-size dimension"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'name: "other"',
            "unexpected directory name 'm' for model 'other', directory name must equal model name",
        ),
        (
            'platform: "tensorrt_plan"',
            "platform 'tensorrt_plan' is not supported: pbd serves Python models "
            '(backend: "python")',
        ),
        (
            'platform: "ensemble"',
            "ensemble scheduling must be set for ensemble m whose platform is ensemble",
        ),
        (
            'ensemble_scheduling { step [ { model_name: "a" } ] }',
            "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
        ),
        ("max_batch_size: -1", "max_batch_size must be >= 0, got -1"),
        (
            'default_model_filename: "model.savedmodel"',
            "default_model_filename 'model.savedmodel' must name a Python file (end in '.py')",
        ),
        (
            'default_model_filename: "../../../../tmp/evil.py"',
            "default_model_filename '../../../../tmp/evil.py' must be a file name in the version "
            "directory, not a path",
        ),
        (
            "version_policy: { specific: { } }",
            "version_policy specific must list at least one version",
        ),
        ("version_policy: { latest: { } }", "version_policy latest: num_versions must be >= 1"),
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 0 ] }",
            "dynamic_batching: preferred_batch_size 0 must be positive",
        ),
        (
            "max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 8 ] }",
            "dynamic_batching: preferred_batch_size 8 must be <= max_batch_size (4)",
        ),
        (
            "max_batch_size: 4 sequence_batching { oldest { preferred_batch_size: [ 5 ] } }",
            "sequence_batching oldest: preferred_batch_size 5 must be <= max_batch_size (4)",
        ),
        (
            "input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]",
            "input: every input must specify 'name'",
        ),
        ('output [ { name: "O" dims: [ 1 ] } ]', "output 'O': data_type must be set"),
        (
            'input [ { name: "I" data_type: 99 dims: [ 1 ] } ]',
            "input 'I': data_type 99 is not a known data type",
        ),
        (
            'input [ { name: "A" data_type: TYPE_FP32 dims: [ 1 ] },'
            ' { name: "A" data_type: TYPE_INT32 dims: [ 1 ] } ]',
            "input 'A' is declared more than once",
        ),
        (
            'output [ { name: "B" data_type: TYPE_FP32 dims: [ 1 ] },'
            ' { name: "B" data_type: TYPE_FP32 dims: [ 1 ] } ]',
            "output 'B' is declared more than once",
        ),
        ("instance_group [ { count: -1 } ]", "instance_group 'm_0': count must be >= 0, got -1"),
        (
            "instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "instance_group 'm_0': has kind KIND_CPU but specifies one or more GPUs",
        ),
        (
            'instance_group [ { name: "g" kind: KIND_MODEL gpus: [ 1 ] } ]',
            "instance_group 'g': has kind KIND_MODEL but specifies one or more GPUs",
        ),
        (
            "instance_group [ { kind: KIND_GPU gpus: [ 0, -2 ] } ]",
            "instance_group 'm_0': gpu ids must be >= 0, got -2",
        ),
        ("instance_group [ { kind: 9 } ]", "instance_group 'm_0': kind 9 is not a known kind"),
        (
            'instance_group [ { profile: [ "0" ] } ]',
            "instance_group 'm_0': profile is only supported for TensorRT models",
        ),
    ],
)
def test_model_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert info.value.message == f"{SRC}: {message}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_tensor("[ ]"), "dims must be set (a scalar is dims: [ 1 ])"),
        (
            _tensor("[ ]", "reshape: { shape: [ 1 ] }"),
            "dims must be set (a scalar is dims: [ 1 ])",
        ),
        (_tensor("[ 4, 0 ]"), f"dims [4, 0]: {DIMS_RULE}"),
        (_tensor("[ -2 ]"), f"dims [-2]: {DIMS_RULE}"),
        (_tensor("[ 4 ]", "reshape: { shape: [ 2, 0 ] }"), f"reshape [2, 0]: {DIMS_RULE}"),
        (
            _tensor("[ 1 ]", "reshape: { shape: [ ] }"),
            "reshape cannot be empty for a model without batching (max_batch_size 0)",
        ),
        (
            _tensor("[ 2 ]", "reshape: { shape: [ ] }", batch=4),
            "reshape [] has a different size than dims [2]",
        ),
        (
            _tensor("[ 6 ]", "reshape: { shape: [ 4, 2 ] }"),
            "reshape [4, 2] has a different size than dims [6]",
        ),
        (
            _tensor("[ -1, 6 ]", "reshape: { shape: [ 6 ] }"),
            "reshape [6] has a different size than dims [-1, 6]",
        ),
        (
            _tensor("[ 2, 4, -1, 6 ]", "reshape: { shape: [ 8, -1, 2, 6 ] }"),
            "reshape [8, -1, 2, 6] does not match dims [2, 4, -1, 6]: the sizes between "
            "variable-size (-1) dimensions must be equal",
        ),
        (
            _tensor("[ -1, 6 ]", "reshape: { shape: [ -1, 2, -1 ] }"),
            "reshape [-1, 2, -1] does not match dims [-1, 6]: the sizes between "
            "variable-size (-1) dimensions must be equal",
        ),
        (
            _tensor("[ 1 ]", "is_shape_tensor: true"),
            "shape tensors are only supported for TensorRT models",
        ),
        (
            _tensor("[ 1 ]", "is_non_linear_format_io: true", kind="output"),
            "non-linear IO formats are only supported for TensorRT",
        ),
        (_tensor("[ 3, 4 ]", "format: FORMAT_NCHW"), "format FORMAT_NCHW needs 3 dims"),
    ],
)
def test_tensor_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    kind = "output" if "output [" in text else "input"
    assert info.value.message == f"{SRC}: {kind} 'T': {message}"


@pytest.mark.parametrize(
    ("dims", "reshape", "batch"),
    [
        ("[ 1 ]", "[ ]", 8),  # a scalar per batch item
        ("[ 6 ]", "[ 2, 3 ]", 0),
        ("[ 2, 4, -1, 6 ]", "[ 8, -1, 1, 6 ]", 0),  # Triton's own example
        ("[ -1 ]", "[ -1, 1 ]", 0),
        ("[ 3, 4, 4 ]", "[ 48 ]", 2),
    ],
)
def test_valid_reshapes(dims: str, reshape: str, batch: int) -> None:
    config = _parse(_tensor(dims, f"reshape: {{ shape: {reshape} }}", batch=batch))
    assert config.inputs[0].reshape is not None


def test_format_with_three_dims_is_accepted() -> None:
    assert _parse(_tensor("[ 3, 4, 4 ]", "format: FORMAT_NHWC")).inputs[0].dims == (3, 4, 4)


def test_messages_name_the_source() -> None:
    with pytest.raises(ConfigError) as info:
        parse_model_config("max_batch_size: -3", model_name="m", source="/models/m/config.pbtxt")
    assert info.value.message.startswith("/models/m/config.pbtxt: ")


@pytest.mark.parametrize(
    ("extra", "kind"),
    [
        ("model_transaction_policy { decoupled: true }", "'decoupled' transaction policy"),
        ("sequence_batching { }", "sequence batching scheduler"),
    ],
)
def test_a_response_cache_on_what_cannot_be_cached_is_refused_in_tritons_words(
    extra: str, kind: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(f"response_cache {{ enable: true }}\n{extra}")
    assert info.value.message == (
        f"{SRC}: Response Cache does not currently support model m with {kind}. Please "
        "disable the response cache."
    )
    assert not _parse(f"response_cache {{ enable: false }}\n{extra}").response_cache
