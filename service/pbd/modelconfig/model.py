"""A model's configuration as the daemon uses it: immutable records, Triton's defaults filled in
and checked (``pbd.modelconfig.parse`` builds them from config.pbtxt or its JSON form).

These are records anyone may import: the scheduling, the instances, the versions, the
repository and the edges (ModelMetadata, ModelConfig) read them, and nothing here imports
anything of pbd above ``pbd.modelconfig``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pbd.modelconfig.ensemble import EnsembleSpec

# Triton's SEQUENCE_IDLE_DEFAULT_MICROSECONDS.
SEQUENCE_IDLE_DEFAULT_US = 1_000_000


@dataclass(frozen=True)
class TensorConfig:
    name: str
    datatype: str  # protocol string: "FP32", "BYTES" (TYPE_STRING), ...
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    reshape: tuple[int, ...] | None
    optional: bool = False  # inputs only


@dataclass(frozen=True)
class InstanceGroupConfig:
    name: str
    kind: str  # "KIND_AUTO" | "KIND_GPU" | "KIND_CPU" | "KIND_MODEL"
    count: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class VersionPolicy:
    kind: str  # "latest" | "all" | "specific"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions of ``available`` this policy serves, ascending."""
        present = sorted(set(available))
        if self.kind == "all":
            return present
        if self.kind == "specific":
            return [v for v in present if v in self.versions]
        return present[-self.num_versions :]


@dataclass(frozen=True)
class ModelConfig:
    name: str
    backend: str
    platform: str
    max_batch_size: int
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]
    instance_groups: tuple[InstanceGroupConfig, ...]
    version_policy: VersionPolicy
    default_model_filename: str
    parameters: Mapping[str, str]
    decoupled: bool
    # Triton's JSON form (int64 values as numbers, defaults present); treat it as read-only.
    as_dict: Mapping[str, Any]
    ensemble: EnsembleSpec | None = None  # platform "ensemble": its steps

    def to_json(self) -> str:
        return json.dumps(self.as_dict)

    @functools.cached_property
    def response_cache(self) -> bool:
        """``response_cache { enable: true }``: answered from the response cache when the
        daemon has one (looked up for every request)."""
        return bool(self.as_dict.get("response_cache", {}).get("enable"))

    @property
    def iterative_sequence(self) -> bool:
        """``sequence_batching { iterative_sequence: true }``: its requests may be rescheduled."""
        return bool(self.as_dict.get("sequence_batching", {}).get("iterative_sequence"))

    def input(self, name: str) -> TensorConfig | None:
        return self._inputs_by_name.get(name)

    def output(self, name: str) -> TensorConfig | None:
        return self._outputs_by_name.get(name)

    @functools.cached_property
    def _inputs_by_name(self) -> dict[str, TensorConfig]:  # looked up for every request
        return {t.name: t for t in self.inputs}

    @functools.cached_property
    def _outputs_by_name(self) -> dict[str, TensorConfig]:
        return {t.name: t for t in self.outputs}
