"""An ensemble against its step models' configs (Triton's ValidateEnsembleConfig)."""

from __future__ import annotations

import pytest
from config_samples import parse as _parse

from pbd.ensemble.validate import validate_steps
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import parse_model_config


def _model(name: str, io: str, extra: str = "") -> ModelConfig:
    text = f'name: "{name}" backend: "python" {extra} {io}'
    return parse_model_config(text, model_name=name, source=f"{name}/config.pbtxt")


FP4 = "data_type: TYPE_FP32 dims: [ 4 ]"
ADD = _model("add", f'input [ {{ name: "X" {FP4} }} ] output [ {{ name: "Y" {FP4} }} ]')
DEC = _model(
    "dec",
    f'input [ {{ name: "X" {FP4} }} ] output [ {{ name: "Y" {FP4} }} ]',
    "model_transaction_policy { decoupled: true }",
)
PAIR = _model(
    "pair",
    f'input [ {{ name: "A" {FP4} }}, {{ name: "B" {FP4} }} ] output [ {{ name: "S" {FP4} }} ]',
)


def _ensemble(steps: str, in_type: str = "TYPE_FP32", in_dims: str = "4") -> ModelConfig:
    return _parse(
        f'platform: "ensemble" input [ {{ name: "IN" data_type: {in_type} dims: [ {in_dims} ] }} ]'
        f' output [ {{ name: "OUT" {FP4} }} ] ensemble_scheduling {{ step [ {steps} ] }}'
    )


def _step(model: str, ins: dict[str, str], outs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in ins.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outs.items()]
    return f'{{ model_name: "{model}" {" ".join(maps)} }}'


def _check(config: ModelConfig, models: list[ModelConfig]) -> frozenset[int]:
    assert config.ensemble is not None
    return validate_steps(config, config.ensemble, dict(enumerate(models)))


def test_a_consistent_pipeline_passes_and_is_not_decoupled() -> None:
    config = _ensemble(
        f"{_step('add', {'X': 'IN'}, {'Y': 'MID'})}, {_step('add', {'X': 'MID'}, {'Y': 'OUT'})}"
    )
    assert _check(config, [ADD, ADD]) == frozenset()


def test_a_decoupled_step_makes_the_ensemble_decoupled() -> None:
    config = _ensemble(
        f"{_step('dec', {'X': 'IN'}, {'Y': 'MID'})}, {_step('add', {'X': 'MID'}, {'Y': 'OUT'})}"
    )
    assert _check(config, [DEC, ADD]) == frozenset({0})


@pytest.mark.parametrize(
    ("steps", "models", "message", "in_type", "in_dims"),
    [
        (  # checked against Triton 2.51
            _step("add", {"X": "IN"}, {"Y": "OUT"}),
            [ADD],
            "in ensemble m, ensemble tensor IN: inconsistent data type: TYPE_INT32 is inferred "
            "from model m while TYPE_FP32 is inferred from model add",
            "TYPE_INT32",
            "4",
        ),
        (
            _step("add", {"X": "IN"}, {"Y": "OUT"}),
            [ADD],
            "in ensemble m, ensemble tensor IN: inconsistent shape: [3] is inferred from model "
            "m while [4] is inferred from model add",
            "TYPE_FP32",
            "3",
        ),
        (  # checked against Triton 2.51
            _step("add", {"WRONG": "IN"}, {"Y": "OUT"}),
            [ADD],
            "in ensemble m, ensemble tensor IN is mapping to non-existing input WRONG in model add",
            "TYPE_FP32",
            "4",
        ),
        (
            _step("add", {"X": "IN"}, {"Z": "OUT"}),
            [ADD],
            "in ensemble m, ensemble tensor OUT is mapped from non-existing output Z in model add",
            "TYPE_FP32",
            "4",
        ),
        (
            _step("pair", {"A": "IN"}, {"S": "OUT"}),
            [PAIR],
            "in ensemble m, input B in model pair is not mapped to any ensemble tensors",
            "TYPE_FP32",
            "4",
        ),
        (
            f"{_step('dec', {'X': 'IN'}, {'Y': 'MID'})}, "
            f"{_step('pair', {'A': 'MID', 'B': 'IN'}, {'S': 'OUT'})}",
            [DEC, PAIR],
            "in ensemble m, step of model 'pair' receives inputs originated from different "
            "decoupled models",
            "TYPE_FP32",
            "4",
        ),
    ],
)
def test_a_step_that_does_not_fit_is_refused(
    steps: str, models: list[ModelConfig], message: str, in_type: str, in_dims: str
) -> None:
    with pytest.raises(ValueError) as info:
        _check(_ensemble(steps, in_type, in_dims), models)
    assert str(info.value) == message


def test_a_step_must_batch_as_much_as_the_ensemble() -> None:
    config = _parse(
        'platform: "ensemble" max_batch_size: 8'
        f' input [ {{ name: "IN" {FP4} }} ] output [ {{ name: "OUT" {FP4} }} ]'
        f" ensemble_scheduling {{ step [ {_step('add', {'X': 'IN'}, {'Y': 'OUT'})} ] }}"
    )
    small = _model(
        "add", f'input [ {{ name: "X" {FP4} }} ] output [ {{ name: "Y" {FP4} }} ]',
        "max_batch_size: 2",
    )  # fmt: skip
    with pytest.raises(ValueError) as info:
        _check(config, [small])
    assert str(info.value) == (
        "ensemble m allows maximum batch size 8, but it contains model add which only allows "
        "maximum batch size to be 2"
    )
    assert _check(config, [ADD]) == frozenset()  # a non-batching step fits any ensemble
