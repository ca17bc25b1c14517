"""The worker process: connect to the daemon, initialize the model, execute batches.

Threads: the main thread reads frames and runs the model; a heartbeat thread sends
``Heartbeat`` every interval (and exits the process if the daemon can no longer be reached,
even while the model is busy). EOF on the socket means the daemon is gone: the worker exits.
This module imports neither ``pbd`` nor grpc: a worker starts in the time numpy takes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import signal
import socket
import sys
import threading
from typing import Any, NoReturn

from pbd_worker._proto import worker_pb2 as wpb
from pbd_worker.executor import BatchExecutor
from pbd_worker.ipc import PROTOCOL_VERSION, TOKEN_ENV
from pbd_worker.ipc.framing import SocketFrameReader, encode_frame, socket_address
from pbd_worker.ipc.shm import SHM_DIR, Arena, SegmentMap
from pbd_worker.loader import ModelLoadError, call_maybe_async, describe_exception, load_model_class
from pbd_worker.model_api import state

log = logging.getLogger("pbd_worker")
EXIT_OUT_OF_MEMORY = 3


class WorkerRuntime:
    def __init__(self, sock: socket.socket, instance: str) -> None:
        self.sock = sock
        self.instance = instance
        self.reader = SocketFrameReader(sock)
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self.executed = 0
        self.loop = asyncio.new_event_loop()
        self.model: Any = None
        self.executor: BatchExecutor | None = None
        self.inputs = SegmentMap()
        self.outputs: Arena | None = None

    def send(self, message: wpb.WorkerToDaemon) -> None:
        frame = encode_frame(message.SerializeToString())
        with self._send_lock:
            self.sock.sendall(frame)

    def _heartbeat(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.send(wpb.WorkerToDaemon(heartbeat=wpb.Heartbeat(executed=self.executed)))
            except OSError:
                log.error("daemon unreachable; exiting")
                os._exit(1)

    def serve(self) -> int:
        self.send(
            wpb.WorkerToDaemon(
                hello=wpb.Hello(
                    instance=self.instance,
                    token=os.environ.get(TOKEN_ENV, ""),
                    pid=os.getpid(),
                    protocol=PROTOCOL_VERSION,
                )
            )
        )
        while True:
            frame = self.reader.read()
            if frame is None:
                log.info("daemon closed the connection; exiting")
                return 0
            message = wpb.DaemonToWorker.FromString(frame)
            kind = message.WhichOneof("kind")
            if kind == "execute":
                assert self.executor is not None
                self.executor.release(list(message.execute.release))
                try:
                    result = self.executor.run(message.execute)
                except MemoryError as exc:
                    self._exit(
                        EXIT_OUT_OF_MEMORY, f"the model ran out of memory{_limit_text()}: {exc!r}"
                    )
                except SystemExit as exc:
                    self._exit(
                        _exit_code(exc), f"the model called sys.exit({exc.code!r}) in execute()"
                    )
                self.executed += 1
                self.send(wpb.WorkerToDaemon(result=result))
            elif kind == "release":
                assert self.executor is not None
                self.executor.release(list(message.release.batch_ids))
            elif kind == "initialize":
                self.send(wpb.WorkerToDaemon(initialized=self._initialize(message.initialize)))
            elif kind == "finalize":
                self.send(wpb.WorkerToDaemon(finalized=self._finalize()))
                return 0

    def _exit(self, code: int, why: str) -> NoReturn:
        """Tell the daemon why, then end the process (its state is not to be trusted)."""
        log.error("exiting: %s", why)
        with contextlib.suppress(OSError):
            self.send(wpb.WorkerToDaemon(exiting=wpb.Exiting(error=wpb.Error(message=why))))
        with contextlib.suppress(Exception):
            self.close()
        os._exit(code)

    def _initialize(self, init: wpb.Initialize) -> wpb.Initialized:
        configure_logging(self.instance, init.log_verbose)
        args = dict(init.args)
        state.set_model_dir(init.model_dir)
        shm_dir = init.shm_dir or SHM_DIR
        self.inputs = SegmentMap(shm_dir)
        try:
            cls = load_model_class(init.model_path, init.model_dir, init.version)
            self.model = cls()
            if hasattr(self.model, "initialize"):
                call_maybe_async(self.loop, self.model.initialize, args)
        except ModelLoadError as exc:
            return wpb.Initialized(
                error=wpb.Error(code="INVALID_ARG", message=exc.message, traceback=exc.traceback)
            )
        except Exception as exc:  # noqa: BLE001 - initialize() may raise anything
            text, tb = describe_exception(exc)
            return wpb.Initialized(
                error=wpb.Error(
                    code="INTERNAL", message=f"initialize() failed: {text}", traceback=tb
                )
            )
        self.outputs = Arena(
            init.output_region_prefix,
            init.output_region_bytes,
            init.output_region_bytes,
            shm_dir=shm_dir,
        )
        self.executor = BatchExecutor(
            self.model,
            instance_name=args.get("model_instance_name", self.instance),
            model_name=args.get("model_name", ""),
            model_version=int(args.get("model_version", "1") or 1),
            inputs=self.inputs,
            outputs=self.outputs,
            loop=self.loop,
        )
        interval = max(init.heartbeat_interval_ms, 10) / 1000.0
        threading.Thread(
            target=self._heartbeat, args=(interval,), name="heartbeat", daemon=True
        ).start()
        return wpb.Initialized()

    def _finalize(self) -> wpb.Finalized:
        self._stop.set()
        error = None
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                call_maybe_async(self.loop, self.model.finalize)
            except Exception as exc:  # noqa: BLE001 - report, then exit anyway
                text, tb = describe_exception(exc)
                error = wpb.Error(
                    code="INTERNAL", message=f"finalize() failed: {text}", traceback=tb
                )
        self.close()
        return wpb.Finalized(error=error) if error is not None else wpb.Finalized()

    def close(self) -> None:
        self.inputs.close()
        if self.outputs is not None:
            self.outputs.close()


def _limit_text() -> str:
    soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    return "" if soft == resource.RLIM_INFINITY else f" (memory limit {soft} bytes)"


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


def configure_logging(instance: str, verbose: int) -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(levelname)s [{instance}] %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pbd_worker", description="pbd model-instance worker")
    parser.add_argument("--socket", required=True, help="daemon socket: a path or @abstract-name")
    parser.add_argument("--instance", required=True, help="instance id given by the daemon")
    opts = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group; the daemon owns shutdown.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(opts.instance, 0)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(socket_address(opts.socket))
    except OSError as exc:
        log.error("cannot connect to the daemon at %s: %s", opts.socket, exc)
        return 2
    runtime = WorkerRuntime(sock, opts.instance)
    try:
        return runtime.serve()
    except (BrokenPipeError, ConnectionResetError):
        log.info("daemon connection lost; exiting")
        return 0
    finally:
        runtime.close()
        sock.close()
