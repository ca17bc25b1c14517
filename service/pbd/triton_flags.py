"""Triton's command line onto pbd's one :class:`~pbd.settings.Settings` object.

Every flag of ``tritonserver`` 2.51 (and three that later versions added) is accepted, in
Triton's spelling (``--flag=value`` or ``--flag value``; booleans as ``true``/``false``,
``on``/``off``, ``1``/``0``, any case). A flag that names a concept ``Settings`` has under the
same name is simply that setting's flag. The others are here, each one of:

- an alias of a setting (``--model-store`` is ``--model-repository``, ``--id`` is
  ``--server-id``);
- a translation onto settings (``--strict-model-config=true`` is
  ``--disable-auto-complete-config``, ``--trace-level=X`` is ``--trace-config level=X``,
  ``--metrics-config``, ``--backend-config`` and ``--cache-config`` set the settings they name);
- a flag pbd accepts without effect: it is checked as Triton checks it, and a one-line log says
  why it changes nothing (INFO when its value asks for what pbd does anyway, WARNING when it
  asks for something pbd does not do);
- a flag pbd refuses, where ignoring it would serve something else than asked (another
  configuration file than the one named).

The translation writes into the parsed arguments before ``pbd.settings.from_args`` reads them,
so a flag, in either spelling, beats its ``PBD_*`` variable, which beats the default.
``pbd-tritonserver`` also takes Triton's defaults where they differ from pbd's
(:data:`TRITON_DEFAULTS`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pbd.settings import ENV_PREFIX, Settings, StoreOnce, parse_bool

INFO, WARNING = logging.INFO, logging.WARNING
Note = tuple[int, str]  # (log level, line) said once logging is set up

# Triton's defaults where pbd's differ (pbd binds loopback and keeps serving when a model
# fails; Triton binds every address and exits). Taken by ``pbd-tritonserver`` only, for
# settings given neither as a flag nor as a PBD_* variable. Triton's metrics address defaults
# to its HTTP address.
TRITON_DEFAULTS: dict[str, Any] = {
    "grpc_address": "0.0.0.0",
    "http_address": "0.0.0.0",
    "exit_on_error": True,
}

# Triton's threads and port sharing for its front ends. pbd's front ends are processes
# (--frontends), sized by measurement rather than by a thread count; this one place says so.
FRONTEND_FLAGS = (
    "http-thread-count",
    "grpc-infer-thread-count",
    "reuse-http-port",
    "reuse-grpc-port",
)
FRONTEND_WHY = (
    "pbd's --frontends sets the processes that serve HTTP and gRPC (all on the same "
    "sockets); models run in their own worker processes (instance_group count)"
)

_KEEPALIVE_WHY = (
    "pbd's HTTP/2 server turns on TCP keepalive, answers every client ping and sends none, and "
    "does not age connections out"
)
_SAGEMAKER_WHY = "pbd serves the KServe v2 protocol only (no SageMaker endpoints)"
_VERTEX_WHY = "pbd serves the KServe v2 protocol only (no Vertex AI endpoint)"
_CACHE_DIRECTORY_WHY = "pbd's response cache is built in: there is no cache library to look for"
_FORWARD_WHY = "pbd does not forward request headers to models as request parameters"
_TRACE_FILE_WHY = (
    "pbd traces with OpenTelemetry only (--trace-config opentelemetry,url=...), not to files"
)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}") from None


def _bool(text: str) -> bool:
    """Triton's spellings (true/false, on/off, 1/0, any case), and pbd's yes/no."""
    try:
        return parse_bool(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"invalid value for bool option: {text}") from None


_TYPES: dict[str, Callable[[str], Any]] = {"bool": _bool, "int": _int, "float": _float, "str": str}

# What a translation does with a flag's values (all of them for a repeatable flag, else the
# last, as in Triton): writes into the parsed arguments, adds notes.
Apply = Callable[[list[Any], argparse.Namespace, list[Note]], None]


@dataclass(frozen=True)
class TritonFlag:
    name: str  # without the leading dashes
    type: str  # "bool" | "int" | "float" | "str"
    apply: Apply
    what: str  # one line for --help and docs/triton-compat.md
    repeat: bool = False  # every value counts (else the last one does, as in Triton)
    since: str = ""  # the Triton version that added it, when after 2.51

    @property
    def dest(self) -> str:
        return "triton_" + self.name.replace("-", "_")


def _shown(flag: str, value: Any) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return f"--{flag}={text}"


def _alias(field: str) -> Apply:
    def apply(values: list[Any], args: argparse.Namespace, notes: list[Note]) -> None:
        setattr(args, field, values[-1])

    return apply


def _append(field: str, convert: Callable[[Any], str]) -> Apply:
    def apply(values: list[Any], args: argparse.Namespace, notes: list[Note]) -> None:
        setattr(args, field, [*(getattr(args, field) or []), *map(convert, values)])

    return apply


def no_effect(flag: str, why: str, inert: Callable[[Any], bool] | None = None) -> Apply:
    """Accepted, changes nothing; ``inert(value)``: the value asks for what pbd does anyway."""

    def apply(values: list[Any], args: argparse.Namespace, notes: list[Note]) -> None:
        for value in values:
            level = INFO if inert is not None and inert(value) else WARNING
            notes.append((level, f"{_shown(flag, value)} has no effect in pbd: {why}"))

    return apply


def _refused(flag: str, why: str) -> Apply:
    def apply(values: list[Any], args: argparse.Namespace, notes: list[Note]) -> None:
        raise ValueError(f"{_shown(flag, values[-1])}: {why}")

    return apply


def _off(value: Any) -> bool:
    return value is False


# --- --metrics-config -------------------------------------------------------------------------


def _metrics_config(values: list[str], args: argparse.Namespace, notes: list[Note]) -> None:
    """``<setting>=<value>`` each: counter_latencies and histogram_latencies are honoured;
    Triton's summaries are not exported by pbd."""
    for value in values:
        _metrics_setting(value, args, notes)


