"""The daemon's one settings object.

Each field has a command-line flag (Triton's name where the concept is the same), an
environment variable (``PBD_`` + the field name in upper case) and one line of help.
Precedence: flag, then environment, then default. Defaults work on a laptop.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "PBD_"
MIB = 1024 * 1024


def _opt(default: Any, help: str, *, choices: Sequence[str] | None = None, once: str = "") -> Any:
    """A field; ``once``: its flag may be given only once, and this says why (a second value
    is an error, not a replacement)."""
    meta = {"help": help, "choices": choices, "once": once}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class Settings:
    model_repository: Path = _opt(
        Path("models"),
        "model repository directory (Triton layout)",
        once="pbd serves one model repository",
    )
    server_id: str = _opt("pbd", "the server name ServerMetadata answers (Triton's --id)")
    allow_grpc: bool = _opt(True, "serve the KServe v2 gRPC binding")
    grpc_address: str = _opt("127.0.0.1", "address the gRPC server binds")
    grpc_port: int = _opt(8001, "gRPC port (0 picks a free one)")
    grpc_restricted_protocol: list[str] = _opt(
        [], "<group>[,<group>...]:<key>=<value>: those RPCs need header triton-grpc-protocol-<key>"
    )
    grpc_socket_mode: str = _opt("0660", "file mode of a unix: gRPC socket (octal)")
    grpc_use_ssl: bool = _opt(False, "serve gRPC over TLS")
    grpc_use_ssl_mutual: bool = _opt(False, "require client certificates (mutual TLS)")
    grpc_server_cert: str = _opt("", "server certificate (PEM) for --grpc-use-ssl")
    grpc_server_key: str = _opt("", "server private key (PEM) for --grpc-use-ssl")
    grpc_root_cert: str = _opt("", "CA certificate (PEM) that signs client certificates")
    allow_http: bool = _opt(True, "serve the KServe v2 HTTP/REST binding too")
    http_address: str = _opt("127.0.0.1", "address the HTTP server binds")
    http_port: int = _opt(8000, "HTTP port (0 picks a free one)")
    http_max_body_bytes: int = _opt(2**31 - 1, "largest HTTP request body accepted")
    http_restricted_api: list[str] = _opt(
        [], "<group>[,<group>...]:<key>=<value>: those HTTP routes need header <key>: <value>"
    )
    http_stream_buffer_bytes: int = _opt(
        16 * MIB,
        "response bytes an SSE stream (generate_stream, /v1 streaming) may hold for a client "
        "that reads slower than the model writes; past it the request is cancelled",
    )
    openai_api_key: list[str] = _opt(
        [],
        "an API key the OpenAI API (/v1) accepts as 'Authorization: Bearer KEY' (repeat; env: "
        "comma-separated; none: /v1 is open)",
    )
    openai_restricted_api: list[str] = _opt(
        [],
        "<group>[,<group>...]:<key>=<value>: those OpenAI routes (groups: inference, embedding, "
        "model-repository) need header <key>: <value>",
    )
    allow_metrics: bool = _opt(True, "serve Prometheus metrics (GET /metrics)")
    allow_cpu_metrics: bool = _opt(True, "export CPU utilization and memory (nv_cpu_*)")
    metrics_counter_latencies: bool = _opt(
        True,
        "export the nv_inference_*_duration_us latency counters and the nv_cache_*_per_model "
        "ones (Triton's --metrics-config counter_latencies)",
    )
    metrics_address: str = _opt("127.0.0.1", "address the metrics server binds")
    metrics_port: int = _opt(8002, "metrics port (0 picks a free one)")
    metrics_histogram_latencies: bool = _opt(
        False,
        "serve nv_inference_first_response_histogram_ms (Triton's --metrics-config "
        "histogram_latencies=true)",
    )
    model_control_mode: str = _opt(
        "none",
        "none: load every model at start; poll: also reload on repository changes; "
        "explicit: load only --load-model and what RepositoryModelLoad asks for",
        choices=("none", "poll", "explicit"),
    )
    load_model: list[str] = _opt([], "model to load at start in explicit mode (repeat; '*' = all)")
    allow_model_upload: bool = _opt(
        False,
        "let RepositoryModelLoad upload a model's files ('file:<path>' parameters, explicit "
        "mode): off, since a client that may load models could then run code it sends",
    )
    model_upload_max_bytes: int = _opt(1024 * MIB, "largest upload (its files' bytes together)")
    model_upload_max_files: int = _opt(1000, "most files in one upload")
    model_upload_dir: str = _opt(
        "",
        "where uploads are written (default: $RUNTIME_DIRECTORY under systemd, else the temp "
        "dir); each daemon makes its own private directory there and removes it at exit",
    )
    repository_poll_secs: float = _opt(15.0, "seconds between repository scans in poll mode")
    strict_readiness: bool = _opt(
        True, "ServerReady only when every model that should load is ready"
    )
    exit_on_error: bool = _opt(
        False, "exit at start if a model fails to load (Triton's default is true)"
    )
    log_file: str = _opt("", "append the log to this file instead of stderr (the workers' log too)")
    log_verbose: int = _opt(0, "verbose logging level (0 = off)")
    log_info: bool = _opt(True, "log INFO lines")
    log_warning: bool = _opt(True, "log WARNING lines")
    log_error: bool = _opt(True, "log ERROR lines")
    log_format: str = _opt(
        "default",
        "log timestamps: default (local time) or ISO8601 (UTC)",
        choices=("default", "ISO8601"),
    )
    trace_config: list[str] = _opt(
        [],
        "Triton's --trace-config: level=OFF|TIMESTAMPS|TENSORS, rate=N (1 in N), count=N, "
        "log-frequency=N, mode=opentelemetry, opentelemetry,url=|resource=k=v|bsp_*=N "
        "(repeat; the exporter itself is set by OTEL_* variables)",
    )
    shm_prefix: str = _opt("pbd", "name prefix of this daemon's segments (memfds)")
    allow_client_shm: bool = _opt(
        False, "let clients register system shared memory (Triton's flag; off as in Triton 2.73)"
    )
    client_shm_key_prefix: list[str] = _opt(
        [], "only shm keys starting with this may be registered (repeat; default: any)"
    )
    cuda_memory_pool_byte_size: list[str] = _opt(
        [],
        "<gpu>:<bytes>: the CUDA memory pool on that GPU, for GPU tensors passed between "
        "workers (BLS); repeat; default 64 MiB per GPU, allocated on first use; 0 = none",
    )
    shm_dir: Path = _opt(Path("/dev/shm"), "directory of clients' system shared-memory keys")
    shm_default_byte_size: int = _opt(4 * MIB, "first shared-memory segment of each worker arena")
    shm_growth_byte_size: int = _opt(16 * MIB, "size of each further segment when an arena grows")
    worker_socket: str = _opt(
        "", "socket workers connect to: a path or @abstract name (default: abstract)"
    )
    launcher: str = _opt(
        "process",
        "how instances run: process (child processes) or systemd (pbd-worker@ units)",
        choices=("process", "systemd"),
    )
    systemd_unit_dir: Path = _opt(
        Path("/run/systemd/system"), "where the systemd launcher writes per-instance drop-ins"
    )
    systemd_env_dir: Path = _opt(
        Path("/run/pbd/workers"), "where it writes each instance's EnvironmentFile"
    )
    systemd_python: str = _opt("", "interpreter of the worker units (default: the daemon's)")
    systemd_reattach_secs: float = _opt(
        120.0, "how long a worker unit waits for a restarted daemon before it exits"
    )
    worker_scheduling: str = _opt(
        "batch",
        "CPU scheduling policy of the workers: batch (SCHED_BATCH: a worker handed a request does "
        "not preempt the daemon, which goes on serving; docs/architecture.md) or normal",
        choices=("batch", "normal"),
    )
    worker_pipeline_depth: int = _opt(
        2, "batches queued at a worker at once (1: strictly one at a time; more hides the hop)"
    )
    execute_timeout_secs: float = _opt(
        0.0,
        "default longest execute() (0: none); longer and the instance is killed and replaced "
        "(per model: parameter pbd.execute_timeout_s)",
    )
    instance_memory_limit_bytes: int = _opt(
        0,
        "default private memory limit of each instance's worker (0: none); past it the "
        "instance is replaced (per model: parameter pbd.memory_limit_bytes)",
    )
    worker_heartbeat_ms: int = _opt(1000, "interval of worker and front-end heartbeats")
    worker_heartbeat_timeout_secs: float = _opt(
        30.0, "a worker or front end silent this long is killed and restarted"
    )
    worker_start_timeout_secs: float = _opt(
        60.0, "time a worker has to connect after it is started (a front end: to serve)"
    )
    model_init_timeout_secs: float = _opt(600.0, "time a model's initialize() may take")
    startup_wait_secs: float = _opt(
        120.0,
        "longest start-up waits for startup models still loading before it reports ready "
        "(READY=1) with them named; they go on loading (0: wait for all)",
    )
    model_finalize_timeout_secs: float = _opt(
        30.0, "time a model's finalize() may take at unload; then its worker is killed"
    )
    backend_directory: Path = _opt(
        Path("/opt/tritonserver/backends"),
        'where Python-based backends live: backend "<name>" runs <dir>/<name>/model.py',
    )
    disable_auto_complete_config: bool = _opt(
        False, "do not run models' auto_complete_config (Triton's flag); config.pbtxt is required"
    )
    execution_env_cache_dir: str = _opt(
        "",
        "where EXECUTION_ENV_PATH archives are unpacked (default: $CACHE_DIRECTORY/envs under "
        "systemd, else ~/.cache/pbd/envs)",
    )
    restart_backoff_max_secs: float = _opt(
        10.0, "longest wait before restarting a crashed instance or front end"
    )
    autoscale: bool = _opt(False, "load-driven scaling for models that don't set pbd.autoscale")
    autoscale_target_inflight: float = _opt(
        1.0, "default pbd.target_inflight: load (queued + running requests) per instance"
    )
    autoscale_scale_down_delay_secs: float = _opt(
        30.0, "default pbd.scale_down_delay_s and pbd.scale_down_window_s"
    )
    max_queue_size: int = _opt(
        0,
        "requests that may wait per model version (0: unbounded); a model's dynamic_batching "
        "default_queue_policy.max_queue_size overrides it",
    )
    max_queued_bytes: int = _opt(
        1024 * MIB,
        "input bytes the daemon holds in accepted, unanswered requests (0: unbounded); more "
        "is refused with RESOURCE_EXHAUSTED",
    )
    grpc_stream_buffer_bytes: int = _opt(
        16 * MIB,
        "response bytes (each response counted at its size plus 256) a ModelStreamInfer call "
        "may hold for a client that reads slower than the model writes; past it the call "
        "reads none of the client's next requests until the client catches up (HTTP/2 flow "
        "control then holds the client back), and a decoupled request that streams on past "
        "twice that is cancelled",
    )
    grpc_max_concurrent_rpcs: int = _opt(
        0, "gRPC calls served at once (0: unbounded); more are refused by gRPC itself"
    )
    grpc_max_connections: int = _opt(
        0,
        "gRPC connections held at once (0: three quarters of the open-file limit, at most "
        "4096); one more gets GOAWAY ENHANCE_YOUR_CALM and is closed",
    )
    grpc_handshake_timeout_secs: float = _opt(
        10.0, "time a new gRPC connection has for TLS, the HTTP/2 preface and SETTINGS (0: none)"
    )
    grpc_header_timeout_secs: float = _opt(
        10.0, "time a request's header block may take over CONTINUATION frames (0: none)"
    )
    grpc_idle_timeout_secs: float = _opt(
        300.0, "a gRPC connection with no call open this long gets GOAWAY and closes (0: never)"
    )
    grpc_max_header_list_bytes: int = _opt(
        16384,
        "largest request header list (SETTINGS_MAX_HEADER_LIST_SIZE, Triton's value); a "
        "larger one is answered UNAVAILABLE",
    )
    grpc_keepalive_permit_without_calls: bool = _opt(
        False, "Triton's: keepalive PINGs while no call is open follow the interval below too"
    )
    grpc_http2_min_recv_ping_interval_without_data: int = _opt(
        300000,
        "Triton's: ms between a client's PINGs while the server sends no HEADERS or DATA; a "
        "sooner PING is a strike (2 h while no call is open)",
    )
    grpc_http2_max_ping_strikes: int = _opt(
        2, "Triton's: strikes before GOAWAY ENHANCE_YOUR_CALM too_many_pings (0: any PINGs)"
    )
    exit_timeout_secs: float = _opt(30.0, "on shutdown, time in-flight requests get to finish")
    cache_local_size_bytes: int = _opt(
        0,
        "bytes of the response cache, for models whose config says response_cache { enable: "
        "true } (Triton's --cache-config local,size=N; 0: no cache)",
    )
    frontends: int = _opt(
        0,
        "processes serving the gRPC and HTTP ports (0: one per 4 usable CPUs, 2 to 8, and 1 "
        "on a single CPU; 1: the daemon serves them itself)",
    )
    frontend_direct: bool = _opt(
        True,
        "with front-end processes, they send requests of eligible model versions straight to "
        "the workers, the daemon out of the way (docs/frontends.md says which versions)",
    )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_json(self) -> str:
        """Every field, for a process of the daemon's that needs the same settings."""
        return json.dumps(dataclasses.asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        values = json.loads(text)
        for f in dataclasses.fields(cls):
            if f.type == "Path" and f.name in values:
                values[f.name] = Path(values[f.name])
        return cls(**values)

    def front_count(self) -> int:
        """How many front-end processes serve the ports: ``frontends``, or for 0 one per four
        usable CPUs, between 2 and 8 (the workers and the daemon need the others), and the
        daemon itself (1) on a single CPU (docs/frontends.md, "Measured")."""
        if self.frontends > 0:
            return self.frontends
        cpus = len(os.sched_getaffinity(0))
        return 1 if cpus < 2 else max(2, min(8, cpus // 4))


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _converter(kind: Any) -> Any:
    return {"bool": parse_bool, "int": int, "float": float, "Path": Path}.get(str(kind), str)


class StoreOnce(argparse.Action):
    """Stores a value; a second one (under any of the flag's spellings) is an error that
    says ``why``."""

    def __init__(self, *args: Any, why: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.why = why

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        if given is not None:
            parser.error(f"{option_string}: given twice ({given}, {values}); {self.why}")
        setattr(namespace, self.dest, values)


def shown_default(value: Any) -> str:
    """A default as ``--help`` and the README's flag table write it: ``true``, ``15``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _help(text: str, env: str, default: Any) -> str:
    """A flag's help: what it does, its variable, and its default. An empty default ("",
    unset) is not shown: what it means is in the text ("default: the daemon's"), once."""
    if default in ("", None):
        return f"{text} [env {env}]"
    return f"{text} [env {env}] (default: {shown_default(default)})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(Settings):
        env = ENV_PREFIX + f.name.upper()
        help_text = f"{f.metadata['help']} [env {env}]"
        if f.type == "list[str]":
            parser.add_argument(_flag(f.name), dest=f.name, action="append", help=help_text)
            continue
        default = f.default
        # A bare boolean flag means true (Triton's --disable-auto-complete-config takes none).
        bare: dict[str, Any] = {"nargs": "?", "const": True} if f.type == "bool" else {}
        parser.add_argument(
            _flag(f.name),
            dest=f.name,
            type=_converter(f.type),
            choices=f.metadata["choices"],
            metavar="BOOL" if f.type == "bool" else None,
            help=_help(f.metadata["help"], env, default),
            **({"action": StoreOnce, "why": f.metadata["once"]} if f.metadata["once"] else {}),
            **bare,
        )


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        given = getattr(args, f.name, None)
        env = environ.get(ENV_PREFIX + f.name.upper())
        if given is not None:
            values[f.name] = given
        elif env is not None:
            if f.type == "list[str]":
                values[f.name] = [v for v in env.split(",") if v]
            else:
                values[f.name] = _converter(f.type)(env)
    settings = Settings(**values)
    if settings.model_control_mode not in ("none", "poll", "explicit"):
        raise ValueError(f"invalid model control mode {settings.model_control_mode!r}")
    if settings.log_format not in ("default", "ISO8601"):
        raise ValueError(f"invalid log format {settings.log_format!r}")
    _check_startup_models(settings)
    from pbd.restrictions import OPENAI_GROUPS, parse_restrictions

    # A bad rule is refused here, before anything starts (the bindings parse them again).
    parse_restrictions("grpc-restricted-protocol", settings.grpc_restricted_protocol)
    parse_restrictions("http-restricted-api", settings.http_restricted_api)
    parse_restrictions(
        "openai-restricted-api", settings.openai_restricted_api, groups_known=OPENAI_GROUPS
    )
    from pbd.tracing.settings import parse_trace_config

    parse_trace_config(settings.trace_config)  # report a bad --trace-config at the start
    from pbd.memory.cuda_pool import pool_sizes

    pool_sizes(settings.cuda_memory_pool_byte_size, [])
    return settings


def _check_startup_models(settings: Settings) -> None:
    """Triton's checks of ``--load-model``, in its words: it names models to load in explicit
    mode only, and ``*`` (every model) stands alone."""
    if settings.load_model and settings.model_control_mode != "explicit":
        raise ValueError(
            "Use of '--load-model' requires setting '--model-control-mode=explicit' as well."
        )
    if "*" in settings.load_model and len(set(settings.load_model)) > 1:
        raise ValueError(
            "Wildcard model name '*' must be the ONLY startup model if specified at all."
        )
