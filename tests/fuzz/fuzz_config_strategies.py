"""Hypothesis strategies for model configurations a Python-model author would write, with
slips here and there (see ``fuzz_strategies`` for the requests)."""

from __future__ import annotations

from typing import Any

from fuzz_strategies import INT64, Slips
from google.protobuf import json_format, text_format
from hypothesis import strategies as st

from pbd._proto import model_config_pb2 as mc


def _dims(draw: st.DrawFn, slip: Slips) -> list[int]:
    if slip():
        return draw(st.lists(st.integers(-3, 8) | INT64, max_size=4))
    return draw(st.lists(st.sampled_from([-1, 1, 2, 3, 4, 6]), min_size=1, max_size=3))


def _tensor(draw: st.DrawFn, target: Any, is_input: bool, index: int, slip: Slips) -> None:
    target.name = draw(st.text(max_size=3)) if slip() else f"T{index}"
    target.data_type = draw(st.integers(0, 16)) if slip() else draw(st.integers(1, 14))
    target.dims.extend(_dims(draw, slip))
    if slip() or draw(st.integers(0, 4)) == 0:
        target.reshape.shape.extend(
            list(reversed(target.dims)) if not slip() else _dims(draw, slip)
        )
    if is_input:
        target.optional = draw(st.booleans())
        if slip():
            target.format = draw(st.integers(0, 2))
    if slip():
        target.is_shape_tensor = True


@st.composite
def model_configs(draw: st.DrawFn) -> mc.ModelConfig:
    """Configs a Python-model author would write, with slips here and there."""
    slip = Slips(draw)
    msg = mc.ModelConfig()
    msg.name = draw(st.sampled_from(["", "other"])) if slip() else "m"
    msg.backend = draw(st.sampled_from(["", "onnxruntime"])) if slip() else "python"
    if slip():
        msg.platform = draw(st.sampled_from(["ensemble", "pytorch_libtorch"]))
    msg.max_batch_size = (
        draw(st.integers(-(2**31), 2**31 - 1)) if slip() else draw(st.integers(0, 8))
    )
    for index in range(draw(st.integers(1, 3))):
        _tensor(draw, msg.input.add(), True, index, slip)
    for index in range(draw(st.integers(1, 2))):
        _tensor(draw, msg.output.add(), False, index, slip)
    for _ in range(draw(st.integers(0, 2))):
        group = msg.instance_group.add(
            kind=draw(st.integers(0, 4)) if slip() else draw(st.sampled_from([0, 2])),
            count=draw(st.integers(-2, 3)) if slip() else draw(st.integers(0, 3)),
        )
        if slip():
            group.name = draw(st.text(max_size=3))
            group.gpus.extend(draw(st.lists(st.integers(-2, 3), max_size=2)))
    policy = draw(st.sampled_from(["none", "latest", "all", "specific"]))
    if policy == "latest":
        msg.version_policy.latest.num_versions = draw(st.integers(0 if slip() else 1, 3))
    elif policy == "all":
        msg.version_policy.all.SetInParent()
    elif policy == "specific":
        versions = (
            st.lists(INT64, max_size=3) if slip() else st.lists(st.integers(1, 9), min_size=1)
        )
        msg.version_policy.specific.versions.extend(draw(versions))
    if draw(st.booleans()):
        sizes = st.integers(-1, 10) if slip() else st.integers(1, max(1, msg.max_batch_size))
        msg.dynamic_batching.preferred_batch_size.extend(draw(st.lists(sizes, max_size=2)))
    if slip():
        msg.sequence_batching.oldest.preferred_batch_size.extend(
            draw(st.lists(st.integers(-1, 10), max_size=2))
        )
    for key in draw(st.lists(st.text(max_size=4), max_size=2)):
        msg.parameters[key].string_value = draw(st.text(max_size=4))
    msg.model_transaction_policy.decoupled = draw(st.booleans())
    if slip():
        msg.default_model_filename = draw(st.sampled_from(["model.py", "m.so", ""]))
    return msg


config_texts = model_configs().map(text_format.MessageToString)
config_jsons = model_configs().map(json_format.MessageToJson)
