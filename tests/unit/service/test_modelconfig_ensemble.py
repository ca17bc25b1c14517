"""ensemble_scheduling read and checked from the config alone, with Triton 2.51's messages."""

from __future__ import annotations

import pytest
from config_samples import SRC
from config_samples import parse as _parse

from pbd.modelconfig.parse import ConfigError

IO = """
name: "m"
platform: "ensemble"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def _step(model: str, ins: dict[str, str], outs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in ins.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outs.items()]
    return f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'


def _ensemble(*steps: str, extra: str = "") -> str:
    return f"{IO}{extra}\nensemble_scheduling {{ step [ {', '.join(steps)} ] }}"


def test_steps_are_read_with_their_maps() -> None:
    config = _parse(
        _ensemble(_step("a", {"X": "IN"}, {"Y": "MID"}), _step("b", {"X": "MID"}, {"Y": "OUT"}))
    )
    assert config.ensemble is not None
    assert [s.model_name for s in config.ensemble.steps] == ["a", "b"]
    assert dict(config.ensemble.steps[1].input_map) == {"X": "MID"}
    assert config.ensemble.steps[0].version_text == ""
    assert config.ensemble.models == {"a", "b"}
    assert config.platform == "ensemble" and not config.instance_groups


def test_a_python_model_has_no_ensemble() -> None:
    assert _parse('backend: "python"').ensemble is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (  # checked against Triton 2.51: a tensor read that no step writes
            _ensemble(
                _step("a", {"X": "IN"}, {"Y": "OUT"}), _step("b", {"X": "NEVER"}, {"Y": "Z"})
            ),
            "ensemble tensor 'NEVER' is unused in ensemble 'm'",
        ),
        (  # checked against Triton 2.51
            _ensemble(_step("a", {"X": "IN"}, {"Y": "OTHER"})),
            "ensemble output 'OUT' for ensemble m' is not used",
        ),
        (  # checked against Triton 2.51: steps in a cycle never run
            _ensemble(
                _step("a", {"X": "A"}, {"Y": "B"}),
                _step("a", {"X": "B"}, {"Y": "A"}),
                _step("a", {"X": "IN"}, {"Y": "OUT"}),
            ),
            "ensemble tensor 'A' is unused in ensemble 'm'",
        ),
        (
            _ensemble(_step("a", {"X": "IN"}, {"Y": "MID"}), _step("b", {"X": "IN"}, {"Y": "OUT"})),
            "ensemble tensor 'MID' is unused in ensemble 'm'",
        ),
        (
            _ensemble(_step("a", {"X": "A"}, {"Y": "OUT"}), _step("b", {"X": "OUT"}, {"Y": "A"})),
            "ensemble input 'IN' for ensemble m' is not used",
        ),
        (
            _ensemble(_step("a", {"X": "IN"}, {"Y": "OUT"}), _step("b", {"X": "IN"}, {"Y": "OUT"})),
            "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'm' step 1",
        ),
        (IO + "ensemble_scheduling { }", "must specify 'step' for ensemble 'm'"),
        (
            _ensemble('{ model_name: "a" output_map { key: "Y" value: "OUT" } }'),
            "must specify 'input_map' in step 0 of ensemble 'm'",
        ),
        (
            _ensemble(_step("a", {"X": "IN"}, {"Y": "OUT"}), extra="instance_group [ { } ]"),
            "instance group should not be specified for ensemble 'm'",
        ),
        (
            _ensemble(
                _step("a", {"X": "IN"}, {"Y": "OUT"}), extra='model_warmup [ { name: "w" } ]'
            ),
            "model_warmup can not be specified for ensemble 'm'",
        ),
    ],
)
def test_a_wrong_ensemble_config_says_what_triton_says(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _parse(text)
    assert info.value.message == f"{SRC}: {message}"
