"""config.pbtxt -> an immutable, validated :class:`~pbd.modelconfig.model.ModelConfig`.

config.pbtxt is protobuf text format of ``ModelConfig``. This module is the file-format edge:
it parses the file (or the JSON of RepositoryModelLoad's ``config`` parameter), fills the
defaults Triton fills (core ``NormalizeModelConfig``/``NormalizeInstanceGroup``), checks it
(Triton's ``ValidateIOShape`` rules and more; every message names the file and the field), and
keeps the JSON form models get as ``args["model_config"]`` and the ModelConfig RPC returns.
KIND_AUTO is left for the daemon to resolve (pbd.version.placement): only it knows the GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from google.protobuf import json_format, text_format

from pbd._proto import model_config_pb2 as mc
from pbd.errors import Code, PbdError
from pbd.modelconfig.ensemble import ensemble_spec, is_ensemble
from pbd.modelconfig.json_form import config_to_dict
from pbd.modelconfig.model import (
    SEQUENCE_IDLE_DEFAULT_US,
    InstanceGroupConfig,
    ModelConfig,
    TensorConfig,
    VersionPolicy,
)
from pbd.modelconfig.shapes import ShapeError, check_shape
from pbd_wire import dtypes

CONFIG_FILE = "config.pbtxt"
DEFAULT_MODEL_FILENAME = "model.py"

_Group = mc.ModelInstanceGroup
_IMAGE_FORMATS = (mc.ModelInput.FORMAT_NHWC, mc.ModelInput.FORMAT_NCHW)


class ConfigError(PbdError):
    """A model configuration that cannot be served; the message names the file and field.

    The code is the one Triton 2.51's clients see: INVALID_ARGUMENT for a configuration that
    was read but breaks a rule, INTERNAL (``unreadable``) for one Triton cannot even read (a
    text or JSON syntax error, a name that is not the directory's): Triton finds those while
    polling the repository and answers "failed to poll from model repository" (pbd keeps its
    precise message)."""

    def __init__(self, message: str, *, unreadable: bool = False) -> None:
        super().__init__(Code.INTERNAL if unreadable else Code.INVALID_ARG, message)


def load_model_config(model_dir: Path, *, override_json: str | None = None) -> ModelConfig:
    """The config of the model in ``model_dir``; ``override_json`` (RepositoryModelLoad's
    ``config`` parameter) is used instead of the file when given."""
    message, source = read_model_config(model_dir, override_json=override_json)
    return build_model_config(message, model_dir.name, source)


def read_model_config(
    model_dir: Path, *, override_json: str | None = None, allow_missing: bool = False
) -> tuple[mc.ModelConfig, str]:
    """The config of ``model_dir`` as written (parsed, not completed or checked) and where
    it came from. ``allow_missing``: no config.pbtxt reads as an empty config (auto-complete
    fills it in, as Triton does)."""
    if override_json is not None:
        source = f"{model_dir} ('config' parameter)"
        return _message_from_json(override_json, source), source
    path = model_dir / CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if allow_missing:
            return mc.ModelConfig(), f"{model_dir} (no {CONFIG_FILE})"
        raise ConfigError(f"{model_dir}: missing {CONFIG_FILE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}", unreadable=True) from None
    return _message_from_text(text, str(path)), str(path)


def build_model_config(message: mc.ModelConfig, model_name: str, source: str) -> ModelConfig:
    """``message`` with Triton's defaults filled in, checked (modifies ``message``)."""
    return _build(message, model_name, source)


def parse_model_config(text: str, *, model_name: str, source: str) -> ModelConfig:
    """``text`` (protobuf text format) as the config of ``model_name``."""
    return _build(_message_from_text(text, source), model_name, source)


def model_config_from_json(text: str, *, model_name: str, source: str) -> ModelConfig:
    """``text`` (the JSON form, as RepositoryModelLoad's ``config`` carries it)."""
    return _build(_message_from_json(text, source), model_name, source)


def _message_from_text(text: str, source: str) -> mc.ModelConfig:
    message = mc.ModelConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        # protobuf's message starts with "line:column : ".
        raise ConfigError(
            f"{source}: invalid model configuration: {_triton_names(exc)}", unreadable=True
        ) from None
    return message


def _message_from_json(text: str, source: str) -> mc.ModelConfig:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: deep nesting
        raise ConfigError(
            f"{source}: invalid model configuration JSON: {exc}", unreadable=True
        ) from None
    if not isinstance(document, dict):
        raise ConfigError(
            f"{source}: the model configuration JSON must be an object", unreadable=True
        )
    message = mc.ModelConfig()
    try:
        json_format.ParseDict(document, message)
    except json_format.ParseError as exc:
        raise ConfigError(
            f"{source}: invalid model configuration JSON: {_triton_names(exc)}", unreadable=True
        ) from None
    return message


def _triton_names(exc: Exception) -> str:
    """protobuf's message, naming the types as Triton's users know them (inference.*)."""
    return str(exc).replace(f"{mc.DESCRIPTOR.package}.", "inference.")


def _build(msg: mc.ModelConfig, model_name: str, src: str) -> ModelConfig:
    _fill_defaults(msg, model_name)
    _check_model(msg, model_name, src)
    inputs = tuple(_tensor(t, "input", msg, src) for t in msg.input)
    outputs = tuple(_tensor(t, "output", msg, src) for t in msg.output)
    _check_unique(inputs, "input", src)
    _check_unique(outputs, "output", src)
    try:
        ensemble = ensemble_spec(msg)
    except ValueError as exc:  # a wrong ensemble_scheduling, in Triton's words
        raise ConfigError(f"{src}: {exc}") from None
    return ModelConfig(
        name=msg.name,
        backend=msg.backend,
        platform=msg.platform,
        max_batch_size=msg.max_batch_size,
        inputs=inputs,
        outputs=outputs,
        instance_groups=tuple(_instance_group(g, msg, src) for g in msg.instance_group),
        version_policy=_version_policy(msg.version_policy, src),
        default_model_filename=msg.default_model_filename,
        parameters=MappingProxyType({k: v.string_value for k, v in msg.parameters.items()}),
        decoupled=msg.model_transaction_policy.decoupled,
        as_dict=config_to_dict(msg),
        ensemble=ensemble,
    )


def _fill_defaults(msg: mc.ModelConfig, model_name: str) -> None:
    """What Triton's auto-fill and normalization add to a Python model's config."""
    if not msg.name:
        msg.name = model_name
    if not msg.backend and not msg.platform:
        msg.backend = "python"
    if msg.backend == "python" and not msg.default_model_filename:
        msg.default_model_filename = DEFAULT_MODEL_FILENAME
    if not msg.HasField("version_policy"):
        msg.version_policy.latest.num_versions = 1
    # Triton prefers full batches unless told otherwise.
    full_batch = [msg.max_batch_size] if msg.max_batch_size > 0 else []
    if msg.HasField("dynamic_batching") and not msg.dynamic_batching.preferred_batch_size:
        msg.dynamic_batching.preferred_batch_size.extend(full_batch)
    if msg.HasField("sequence_batching"):
        sequence = msg.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if sequence.HasField("oldest") and not sequence.oldest.preferred_batch_size:
            sequence.oldest.preferred_batch_size.extend(full_batch)
    if is_ensemble(msg):
        return  # Triton normalizes nothing more for ensembles
    optimization = msg.optimization
    if not optimization.HasField("input_pinned_memory"):
        optimization.input_pinned_memory.enable = True
    if not optimization.HasField("output_pinned_memory"):
        optimization.output_pinned_memory.enable = True
    if not msg.instance_group:
        # Triton names the group it adds after the model; groups written without a name
        # become <model>_<index>.
        msg.instance_group.add(name=msg.name)
    for index, group in enumerate(msg.instance_group):
        if not group.name:
            group.name = f"{msg.name}_{index}"
        if group.count == 0:
            group.count = 1


def _check_model(msg: mc.ModelConfig, model_name: str, src: str) -> None:
    if msg.name != model_name:
        # Triton's wording (model_repository_manager.cc).
        raise ConfigError(
            f"{src}: unexpected directory name '{model_name}' for model '{msg.name}', "
            "directory name must equal model name",
            unreadable=True,
        )
    if msg.max_batch_size < 0:
        raise ConfigError(f"{src}: max_batch_size must be >= 0, got {msg.max_batch_size}")
    _check_response_cache(msg, src)
    if is_ensemble(msg):
        return  # no model file nor batcher of its own: pbd.modelconfig.ensemble checks the steps
    if msg.platform:
        raise ConfigError(
            f"{src}: platform '{msg.platform}' is not supported: pbd serves Python models "
            '(backend: "python")'
        )
    if msg.backend == "python":
        check_model_filename(msg.default_model_filename, src)
    # Any other backend is looked up in --backend-directory (pbd.modelconfig.backends).
    _check_preferred(msg.dynamic_batching.preferred_batch_size, msg, f"{src}: dynamic_batching")
    oldest = msg.sequence_batching.oldest
    _check_preferred(oldest.preferred_batch_size, msg, f"{src}: sequence_batching oldest")


def _check_response_cache(msg: mc.ModelConfig, src: str) -> None:
    """Triton refuses to load a model that caches responses it cannot cache (its wording)."""
    if not msg.response_cache.enable:
        return
    if msg.model_transaction_policy.decoupled:
        kind = "'decoupled' transaction policy"
    elif msg.HasField("sequence_batching"):
        kind = "sequence batching scheduler"
    else:
        return
    raise ConfigError(
        f"{src}: Response Cache does not currently support model {msg.name} with {kind}. "
        "Please disable the response cache."
    )


def check_model_filename(filename: str, src: str) -> None:
    """``default_model_filename`` is one Python file's name in a version directory: never a
    path, so no config (nor a client's override) makes pbd import code from elsewhere."""
    if not filename.endswith(".py"):
        raise ConfigError(
            f"{src}: default_model_filename '{filename}' must name a Python file (end in '.py')"
        )
    if "/" in filename or "\0" in filename:
        raise ConfigError(
            f"{src}: default_model_filename '{filename}' must be a file name in the version "
            "directory, not a path"
        )


def _check_preferred(sizes: Sequence[int], msg: mc.ModelConfig, where: str) -> None:
    for size in sizes:
        if size <= 0:
            raise ConfigError(f"{where}: preferred_batch_size {size} must be positive")
        if size > msg.max_batch_size:
            raise ConfigError(
                f"{where}: preferred_batch_size {size} must be <= max_batch_size "
                f"({msg.max_batch_size})"
            )


def _tensor(t: Any, kind: str, msg: mc.ModelConfig, src: str) -> TensorConfig:
    """One ``ModelInput``/``ModelOutput`` (``kind`` "input"/"output"), checked."""
    if not t.name:
        raise ConfigError(f"{src}: {kind}: every {kind} must specify 'name'")
    label = f"{src}: {kind} '{t.name}'"
    if t.data_type == mc.TYPE_INVALID:
        raise ConfigError(f"{label}: data_type must be set")
    datatype = dtypes.BY_CONFIG_NUMBER.get(t.data_type)
    if datatype is None:
        raise ConfigError(f"{label}: data_type {t.data_type} is not a known data type")
    if t.is_shape_tensor:
        raise ConfigError(f"{label}: shape tensors are only supported for TensorRT models")
    if t.is_non_linear_format_io:
        raise ConfigError(f"{label}: non-linear IO formats are only supported for TensorRT")
    if kind == "input" and t.format in _IMAGE_FORMATS and len(t.dims) != 3:
        raise ConfigError(f"{label}: format {mc.ModelInput.Format.Name(t.format)} needs 3 dims")
    dims = tuple(t.dims)
    reshape = tuple(t.reshape.shape) if t.HasField("reshape") else None
    try:
        check_shape(label, dims, reshape, msg.max_batch_size)
    except ShapeError as exc:
        raise ConfigError(str(exc)) from None
    optional = kind == "input" and t.optional
    return TensorConfig(t.name, datatype.name, dims, reshape, optional)


def _check_unique(tensors: tuple[TensorConfig, ...], kind: str, src: str) -> None:
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise ConfigError(f"{src}: {kind} '{t.name}' is declared more than once")
        seen.add(t.name)


def _instance_group(group: Any, msg: mc.ModelConfig, src: str) -> InstanceGroupConfig:
    label = f"{src}: instance_group '{group.name}'"
    if group.kind not in _Group.Kind.values():
        raise ConfigError(f"{label}: kind {group.kind} is not a known kind")
    kind = _Group.Kind.Name(group.kind)
    if group.count < 0:
        raise ConfigError(f"{label}: count must be >= 0, got {group.count}")
    if group.gpus and group.kind in (_Group.KIND_CPU, _Group.KIND_MODEL):
        # Triton: "... has kind KIND_CPU but specifies one or more GPUs".
        raise ConfigError(f"{label}: has kind {kind} but specifies one or more GPUs")
    negative = [g for g in group.gpus if g < 0]
    if negative:
        raise ConfigError(f"{label}: gpu ids must be >= 0, got {negative[0]}")
    if group.profile:
        raise ConfigError(f"{label}: profile is only supported for TensorRT models")
    return InstanceGroupConfig(group.name, kind, group.count, tuple(group.gpus))


def _version_policy(policy: mc.ModelVersionPolicy, src: str) -> VersionPolicy:
    if policy.HasField("all"):
        return VersionPolicy("all")
    if policy.HasField("specific"):
        if not policy.specific.versions:
            raise ConfigError(f"{src}: version_policy specific must list at least one version")
        return VersionPolicy("specific", versions=tuple(sorted(set(policy.specific.versions))))
    if policy.latest.num_versions < 1:
        # Triton accepts it and then fails the load: no version can be served.
        raise ConfigError(f"{src}: version_policy latest: num_versions must be >= 1")
    return VersionPolicy("latest", num_versions=policy.latest.num_versions)
