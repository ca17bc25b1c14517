"""``pbd``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pbd import __version__
from pbd.settings import ENV_PREFIX, add_arguments, from_args
from pbd.status_line import one_line


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
        settings = from_args(args)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"pbd: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        from pbd.daemon import serve
        from pbd.logsettings import log_config
        from pbd_worker.logconfig import apply

        apply(log_config(settings))

        return asyncio.run(serve(settings))
    return 2
