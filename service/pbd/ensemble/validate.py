"""An ensemble checked against its step models' configs when it loads (Triton's
``ValidateEnsembleConfig``), with Triton's messages.

Each step's input_map must name inputs the step model has and map every required one;
output_map must name outputs it has. An ensemble tensor gets its data type and shape from
every model that reads or writes it, and they must agree (a variable dimension, -1, matches
any size; a batching model's shape is also compared with the batch dimension in front, so a
tensor may pass between a batching and a non-batching model). A step model must allow at
least the ensemble's max_batch_size. A decoupled step makes the ensemble decoupled, and no
step may read tensors that come from different decoupled steps' responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pbd.modelconfig.ensemble import EnsembleSpec, reachable
from pbd.modelconfig.model import ModelConfig, TensorConfig
from pbd_wire import dtypes


@dataclass(frozen=True)
class _Node:
    model: str
    datatype: str
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]  # with the batch dimension of a batching model


def _node(model: str, config: ModelConfig, tensor: TensorConfig, own: bool) -> _Node:
    # The ensemble's own tensors count as reshaped, a step model's as declared (Triton's).
    dims = tensor.reshape if own and tensor.reshape is not None else tensor.dims
    full = ((-1,) + dims) if config.max_batch_size > 0 else dims
    return _Node(model, tensor.datatype, dims, full)


def _same(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _config_type(datatype: str) -> str:
    return dtypes.BY_NAME[datatype].config_name


def _consistent(have: _Node, new: _Node, where: str) -> None:
    if have.datatype != new.datatype:
        raise ValueError(
            f"{where}inconsistent data type: {_config_type(have.datatype)} is inferred from "
            f"model {have.model} while {_config_type(new.datatype)} is inferred from model "
            f"{new.model}"
        )
    if not _same(have.dims, new.dims) and not _same(have.full_dims, new.full_dims):
        raise ValueError(
            f"{where}inconsistent shape: {_dims_text(have.full_dims)} is inferred from model "
            f"{have.model} while {_dims_text(new.full_dims)} is inferred from model {new.model}"
        )


def validate_steps(
    config: ModelConfig, spec: EnsembleSpec, steps: Mapping[int, ModelConfig]
) -> frozenset[int]:
    """Check ``spec`` against ``steps`` (step index -> its model's config); the indices of
    the decoupled steps. ValueError says what is wrong, in Triton's words."""
    name = config.name
    nodes: dict[str, _Node] = {}
    for own in (*config.inputs, *config.outputs):
        nodes[own.name] = _node(name, config, own, own=True)
    for step in spec.steps:
        model = steps[step.index]
        label = step.model_name
        if 0 < model.max_batch_size < config.max_batch_size:
            raise ValueError(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {label} which only allows maximum batch size to be "
                f"{model.max_batch_size}"
            )
        for model_input, tensor in step.input_map.items():
            if model.input(model_input) is None:
                raise ValueError(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing "
                    f"input {model_input} in model {label}"
                )
        for declared in model.inputs:
            mapped = step.input_map.get(declared.name)
            if mapped is None:
                if declared.optional:
                    continue
                raise ValueError(
                    f"in ensemble {name}, input {declared.name} in model {label} is not mapped "
                    "to any ensemble tensors"
                )
            _merge(nodes, mapped, _node(label, model, declared, own=False), name)
        for model_output, tensor in step.output_map.items():
            declared_output = model.output(model_output)
            if declared_output is None:
                raise ValueError(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing "
                    f"output {model_output} in model {label}"
                )
            _merge(nodes, tensor, _node(label, model, declared_output, own=False), name)
    decoupled = frozenset(s.index for s in spec.steps if steps[s.index].decoupled)
    _check_lineage(config, spec, decoupled)
    return decoupled


def _merge(nodes: dict[str, _Node], tensor: str, node: _Node, ensemble: str) -> None:
    have = nodes.get(tensor)
    if have is None:
        nodes[tensor] = node
    else:
        _consistent(have, node, f"in ensemble {ensemble}, ensemble tensor {tensor}: ")


def _check_lineage(config: ModelConfig, spec: EnsembleSpec, decoupled: frozenset[int]) -> None:
    """Every step, and the ensemble's outputs, read tensors of one lineage: the ensemble's
    inputs (0) or the responses of one decoupled step (its index + 1), or what non-decoupled
    steps made of those."""
    lineage = dict.fromkeys(spec.inputs, 0)
    pending = [s for s in spec.steps if set(s.input_map.values()) <= reachable(spec)]
    while pending:
        step = next(s for s in pending if all(t in lineage for t in s.input_map.values()))
        pending.remove(step)
        origins = {lineage[t] for t in step.input_map.values()}
        if len(origins) > 1:
            raise ValueError(_mixed(config.name, step.model_name))
        origin = step.index + 1 if step.index in decoupled else origins.pop()
        lineage.update(dict.fromkeys(step.output_map.values(), origin))
    if len({lineage[t] for t in spec.outputs}) > 1:
        raise ValueError(_mixed(config.name, config.name))


def _mixed(ensemble: str, model: str) -> str:
    return (
        f"in ensemble {ensemble}, step of model '{model}' receives inputs originated from "
        "different decoupled models"
    )
