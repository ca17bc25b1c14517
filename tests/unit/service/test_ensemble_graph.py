"""The dependency scheduler: steps start when their inputs exist; decoupled steps fork."""

from __future__ import annotations

from config_samples import parse as _parse

from pbd.ensemble.graph import EnsembleGraph
from pbd.modelconfig.ensemble import EnsembleSpec

FP = "data_type: TYPE_FP32 dims: [ 1 ]"


def _spec(*steps: tuple[str, dict[str, str], dict[str, str]]) -> EnsembleSpec:
    text = []
    for model, ins, outs in steps:
        maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in ins.items()]
        maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outs.items()]
        text.append(f'{{ model_name: "{model}" {" ".join(maps)} }}')
    config = _parse(
        f'platform: "ensemble" input [ {{ name: "IN" {FP} }} ] output [ {{ name: "OUT" {FP} }} ]'
        f" ensemble_scheduling {{ step [ {', '.join(text)} ] }}"
    )
    assert config.ensemble is not None
    return config.ensemble


FAN = _spec(
    ("a", {"X": "IN"}, {"Y": "A"}),
    ("b", {"X": "IN"}, {"Y": "B"}),
    ("join", {"A": "A", "B": "B"}, {"S": "OUT"}),
)


def test_independent_steps_start_together_and_the_join_waits_for_both() -> None:
    graph: EnsembleGraph = EnsembleGraph(FAN)
    flow = graph.start({"IN": 1})
    assert [s.model_name for s in graph.take_ready(flow)] == ["a", "b"]
    assert graph.take_ready(flow) == []  # started once
    same = graph.add(flow, FAN.steps[0], {"Y": 2})
    assert same is flow and graph.take_ready(flow) == []  # join still waits for B
    graph.add(flow, FAN.steps[1], {"Y": 3})
    assert [s.model_name for s in graph.take_ready(flow)] == ["join"]
    assert graph.answer(flow) is None
    graph.add(flow, FAN.steps[2], {"S": 5})
    assert graph.answer(flow) == {"OUT": 5}
    assert graph.answer(flow) is None  # answered once


CHAIN = _spec(
    ("dec", {"X": "IN"}, {"Y": "MID"}),
    ("add", {"X": "MID"}, {"Y": "MID2"}),
    ("add", {"X": "MID2"}, {"Y": "OUT"}),
)


def test_each_response_of_a_decoupled_step_runs_the_steps_after_it_in_a_flow_of_its_own() -> None:
    graph: EnsembleGraph = EnsembleGraph(CHAIN, decoupled=frozenset({0}))
    assert graph.downstream[0] == {1, 2}
    root = graph.start({"IN": 0})
    assert [s.index for s in graph.take_ready(root)] == [0]
    assert root.waiting == set()  # the responses' flows run steps 1 and 2
    flows = [graph.add(root, CHAIN.steps[0], {"Y": n}) for n in (10, 20)]
    assert flows[0] is not root and "MID" not in root.tensors
    for n, flow in zip((10, 20), flows, strict=True):
        assert [s.index for s in graph.take_ready(flow)] == [1]
        graph.add(flow, CHAIN.steps[1], {"Y": n + 1})
        assert [s.index for s in graph.take_ready(flow)] == [2]
        graph.add(flow, CHAIN.steps[2], {"Y": n + 2})
        assert graph.answer(flow) == {"OUT": n + 2}


def test_a_response_without_a_mapped_output_is_a_key_error() -> None:
    graph: EnsembleGraph = EnsembleGraph(FAN)
    flow = graph.start({"IN": 1})
    graph.take_ready(flow)
    try:
        graph.add(flow, FAN.steps[0], {"OTHER": 1})
    except KeyError as exc:
        assert exc.args == ("Y",)
    else:
        raise AssertionError("no KeyError")
