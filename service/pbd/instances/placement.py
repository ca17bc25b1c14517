"""Where a model's instances go: Triton's instance_group placement, as a pure function."""

from __future__ import annotations

from pbd.errors import invalid_arg
from pbd.instances.records import InstancePlan
from pbd.repository.config import ModelConfig


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
