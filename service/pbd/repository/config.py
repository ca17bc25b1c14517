"""config.pbtxt -> an immutable, validated :class:`ModelConfig`.

config.pbtxt is protobuf text format of ``ModelConfig``; this module is the file-format edge
that parses it, fills the defaults Triton fills, checks it (every message names the file and
the field) and keeps the Triton-style JSON form that models receive as
``args["model_config"]`` and the ModelConfig RPC returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format

from pbd._proto import model_config_pb2 as mc
from pbd.errors import Code, PbdError
from pbd_worker import dtypes

CONFIG_FILE = "config.pbtxt"
_INT64_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}


class ConfigError(PbdError):
    def __init__(self, message: str) -> None:
        super().__init__(Code.INVALID_ARG, message)


@dataclass(frozen=True)
class TensorConfig:
    name: str
    datatype: str
    dims: tuple[int, ...]
    reshape: tuple[int, ...] | None
    optional: bool = False


@dataclass(frozen=True)
class InstanceGroupConfig:
    name: str
    kind: str
    count: int
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class VersionPolicy:
    kind: str  # "latest" | "all" | "specific"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: Iterable[int]) -> list[int]:
        present = sorted(set(available))
        if self.kind == "all":
            return present
        if self.kind == "specific":
            return sorted(v for v in present if v in self.versions)
        return present[-self.num_versions :] if self.num_versions > 0 else []


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
    as_dict: Mapping[str, Any]

    def to_json(self) -> str:
        return json.dumps(self.as_dict)

    def input(self, name: str) -> TensorConfig | None:
        return next((t for t in self.inputs if t.name == name), None)

    def output(self, name: str) -> TensorConfig | None:
        return next((t for t in self.outputs if t.name == name), None)


def load_model_config(model_dir: Path, *, override_json: str | None = None) -> ModelConfig:
    """The config of the model in ``model_dir``; ``override_json`` (RepositoryModelLoad's
    ``config`` parameter) replaces the file."""
    name = model_dir.name
    if override_json is not None:
        return model_config_from_json(override_json, model_name=name, source=f"{name} (override)")
    path = model_dir / CONFIG_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing {CONFIG_FILE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    return parse_model_config(text, model_name=name, source=str(path))


def parse_model_config(text: str, *, model_name: str, source: str) -> ModelConfig:
    message = mc.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: syntax error: {exc}") from None
    return _build(message, model_name, source)


def model_config_from_json(text: str, *, model_name: str, source: str) -> ModelConfig:
    message = mc.ModelConfig()
    try:
        json_format.Parse(text, message)
    except (json_format.ParseError, ValueError) as exc:
        raise ConfigError(f"{source}: invalid model configuration JSON: {exc}") from None
    return _build(message, model_name, source)


def _fill_defaults(msg: mc.ModelConfig, model_name: str) -> None:
    if not msg.name:
        msg.name = model_name
    if not msg.backend and not msg.platform:
        msg.backend = "python"
    if (
        not msg.HasField("version_policy")
        or msg.version_policy.HasField("latest")
        and msg.version_policy.latest.num_versions == 0
    ):
        msg.version_policy.latest.num_versions = 1
    if not msg.instance_group:
        msg.instance_group.add()
    for i, group in enumerate(msg.instance_group):
        if not group.name:
            group.name = f"{msg.name}_{i}"
        if group.count == 0:
            group.count = 1
    if not msg.default_model_filename:
        msg.default_model_filename = "model.py"


def _tensor(t: Any, where: str, kind: str, *, is_input: bool) -> TensorConfig:
    label = f"{where}: {kind} '{t.name}'"
    if not t.name:
        raise ConfigError(f"{where}: {kind} without a name")
    if t.data_type == mc.TYPE_INVALID:
        raise ConfigError(f"{label}: data_type must be set")
    dims = tuple(t.dims)
    reshape = tuple(t.reshape.shape) if t.HasField("reshape") else None
    if not dims and not reshape:
        raise ConfigError(f"{label}: dims must be set")
    for d in dims + (reshape or ()):
        if d == 0 or d < -1:
            raise ConfigError(f"{label}: dims and reshape must be positive or -1, got {d}")
    fixed = reshape is not None and -1 not in dims + reshape
    if fixed and math.prod(dims) != math.prod(reshape or ()):
        raise ConfigError(
            f"{label}: reshape {list(reshape or ())} has {math.prod(reshape or ())} elements, "
            f"dims {list(dims)} has {math.prod(dims)}"
        )
    datatype = dtypes.BY_CONFIG_NUMBER[t.data_type].name
    return TensorConfig(t.name, datatype, dims, reshape, bool(is_input and t.optional))


def _check(msg: mc.ModelConfig, model_name: str, source: str) -> None:
    if msg.name != model_name:
        raise ConfigError(
            f"{source}: model name '{msg.name}' does not match the directory name '{model_name}'"
        )
    if msg.backend != "python" and not (msg.platform == "" and msg.backend == ""):
        raise ConfigError(
            f"{source}: backend '{msg.backend or msg.platform}' is not supported; pbd runs "
            'Python models (backend: "python")'
        )
    if msg.max_batch_size < 0:
        raise ConfigError(f"{source}: max_batch_size must be >= 0, got {msg.max_batch_size}")
    if msg.HasField("ensemble_scheduling"):
        raise ConfigError(f"{source}: ensemble_scheduling is not supported by pbd")
    if not msg.default_model_filename.endswith(".py"):
        raise ConfigError(
            f"{source}: default_model_filename '{msg.default_model_filename}' must end in '.py'"
        )
    for kind, tensors in (("input", msg.input), ("output", msg.output)):
        seen: set[str] = set()
        for t in tensors:
            if t.name in seen:
                raise ConfigError(f"{source}: duplicate {kind} name '{t.name}'")
            seen.add(t.name)
    group_kinds = mc.ModelInstanceGroup.Kind
    for group in msg.instance_group:
        label = f"{source}: instance_group '{group.name}'"
        if group.count < 0:
            raise ConfigError(f"{label}: count must be >= 0, got {group.count}")
        if group.gpus and group.kind in (
            mc.ModelInstanceGroup.KIND_CPU,
            mc.ModelInstanceGroup.KIND_MODEL,
        ):
            raise ConfigError(
                f"{label}: gpus are only allowed with KIND_GPU or KIND_AUTO, not "
                f"{group_kinds.Name(group.kind)}"
            )
        if any(g < 0 for g in group.gpus):
            raise ConfigError(f"{label}: gpu ids must be >= 0")
    policy = msg.version_policy
    if policy.HasField("specific") and not policy.specific.versions:
        raise ConfigError(f"{source}: version_policy specific lists no versions")


def _policy(msg: mc.ModelConfig) -> VersionPolicy:
    policy = msg.version_policy
    if policy.HasField("all"):
        return VersionPolicy("all")
    if policy.HasField("specific"):
        return VersionPolicy("specific", versions=tuple(policy.specific.versions))
    return VersionPolicy("latest", num_versions=policy.latest.num_versions or 1)


def _ints_as_numbers(value: Any, desc: descriptor.Descriptor) -> Any:
    """protobuf's JSON prints 64-bit integers as strings; Triton prints numbers."""
    for field in desc.fields:
        if field.json_name not in value and field.name not in value:
            continue
        key = field.name
        item = value[key]
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is not None:
                    for k in item:
                        _ints_as_numbers(item[k], value_field.message_type)
                elif value_field.type in _INT64_TYPES:
                    value[key] = {k: int(v) for k, v in item.items()}
            elif field.label == descriptor.FieldDescriptor.LABEL_REPEATED:
                for element in item:
                    _ints_as_numbers(element, field.message_type)
            else:
                _ints_as_numbers(item, field.message_type)
        elif field.type in _INT64_TYPES:
            if field.label == descriptor.FieldDescriptor.LABEL_REPEATED:
                value[key] = [int(v) for v in item]
            else:
                value[key] = int(item)
    return value


def config_to_dict(msg: mc.ModelConfig) -> dict[str, Any]:
    raw = json_format.MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _ints_as_numbers(raw, msg.DESCRIPTOR)


def _build(msg: mc.ModelConfig, model_name: str, source: str) -> ModelConfig:
    _fill_defaults(msg, model_name)
    _check(msg, model_name, source)
    kinds = mc.ModelInstanceGroup.Kind
    return ModelConfig(
        name=msg.name,
        backend=msg.backend,
        platform=msg.platform,
        max_batch_size=msg.max_batch_size,
        inputs=tuple(_tensor(t, source, "input", is_input=True) for t in msg.input),
        outputs=tuple(_tensor(t, source, "output", is_input=False) for t in msg.output),
        instance_groups=tuple(
            InstanceGroupConfig(g.name, kinds.Name(g.kind), g.count, tuple(g.gpus))
            for g in msg.instance_group
        ),
        version_policy=_policy(msg),
        default_model_filename=msg.default_model_filename,
        parameters={k: v.string_value for k, v in msg.parameters.items()},
        decoupled=msg.model_transaction_policy.decoupled,
        as_dict=config_to_dict(msg),
    )
