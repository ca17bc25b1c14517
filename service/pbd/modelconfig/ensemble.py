"""``ensemble_scheduling`` read into :class:`EnsembleSpec`, with Triton's checks of the config.

The checks here need nothing but the ensemble's own config (Triton's
``ValidateEnsembleSchedulingConfig``): no instance groups, optimization or warmup; every step
names a model, maps inputs and outputs; no ensemble tensor is written by two steps; and the
data flow holds: starting from the ensemble's inputs, every tensor a step reads can be
produced (no cycle, nothing read that nobody writes), every ensemble output is written, every
input and intermediate tensor is read. The messages are Triton's, word for word (a stray
quote included); ``pbd.modelconfig.parse`` puts the config file's path before them. What
needs the step models' configs is in ``pbd.ensemble.validate``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pbd._proto import model_config_pb2 as mc

PLATFORM = "ensemble"


@dataclass(frozen=True)
class Step:
    index: int
    model_name: str
    model_version: int  # -1: the latest ready version
    input_map: Mapping[str, str]  # step model's input -> ensemble tensor
    output_map: Mapping[str, str]  # step model's output -> ensemble tensor

    @property
    def version_text(self) -> str:
        """The version as a request names it ("" = latest)."""
        return "" if self.model_version < 0 else str(self.model_version)


@dataclass(frozen=True)
class EnsembleSpec:
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def models(self) -> frozenset[str]:
        return frozenset(s.model_name for s in self.steps)


def is_ensemble(msg: mc.ModelConfig) -> bool:
    return msg.platform == PLATFORM or msg.HasField("ensemble_scheduling")


def ensemble_spec(msg: mc.ModelConfig) -> EnsembleSpec | None:
    """The steps of an ensemble's config (None for any other model), checked; ValueError
    says what is wrong, in Triton's words."""
    if not is_ensemble(msg):
        return None
    spec = _read(msg)
    _check_flow(spec, msg.name)
    return spec


def _read(msg: mc.ModelConfig) -> EnsembleSpec:
    name = msg.name
    if msg.platform != PLATFORM:
        raise ValueError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not {PLATFORM}"
        )
    if not msg.HasField("ensemble_scheduling"):
        raise ValueError(
            f"ensemble scheduling must be set for ensemble {name} whose platform is {PLATFORM}"
        )
    if msg.instance_group:
        raise ValueError(f"instance group should not be specified for ensemble '{name}'")
    if msg.HasField("optimization"):
        raise ValueError(f"optimization should not be specified for ensemble '{name}'")
    if msg.model_warmup:
        raise ValueError(f"model_warmup can not be specified for ensemble '{name}'")
    if not msg.ensemble_scheduling.step:
        raise ValueError(f"must specify 'step' for ensemble '{name}'")
    steps: list[Step] = []
    written: set[str] = set()
    for index, step in enumerate(msg.ensemble_scheduling.step):
        for field in ("model_name", "input_map", "output_map"):
            if not getattr(step, field):
                raise ValueError(f"must specify '{field}' in step {index} of ensemble '{name}'")
        for tensor in step.output_map.values():
            if tensor in written:
                raise ValueError(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            written.add(tensor)
        steps.append(
            Step(
                index,
                step.model_name,
                step.model_version,
                MappingProxyType(dict(sorted(step.input_map.items()))),
                MappingProxyType(dict(sorted(step.output_map.items()))),
            )
        )
    return EnsembleSpec(
        tuple(steps), tuple(t.name for t in msg.input), tuple(t.name for t in msg.output)
    )


def _check_flow(spec: EnsembleSpec, name: str) -> None:
    read = {t for s in spec.steps for t in s.input_map.values()}
    written = {t for s in spec.steps for t in s.output_map.values()}
    for tensor in spec.inputs:
        if tensor not in read:
            raise ValueError(f"ensemble input '{tensor}' for ensemble {name}' is not used")
    ready = reachable(spec)
    for tensor in spec.outputs:
        if tensor not in written:
            raise ValueError(f"ensemble output '{tensor}' for ensemble {name}' is not used")
        if tensor not in ready:
            raise ValueError(f"output '{tensor}' for ensemble '{name}' is not written")
    outputs = set(spec.outputs)
    for step in spec.steps:
        for tensor in [*step.input_map.values(), *step.output_map.values()]:
            if tensor not in outputs and (tensor not in ready or tensor not in read):
                raise ValueError(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def reachable(spec: EnsembleSpec) -> set[str]:
    """The tensors the steps can produce from the ensemble's inputs (steps in a cycle, or
    reading a tensor nobody writes, never run)."""
    ready = set(spec.inputs)
    pending = list(spec.steps)
    progress = True
    while progress:
        progress = False
        for step in list(pending):
            if all(t in ready for t in step.input_map.values()):
                ready.update(step.output_map.values())
                pending.remove(step)
                progress = True
    return ready
