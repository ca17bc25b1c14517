"""Where a model's instances go: Triton's instance_group placement, as pure functions."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import json_format

from pbd._proto import model_config_pb2 as mc
from pbd.errors import invalid_arg
from pbd.instance.records import InstancePlan
from pbd.modelconfig.model import ModelConfig
from pbd.modelconfig.parse import build_model_config

_Group = mc.ModelInstanceGroup


def normalize_instance_groups(config: ModelConfig, gpus: Sequence[int]) -> ModelConfig:
    """``config`` as Triton's NormalizeInstanceGroup leaves it on a machine with ``gpus``: a
    KIND_AUTO group becomes KIND_GPU where a GPU is visible and KIND_CPU where none is, and a
    KIND_GPU group that lists no GPUs lists them all. This is the config models get in
    ``args["model_config"]`` and clients read from ModelConfig."""
    if not any(
        g.kind == "KIND_AUTO" or (g.kind == "KIND_GPU" and not g.gpus and gpus)
        for g in config.instance_groups
    ):
        return config
    message = json_format.ParseDict(dict(config.as_dict), mc.ModelConfig())
    for group in message.instance_group:
        if group.kind == _Group.KIND_AUTO:
            group.kind = _Group.KIND_GPU if gpus else _Group.KIND_CPU
        if group.kind == _Group.KIND_GPU and not group.gpus:
            group.gpus.extend(gpus)
    return build_model_config(message, config.name, f"model '{config.name}'")


def plan_instances(config: ModelConfig, gpus: list[int]) -> list[InstancePlan]:
    """Triton's placement: ``count`` per listed GPU for GPU groups; AUTO falls back to CPU."""
    plans: list[InstancePlan] = []
    for group in config.instance_groups:
        kind = group.kind
        if kind == "KIND_AUTO":
            kind = "KIND_GPU" if gpus else "KIND_CPU"
        if kind == "KIND_GPU":
            if not gpus:
                raise invalid_arg(
                    f"instance group '{group.name}' of model '{config.name}' has kind KIND_GPU, "
                    "but no GPU is available on this machine; use KIND_CPU, or KIND_AUTO to "
                    "fall back to the CPU"
                )
            ids = list(group.gpus) or gpus
            for gpu in ids:
                if gpu not in gpus:
                    raise invalid_arg(
                        f"instance group '{group.name}' of model '{config.name}' names GPU {gpu}, "
                        f"but the available GPUs are {gpus}"
                    )
            devices = [("GPU", g) for g in ids for _ in range(group.count)]
        else:
            devices = [("MODEL" if kind == "KIND_MODEL" else "CPU", 0)] * group.count
        plans += [InstancePlan(f"{group.name}_{n}", k, d) for n, (k, d) in enumerate(devices)]
    return plans