def _metrics_setting(value: str, args: argparse.Namespace, notes: list[Note]) -> None:
    setting, sep, text = value.partition("=")
    if not sep or not setting or not text or "," in setting:
        raise ValueError(f"--metrics-config option format is <setting>=<value>. Got {value}")
    if setting == "counter_latencies":
        # Triton turns them off for "false" only; any other value leaves them on.
        args.metrics_counter_latencies = text != "false"
        return
    if setting == "histogram_latencies":
        # Triton turns its histograms on for "true" only (pbd's one histogram: the time to
        # the first response, which Triton has from 2.52 on).
        args.metrics_histogram_latencies = text == "true"
        return
    why = {
        "summary_latencies": "pbd exports no latency summaries",
        "summary_quantiles": "pbd exports no latency summaries",
    }.get(setting, "not a setting Triton 2.51 knows")
    inert = setting == "summary_latencies" and text == "false"
    line = f"--metrics-config={value} has no effect in pbd: {why}"
    notes.append((INFO if inert else WARNING, line))


# --- --cache-config, --response-cache-byte-size ----------------------------------------------

LOCAL_CACHE = "local"  # Triton's cache of a fixed size in the server's memory: pbd's cache
_OTHER_CACHE_WHY = (
    "pbd's response cache is Triton's 'local' one (--cache-config=local,size=N); models with "
    "response_cache run every request unless it is set"
)
# The deprecated flag's dest (add_triton_arguments), read to refuse the two flags together.
_RESPONSE_CACHE_DEST = "triton_response_cache_byte_size"


