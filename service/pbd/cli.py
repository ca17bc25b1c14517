"""The command lines: ``pbd`` (serve, status, install-units) and ``pbd-tritonserver``, which
takes ``tritonserver``'s command line (pbd.triton_flags) and Triton's defaults."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pbd import __version__
from pbd.settings import ENV_PREFIX, Settings, add_arguments, from_args
from pbd.status_line import one_line
from pbd.triton_flags import (
    Note,
    add_triton_arguments,
    apply_triton_arguments,
    apply_triton_defaults,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pbd", description="Serve Triton Python models over the KServe v2 gRPC protocol."
    )
    parser.add_argument("--version", action="version", version=f"pbd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the daemon on a model repository",
        description="Run the daemon. Every flag also reads PBD_<FLAG> from the environment.",
    )
    add_arguments(serve)
    add_triton_arguments(serve)
    status = commands.add_parser(
        "status",
        help="print each model version's state, and instance counts of autoscaled models",
    )
    status.add_argument(
        "--url",
        default=None,
        help="the daemon's gRPC address (default: from PBD_GRPC_ADDRESS and PBD_GRPC_PORT, "
        "as `pbd serve` reads them; else 127.0.0.1:8001)",
    )
    install = commands.add_parser(
        "install-units",
        help="install pbd.service and pbd-worker@.service for this Python environment",
        description="Copy the systemd units into UNIT_DIR and write pbd.service.d/10-install.conf "
        "with this interpreter and the model repository. Then: systemctl daemon-reload; "
        "systemctl start pbd.",
    )
    install.add_argument("--model-repository", type=Path, required=True)
    install.add_argument("--unit-dir", type=Path, default=Path("/etc/systemd/system"))
    install.add_argument(
        "--python", default=sys.executable, help="interpreter pbd is installed for"
    )
    install.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a pbd serve setting for the unit, e.g. grpc_port=8001 (repeat)",
    )
    return parser


def _install_units(args: argparse.Namespace) -> int:
    from pbd.settings import Settings
    from pbd.systemd.units import install

    extra: dict[str, str] = {}
    for item in args.setting:
        name, sep, value = item.partition("=")
        if not sep or name not in Settings.field_names():
            print(f"pbd install-units: unknown setting {item!r}", file=sys.stderr)
            return 2
        extra[ENV_PREFIX + name.upper()] = value
    if not args.model_repository.is_dir():
        print(f"pbd install-units: {args.model_repository} is not a directory", file=sys.stderr)
        return 2
    for path in install(args.unit_dir, args.model_repository, args.python, extra):
        print(f"wrote {path}")
    return 0


def status_url(environ: Mapping[str, str]) -> str:
    """Where `pbd serve` listens when started with the same PBD_* environment."""
    address = environ.get(ENV_PREFIX + "GRPC_ADDRESS") or "127.0.0.1"
    if address.startswith("unix:"):
        return address
    if address in ("0.0.0.0", "::", "[::]"):  # bound to all: reach it on loopback
        address = "127.0.0.1"
    return f"{address}:{environ.get(ENV_PREFIX + 'GRPC_PORT') or 8001}"


def _status(url: str) -> int:
    import grpc

    from pbd.grpc.client import repository_index

    try:
        entries = repository_index(url)
    except grpc.RpcError as exc:
        print(f"pbd status: {url}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    width = max([len(e.name) for e in entries] + [5])
    print(f"{'MODEL':{width}}  VERSION  STATE        DETAIL")
    for e in entries:
        state = e.state or "NOT LOADED"
        print(f"{e.name:{width}}  {e.version or '-':7}  {state:11}  {one_line(e.reason)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "status":
        return _status(args.url or status_url(os.environ))
    if args.command == "install-units":
        return _install_units(args)
    try:
        notes = apply_triton_arguments(args)
        settings = from_args(args)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"pbd: {exc}", file=sys.stderr)
        return 2
    return _serve(settings, notes, "pbd")


def build_tritonserver_parser(prog: str = "pbd-tritonserver") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [options]",  # as Triton's: the flags are listed below
        description="pbd with tritonserver's command line and Triton's defaults (every address "
        "bound, exit on a model that fails to load): `pbd-tritonserver --model-repository=DIR` "
        "serves as `tritonserver --model-repository=DIR` does. Flags pbd does without are "
        "accepted and logged (docs/triton-compat.md). PBD_* variables apply as to pbd serve.",
    )
    add_arguments(parser)
    add_triton_arguments(parser)
    return parser


def tritonserver_main(argv: list[str] | None = None) -> int:
    """``pbd-tritonserver``: ``tritonserver``'s command line onto ``pbd serve`` (a container
    provides ``tritonserver`` as a link to it; deploy/kserve/README.md)."""
    prog = os.path.basename(sys.argv[0]) or "pbd-tritonserver"
    args = build_tritonserver_parser(prog).parse_args(argv)
    try:
        notes = apply_triton_arguments(args)
        apply_triton_defaults(args, os.environ)
        if args.model_repository is None and ENV_PREFIX + "MODEL_REPOSITORY" not in os.environ:
            raise ValueError("--model-repository must be specified")  # Triton's words
        settings = from_args(args)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    return _serve(settings, notes, prog)


def _serve(settings: Settings, notes: list[Note], prog: str) -> int:
    """Run the daemon: the log set up as the settings say, then the translation's notes."""
    from pbd.daemon import serve
    from pbd.logsettings import log_config, open_log_file
    from pbd_worker.logconfig import apply

    if settings.log_file:
        try:
            open_log_file(settings.log_file)
        except OSError as exc:
            print(f"{prog}: --log-file {settings.log_file}: {exc.strerror}", file=sys.stderr)
            return 2
    apply(log_config(settings))
    log = logging.getLogger("pbd")
    for level, line in notes:
        log.log(level, "%s", line)
    return asyncio.run(serve(settings))
