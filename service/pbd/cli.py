"""``pbd``: the command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pbd import __version__
from pbd.settings import add_arguments, from_args


def _configure_logging(verbose: int) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = from_args(args)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        print(f"pbd: {exc}", file=sys.stderr)
        return 2
    _configure_logging(settings.log_verbose)
    if args.command == "serve":
        from pbd.daemon import serve

        return asyncio.run(serve(settings))
    return 2