def parse_cache_config(value: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>`` as (cache, setting, value); ValueError in Triton's words."""
    name, comma, rest = value.partition(",")
    if not comma or not name:
        raise ValueError(
            "No cache specified. --cache-config option format is <cache name>,<setting>=<value>. "
            f"Got {value}"
        )
    return (name, *_setting("cache-config", "cache", rest, value))


def _setting(flag: str, owner: str, rest: str, value: str) -> tuple[str, str]:
    """(setting, value) of ``rest``, the ``<setting>=<value>`` of a ``--<flag>`` value (of a
    backend or a cache: ``owner``); ValueError in Triton's words when it is not one."""
    setting, eq, text = rest.partition("=")
    if not eq or not setting or not text:
        raise ValueError(
            f"--{flag} option format is '<{owner} name>,<setting>=<value>'. Got {value}"
        )
    return setting, text


def _cache_configs(values: list[str], args: argparse.Namespace, notes: list[Note]) -> None:
    """The local cache's ``size`` is ``--cache-local-size-bytes`` (the last one counts, as in
    Triton); other caches and settings change nothing. An explicit pbd flag wins."""
    if getattr(args, _RESPONSE_CACHE_DEST, None):
        raise ValueError(
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    local = False
    size = ""
    for value in values:
        name, setting, text = parse_cache_config(value)
        if name != LOCAL_CACHE:
            notes.append(
                (WARNING, f"--cache-config={value} has no effect in pbd: {_OTHER_CACHE_WHY}")
            )
            continue
        local = True
        if setting == "size":
            size = text
        else:  # Triton's local cache reads its size and nothing else
            notes.append((INFO, f"--cache-config={value} has no effect in pbd: the local cache "
                                "has one setting, size"))  # fmt: skip
    if local and not size:
        raise ValueError(
            "--cache-config: Failed to initialize LocalCache: config didn't contain a valid "
            "'size' field."
        )
    if size:
        _cache_size(f"--cache-config={LOCAL_CACHE},size={size}", size, args)


def _response_cache_byte_size(
    values: list[int], args: argparse.Namespace, notes: list[Note]
) -> None:
    """Triton's deprecated spelling of ``--cache-config=local,size=N``."""
    shown = _shown("response-cache-byte-size", values[-1])
    notes.append((WARNING, f"{shown} is deprecated (as in Triton): it is "
                           f"--cache-config={LOCAL_CACHE},size={values[-1]}"))  # fmt: skip
    _cache_size(shown, str(values[-1]), args)


def _cache_size(shown: str, text: str, args: argparse.Namespace) -> None:
    try:
        size = int(text)
    except ValueError:
        raise ValueError(f"{shown}: the local cache's size is a number of bytes") from None
    if size <= 0:
        # Triton 2.51 does not start either ("Failed to initialize LocalCache").
        raise ValueError(f"{shown}: a local cache of {size} bytes cannot hold anything; leave "
                         "the flag out for no cache")  # fmt: skip
    if getattr(args, "cache_local_size_bytes", None) is None:
        args.cache_local_size_bytes = size


# --- --backend-config -------------------------------------------------------------------------

# The python backend's settings pbd honours: (pbd setting, convert, Triton's check). Global
# settings (no backend name) apply to it too; its own override them, as in Triton.
_PYTHON_BACKEND: dict[str, tuple[str, Callable[[str], Any]]] = {
    "shm-default-byte-size": ("shm_default_byte_size", int),
    "shm-growth-byte-size": ("shm_growth_byte_size", int),
    "stub-timeout-seconds": ("worker_start_timeout_secs", int),
    "shm-region-prefix-name": ("shm_prefix", str),
}
_OTHER = (
    "only the python backend's settings (and global ones) apply; Triton 2.51 runs a "
    "Python-based backend with the python backend's settings too"
)
_PYTHON_BACKEND_INERT = {
    "shm_message_queue_size": "requests reach workers over a socket, not a shared-memory queue",
    "thread-pool-size": "a model's BLS calls are served by the daemon's event loop",
    "default-max-batch-size": "Triton's python backend does not use it either",
}


def parse_backend_config(value: str) -> tuple[str, str, str]:
    """``[<backend>,]<setting>=<value>`` as (backend, setting, value); backend "" = all."""
    name, comma, rest = value.partition(",")
    if not comma or "=" in name:  # a comma inside the value is not a backend name
        name, rest = "", value
    elif not name:
        raise ValueError(
            "No backend specified. --backend-config option format is <backend name>,"
            f"<setting>=<value> or <setting>=<value>. Got {value}"
        )
    return (name, *_setting("backend-config", "backend", rest, value))


def _backend_configs(values: list[str], args: argparse.Namespace, notes: list[Note]) -> None:
    """Every ``--backend-config``: global ones first, the python backend's over them. An
    explicit pbd flag for the same setting wins over both."""
    parsed = [(parse_backend_config(v), v) for v in values]
    explicit = {field for field, _ in _PYTHON_BACKEND.values() if getattr(args, field) is not None}
    for (name, setting, text), value in sorted(parsed, key=lambda p: p[0][0] == "python"):
        if name not in ("", "python"):
            notes.append((WARNING, f"--backend-config={value} has no effect in pbd: {_OTHER}"))
            continue
        if setting in _PYTHON_BACKEND:
            field, convert = _PYTHON_BACKEND[setting]
            try:
                converted = convert(text)
            except ValueError:
                raise ValueError(f"--backend-config={value}: Invalid option value") from None
            if isinstance(converted, int) and converted <= 0:
                raise ValueError(f"{setting} can't be smaller than or equal to zero.")
            if field not in explicit:
                setattr(args, field, converted)
            continue
        why = _PYTHON_BACKEND_INERT.get(setting, "not a setting of Triton's python backend")
        notes.append((INFO, f"--backend-config={value} has no effect in pbd: {why}"))


# --- the table --------------------------------------------------------------------------------


def _flags() -> list[TritonFlag]:
    f = TritonFlag
    ne = no_effect
    frontends = [
        f(n, "int" if n.endswith("count") else "bool", ne(n, FRONTEND_WHY),
          "no effect: " + FRONTEND_WHY, since="2.57" if n == "grpc-infer-thread-count" else "")
        for n in FRONTEND_FLAGS
    ]  # fmt: skip
    keepalive = [
        f(n, "bool" if n.endswith("calls") else "int", ne(n, _KEEPALIVE_WHY),
          "no effect: " + _KEEPALIVE_WHY)
        for n in ("grpc-keepalive-time", "grpc-keepalive-timeout",
                  "grpc-keepalive-permit-without-calls", "grpc-http2-max-pings-without-data",
                  "grpc-http2-min-recv-ping-interval-without-data", "grpc-http2-max-ping-strikes",
                  "grpc-max-connection-age", "grpc-max-connection-age-grace")
    ]  # fmt: skip
    quiet = [  # (name, type, why, inert)
        ("model-load-thread-count", "int",
         "pbd loads models concurrently, each instance initializing in its own process", None),
        ("model-load-retry-count", "int",
         "pbd does not retry a failed load (a crashed instance is restarted with backoff)",
         lambda v: v == 0),
        ("model-namespacing", "bool", "pbd serves one repository, whose model names are unique",
         _off),
        ("enable-peer-access", "bool",
         "pbd makes no CUDA peer-access calls; GPU tensors move by CUDA IPC", None),
        ("http-header-forward-pattern", "str", _FORWARD_WHY, None),
        ("grpc-header-forward-pattern", "str", _FORWARD_WHY, None),
        ("grpc-infer-allocation-pool-size", "int",
         "pbd keeps no pool of request and response objects", None),
        ("grpc-max-response-pool-size", "int", "pbd keeps no pool of responses", None),
        ("grpc-infer-response-compression-level", "str", "pbd sends responses uncompressed",
         lambda v: v == "none"),
        ("allow-sagemaker", "bool", _SAGEMAKER_WHY, _off),
        ("sagemaker-port", "int", _SAGEMAKER_WHY, None),
        ("sagemaker-safe-port-range", "str", _SAGEMAKER_WHY, None),
        ("sagemaker-thread-count", "int", _SAGEMAKER_WHY, None),
        ("allow-vertex-ai", "bool", _VERTEX_WHY, _off),
        ("vertex-ai-port", "int", _VERTEX_WHY, None),
        ("vertex-ai-thread-count", "int", _VERTEX_WHY, None),
        ("vertex-ai-default-model", "str", _VERTEX_WHY, None),
        ("allow-gpu-metrics", "bool", "pbd exports no GPU metrics", _off),
        ("metrics-interval-ms", "float", "pbd reads its metrics when they are scraped", None),
        ("trace-file", "str", _TRACE_FILE_WHY, None),
        ("repoagent-directory", "str", "pbd runs no repository agents", None),
        ("cache-directory", "str", _CACHE_DIRECTORY_WHY, lambda v: True),
        ("rate-limit", "str", "pbd has no rate limiter: an instance takes work once it is free",
         lambda v: v == "off"),
        ("rate-limit-resource", "str", "pbd has no rate limiter", None),
        ("pinned-memory-pool-byte-size", "int",
         "tensors move through shared memory, not pinned host buffers", None),
        ("cuda-virtual-address-size", "str",
         "pbd has no implicit state (sequence_batching state)", None),
        ("min-supported-compute-capability", "float",
         "pbd uses every GPU CUDA_VISIBLE_DEVICES shows", None),
        ("buffer-manager-thread-count", "int",
         "tensor bytes are copied once, by the daemon's event loop", None),
        ("host-policy", "str",
         "pbd sets no NUMA or CPU affinity (a systemd drop-in per model can)", None),
        ("model-load-gpu-limit", "str", "pbd does not measure GPU memory at load", None),
    ]  # fmt: skip
    repeatable = {
        "rate-limit-resource",
        "cuda-virtual-address-size",
        "host-policy",
        "model-load-gpu-limit",
    }
    since = {"grpc-max-response-pool-size": "2.56"}
    return [
        # Registered under --model-repository's own name (add_triton_arguments): one of them.
        f("model-store", "str", _alias("model_repository"), "= --model-repository"),
        f("id", "str", _alias("server_id"), "= --server-id: the name ServerMetadata answers"),
        f("strict-model-config", "bool", _alias("disable_auto_complete_config"),
          "= --disable-auto-complete-config (true) or its opposite (false)"),
        f("http-max-input-size", "int", _alias("http_max_body_bytes"),
          "= --http-max-body-bytes", since="2.59"),
        f("trace-level", "str", _append("trace_config", lambda v: f"level={v}"),
          "= --trace-config level=...", repeat=True),
        f("trace-rate", "int", _append("trace_config", lambda v: f"rate={v}"),
          "= --trace-config rate=..."),
        f("trace-count", "int", _append("trace_config", lambda v: f"count={v}"),
          "= --trace-config count=..."),
        f("trace-log-frequency", "int", _append("trace_config", lambda v: f"log-frequency={v}"),
          "= --trace-config log-frequency=..."),
        f("metrics-config", "str", _metrics_config,
          "counter_latencies=false drops the latency counters; histogram_latencies=true "
          "exports the time to first response; summaries: no effect", repeat=True),
        f("cache-config", "str", _cache_configs,
          "local,size=N = --cache-local-size-bytes=N; other caches: no effect", repeat=True),
        f("response-cache-byte-size", "int", _response_cache_byte_size,
          "= --cache-config=local,size=N (deprecated in Triton)"),
        f("backend-config", "str", _backend_configs,
          "the python backend's (and global) shm-default-byte-size, shm-growth-byte-size, "
          "stub-timeout-seconds, shm-region-prefix-name; others: no effect", repeat=True),
        f("model-config-name", "str", _refused("model-config-name",
          "pbd reads each model's config.pbtxt only, and would serve another configuration than "
          "the one named"), "refused: pbd reads config.pbtxt only"),
        *frontends,
        *keepalive,
        *(f(n, t, ne(n, why, inert), "no effect: " + why, repeat=n in repeatable,
            since=since.get(n, "")) for n, t, why, inert in quiet),
    ]  # fmt: skip


TRITON_FLAGS: tuple[TritonFlag, ...] = tuple(_flags())


def pbd_flags() -> set[str]:
    """The flags ``Settings`` gives ``pbd serve`` (without dashes)."""
    return {f.name.replace("_", "-") for f in dataclasses.fields(Settings)}


def triton_only_flags() -> list[TritonFlag]:
    """The table's flags that are not already a setting's own flag (a setting added later
    under Triton's name takes its flag over)."""
    taken = pbd_flags()
    return [flag for flag in TRITON_FLAGS if flag.name not in taken]


def add_triton_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "tritonserver flags",
        "Triton's flags that pbd spells differently or does without (docs/triton-compat.md); "
        "the others above keep Triton's names",
    )
    for flag in triton_only_flags():
        bare: dict[str, Any] = {"nargs": "?", "const": True} if flag.type == "bool" else {}
        since = f" (Triton {flag.since}+)" if flag.since else ""
        if flag.name == "model-store":  # one repository, under either name
            group.add_argument(
                f"--{flag.name}",
                dest="model_repository",
                type=Path,
                action=StoreOnce,
                why="pbd serves one model repository",
                help=flag.what,
            )
            continue
        group.add_argument(
            f"--{flag.name}",
            dest=flag.dest,
            type=_TYPES[flag.type],
            action="append",
            metavar=flag.type.upper(),
            help=flag.what + since,
            **bare,
        )


def apply_triton_arguments(args: argparse.Namespace) -> list[Note]:
    """Write the Triton-only flags' meaning into ``args`` (ValueError for a refused or
    malformed one); the notes to log."""
    notes: list[Note] = []
    for flag in triton_only_flags():
        values = getattr(args, flag.dest, None) or []
        if values:
            flag.apply(values if flag.repeat else values[-1:], args, notes)
    return notes


def apply_triton_defaults(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """Triton's defaults (``pbd-tritonserver``) for settings neither flag nor PBD_* set."""

    def unset(field: str) -> bool:
        return getattr(args, field, None) is None and ENV_PREFIX + field.upper() not in environ

    for field, value in TRITON_DEFAULTS.items():
        if unset(field):
            setattr(args, field, value)
    if unset("metrics_address"):
        args.metrics_address = args.http_address or environ.get(ENV_PREFIX + "HTTP_ADDRESS")
