"""The worker process: connect to the daemon, initialize the model, execute batches.

Threads: the main thread reads the daemon's frames and runs the model, one frame after the
other (a cancellation the daemon sends while ``execute()`` runs is seen at once through its
cancellation page, ``ipc.cancel_flags``; no thread hands frames over, so a request costs no
thread switch); model threads may send responses with the response sender (``streaming``);
a heartbeat thread sends
``Heartbeat`` every interval (and exits the process if the daemon can no longer be reached,
even while the model is busy). EOF on the socket means the daemon is gone: the worker exits,
or, as a systemd unit (``--reconnect-secs``), waits for the restarted daemon and keeps its
model. Given a front socket (``Initialize.front_socket``), it also serves front ends that send
their requests straight to it (``ipc.front_connections``): their results and streamed responses go
back on their own links. Under systemd it also speaks sd_notify: READY=1 once initialize()
returned, STATUS= with its request count, WATCHDOG=1 from the heartbeat thread.
Every frame the worker sends is preceded by the custom-metric updates buffered since the last
one. A metric query (``MetricFamily(...)``, ``Metric.value()``) reads frames until its reply
comes, keeping the others for the main loop.
This module imports neither ``pbd`` nor grpc: a worker starts in the time numpy takes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import resource
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from pbd_wire import PROTOCOL_VERSION, TOKEN_ENV
from pbd_wire import worker_pb2 as wpb
from pbd_wire.cancel_flags import CancelFlags
from pbd_wire.cuda import gpu_inputs
from pbd_wire.shm import SHM_DIR, Arena, SegmentMap
from pbd_worker import forked
from pbd_worker.bls import BlsClient
from pbd_worker.event_loop import WorkerLoop
from pbd_worker.executor import BatchExecutor
from pbd_worker.front_batcher import FrontBatcher, Part
from pbd_worker.ipc.daemon_link import DaemonLink
from pbd_worker.ipc.front_connections import FrontConnection, FrontConnections
from pbd_worker.lifecycle import (
    ask_ready,
    auto_complete,
    declared_outputs,
    decoupled,
    direct_batching_of,
    init_fingerprint,
    instances_of,
    report_init_failure,
    version_name,
)
from pbd_worker.live_requests import LiveRequests
from pbd_worker.loader import ModelLoadError, call_maybe_async, describe_exception, load_model_class
from pbd_worker.logconfig import LogConfig
from pbd_worker.logconfig import apply as apply_logging
from pbd_worker.metrics import MetricsChannel
from pbd_worker.model_api import state
from pbd_worker.notify import Notifier

log = logging.getLogger("pbd_worker")


# initialize() raised: the model is broken, restarting the process would not help. The systemd
# unit lists this in RestartPreventExitStatus=.
EXIT_INIT_FAILED = 3
# The daemon's model or arguments changed while we were disconnected: start over (systemd
# restarts the unit; a fresh process initializes the new model).
EXIT_STALE = 75
# The model ran out of memory (a MemoryError under the instance's memory limit); restartable.
EXIT_OUT_OF_MEMORY = 71
# Reconnecting to the daemon: the first wait, and the longest. Each connection the daemon did
# not take (refused, or it was not expecting this instance yet) doubles the wait, with jitter
# (+-50%) so that the workers of many instances do not call in step; a conversation the daemon
# took (an Initialize) starts over at the first.
RECONNECT_FIRST_S = 0.05
RECONNECT_LONGEST_S = 1.0


class WorkerRuntime:
    def __init__(self, address: str, instance: str, reconnect_s: float = 0.0) -> None:
        self.address = address
        self.instance = instance
        self.reconnect_s = reconnect_s
        self.link = DaemonLink(address, lambda: self.metrics.take())
        self.send = self.link.send
        self._stop = threading.Event()
        self.executed = 0  # batches
        self.requests = 0
        self.aio = WorkerLoop(self.link)  # the model's coroutines run here (event_loop)
        self.loop = self.aio.loop
        self.model: Any = None
        self.fingerprint = ""
        self.warmed_up = False  # a daemon ran the model_warmup samples here (WarmedUp)
        # The longest an execute() may run (Initialize.execute_timeout_ms); 0: no limit.
        self.execute_timeout_s = 0.0
        self.executor: BatchExecutor | None = None
        self.inputs = SegmentMap()
        self.outputs: Arena | None = None
        self.notify = Notifier()
        self.log_config = LogConfig()
        self.exit_code: int | None = None  # set when the conversation decided the exit
        self.finalizing = False  # finalize() started: a SIGTERM now must not run it again
        # The daemon on the other end took this worker (answered its Initialize): only then
        # may the heartbeat thread send. A heartbeat between a reconnect and the Initialized
        # reply would reach the new daemon ahead of Hello or of Initialized, which it refuses.
        self.attached = threading.Event()
        self._reconnect_wait = RECONNECT_FIRST_S
        self.metrics = MetricsChannel(self.link.send, self.link.ask)
        state.metrics_channel = self.metrics
        self.bls = BlsClient(self.link, SHM_DIR, self.aio.reply, self.loop)
        state.bls_executor, state.model_control = self.bls.exec, self.bls.control
        state.bls_async_executor = self.bls.exec_async
        forked.install(self.link)  # processes the model forks call through this one
        # Front ends of the direct path; none until an Initialize names a front socket.
        self.fronts = FrontConnections(self.link.send, lambda: self.executor, lambda: self.live)
        self.aio.fronts = self.fronts
        # Streamed responses go where their request came from: the daemon or a front link.
        self.live = LiveRequests(self.fronts.route, decoupled=False)
        state.response_sender_factory = self.live.sender_for
        # A model with dynamic batching batches its front ends' requests here (front_batcher).
        self.batcher: FrontBatcher | None = None

    def _heartbeat(self, interval_s: float) -> None:
        """Every ``interval_s`` (the watchdog's interval, if shorter): WATCHDOG=1 and a
        Heartbeat. With an execute() time limit, the thread also looks at least twice per
        limit for an execute() running, and waits for that one's deadline: one that runs past
        it is told at once, in a Heartbeat of its own (``overdue_ms``), and the daemon stops
        this worker, whoever sent the batch (a front end's requests never pass the daemon)."""
        watchdog = self.notify.watchdog_interval_s
        period = min(interval_s, watchdog) if watchdog else interval_s
        due = time.monotonic() + period
        told = 0.0  # when the execute() last said to be overdue began
        while True:
            now = time.monotonic()
            wait = due - now
            limit = self.execute_timeout_s
            if limit:  # looks at least twice per limit, then waits for the running one's end
                wait = min(wait, limit / 2)
                began = self._executing_since()
                if began and began != told:
                    wait = min(wait, began + limit - now)
            if self._stop.wait(max(wait, 0.0)):
                return
            now = time.monotonic()
            began = self._executing_since()
            if began and began != told and now - began >= self.execute_timeout_s:
                told = began
                log.error(
                    "execute() has run %.1fs, past its limit of %gs; telling the daemon",
                    now - began, self.execute_timeout_s,
                )  # fmt: skip
                self._beat(int((now - began) * 1000))
            if now >= due:
                due = now + period
                self.notify.watchdog()
                self._beat()

    def _executing_since(self) -> float:
        """When the execute() running now began (monotonic); 0.0: none, or no limit."""
        executor = self.executor
        if not self.execute_timeout_s or executor is None:
            return 0.0
        return executor.execute_began

    def _beat(self, overdue_ms: int = 0) -> None:
        if not self.attached.is_set():
            return  # reconnecting: the daemon hears from us once it took us
        beat = wpb.Heartbeat(executed=self.executed, overdue_ms=overdue_ms)
        try:
            self.send(wpb.WorkerToDaemon(heartbeat=beat))
        except OSError:
            if not self.reconnect_s:
                log.error("daemon unreachable; exiting")
                os._exit(1)
            # Reconnecting: the main thread sees the broken connection and handles it.

    # -- conversation --------------------------------------------------------------------------

    def serve(self) -> int:
        """Talk to the daemon until told to finalize; with ``reconnect_s``, outlive the daemon:
        reconnect (and keep the model) when it comes back within that many seconds."""
        while True:
            self.converse()
            if self.exit_code is not None:
                return self.exit_code
            if not self.reconnect_s:
                log.info("daemon closed the connection; exiting")
                return 0
            self._forget_daemon()
            if not self._reconnect():
                # Exit 0: the daemon is gone for good, nothing for systemd to restart.
                log.warning("daemon did not come back in %gs; exiting", self.reconnect_s)
                self.finalize_alone("the daemon did not come back")
                return 0

    def converse(self) -> None:
        """One connection: Hello, then frames until EOF or finalize."""
        try:
            self.send(
                wpb.WorkerToDaemon(
                    hello=wpb.Hello(
                        instance=self.instance,
                        token=os.environ.get(TOKEN_ENV, ""),
                        pid=os.getpid(),
                        protocol=PROTOCOL_VERSION,
                        initialized=self.model is not None,
                    )
                )
            )
            while self.exit_code is None:
                arrival = self.aio.next()
                if arrival is None:
                    return
                self.handle(arrival[1], arrival[0])
        except (OSError, ValueError):
            return  # the connection broke (or was closed under us): same as EOF
        except Exception:  # a malformed frame: the connection cannot be trusted any more
            log.exception("reading from the daemon failed; dropping the connection")
            return
        finally:
            self.attached.clear()
            self.link.disconnect()

    def handle(self, message: wpb.DaemonToWorker, front: FrontConnection | None = None) -> None:
        """Run one frame of the daemon, or of ``front`` (only execute, release and cancel
        come from a front link; their ids are checked, the result goes back on it)."""
        kind = message.WhichOneof("kind")
        if kind == "execute":
            assert self.executor is not None
            execute = message.execute
            if front is not None and front.closed:
                return  # its link closed meanwhile: nobody to answer
            if front is not None and self.batcher is not None:
                parts = self.batcher.gather(front, message)
                if len(parts) != 1:
                    if parts:
                        self._execute_parts(parts)
                    return
                front, message = parts[0]  # a higher priority may have come first
                execute = message.execute
            if execute.release:
                released = execute.release[:]
                self.executor.release(released if front is None else front.take_owned(released))
            frame = wpb.WorkerToDaemon()
            executor = self.executor
            self._run_batch(execute.requests, lambda: executor.run(execute, frame.result))
            if front is None:
                self.send(frame)
            else:
                self.fronts.send_result(front, frame)
                # What rides ahead of the daemon's next frame (metric updates, BLS releases)
                # must not wait for a heartbeat: sent now, if there is any.
                self.link.send()
            self._after_batch()
        elif kind == "cancel":
            self.live.cancel(list(message.cancel.request_ids))
        elif kind == "release":
            assert self.executor is not None
            released = list(message.release.batch_ids)
            self.executor.release(released if front is None else front.take_owned(released))
        elif front is not None:
            return  # nothing else comes from a front link (FrontConnection.problem)
        elif kind == "settings":
            self._apply_settings(message.settings)
        elif kind == "warmed_up":
            self.warmed_up = True
        elif kind == "cuda_closed" and self.executor is not None:
            self.executor.forget_cuda_regions(list(message.cuda_closed.generations))
        elif kind == "initialize":
            init = message.initialize
            reply = self._initialize(init)
            if not reply.HasField("error"):  # listening before the daemon hears we are ready
                self.fronts.listen(init.front_socket, init.front_token)
            self.send(wpb.WorkerToDaemon(initialized=reply))
            if reply.HasField("error"):
                self.exit_code = EXIT_STALE if self.model is not None else EXIT_INIT_FAILED
                if self.model is None and self.reconnect_s:  # in a systemd unit
                    report_init_failure(self.notify, reply.error)
            else:
                self._reconnect_wait = RECONNECT_FIRST_S
                self.attached.set()
                self.notify.ready(self._status())
        elif kind == "finalize":
            self.notify.stopping("finalizing")
            self.send(wpb.WorkerToDaemon(finalized=self._finalize()))
            self.exit_code = 0
        elif kind == "ready_query":
            ready = ask_ready(self.model, self.loop, message.ready_query)
            self.send(wpb.WorkerToDaemon(ready_reply=ready))
        elif kind == "auto_complete":
            # A worker started only for this: answer, then exit.
            completed = auto_complete(message.auto_complete)
            self.send(wpb.WorkerToDaemon(auto_completed=completed))
            self.exit_code = 0

    def _execute_parts(self, parts: list[Part]) -> None:
        """Run a batch the worker formed from its front links' Executes (``front_batcher``);
        each part's result goes back on its own link, a link's results in one write."""
        executor = self.executor
        assert executor is not None
        executes = []
        requests: list[wpb.Request] = []
        for link, message in parts:
            execute = message.execute
            if execute.release:
                executor.release(link.take_owned(execute.release[:]))
            executes.append(execute)
            requests.extend(execute.requests)
        frames = [wpb.WorkerToDaemon() for _ in parts]
        self._run_batch(
            requests, lambda: executor.run_parts(executes, [f.result for f in frames])
        )
        by_link: dict[int, tuple[FrontConnection, list[wpb.WorkerToDaemon]]] = {}
        for (link, _), frame in zip(parts, frames, strict=True):
            by_link.setdefault(id(link), (link, []))[1].append(frame)
        for link, results in by_link.values():
            self.fronts.send_results(link, results)
        self.link.send()
        self._after_batch()

    def _refuse(self, link: FrontConnection, message: wpb.DaemonToWorker, why: str) -> None:
        """Answer an Execute its queue refused (``front_batcher``): it never runs."""
        execute = message.execute
        if execute.release and self.executor is not None:
            self.executor.release(link.take_owned(execute.release[:]))
        frame = wpb.WorkerToDaemon()
        result = frame.result
        result.batch_id = execute.batch_id
        for request in execute.requests:
            refused = result.responses.add(request_id=request.request_id, rejected=True)
            refused.error.code, refused.error.message = "UNAVAILABLE", why
        self.fronts.send_result(link, frame)

    def _run_batch(self, requests: Sequence[wpb.Request], run: Callable[[], object]) -> None:
        """``run`` the batch of ``requests`` through the model: its BLS calls know their
        batch; running out of memory or ``sys.exit`` ends the process."""
        self.bls.begin_batch(requests)
        try:
            run()
        except MemoryError as exc:
            self._exit(EXIT_OUT_OF_MEMORY, f"the model ran out of memory{_limit_text()}: {exc!r}")
        except SystemExit as exc:
            self._exit(_exit_code(exc), f"the model called sys.exit({exc.code!r}) in execute()")
        finally:
            self.bls.end_batch()
        self.executed += 1
        self.requests += len(requests)

    def _after_batch(self) -> None:
        """Once a batch's results went out: its spans, the unit's status."""
        assert self.executor is not None
        tracing = self.executor.tracing
        if tracing is not None and tracing.pending():
            # Encoded after the result went out (the daemon answers the client meanwhile);
            # sent with the next result or heartbeat, not as a write of their own.
            self.link.defer(wpb.WorkerToDaemon(spans=wpb.SpanBatch(otlp=tracing.take_encoded())))
        if self.notify.enabled:
            self.notify.status(self._status())

    def _exit(self, code: int, why: str) -> NoReturn:
        """Tell the daemon why, then end the process (its state is not to be trusted)."""
        log.error("exiting: %s", why)
        with contextlib.suppress(OSError):
            self.send(wpb.WorkerToDaemon(exiting=wpb.Exiting(error=wpb.Error(message=why))))
        with contextlib.suppress(Exception):
            self.close()
        os._exit(code)

    def _apply_settings(self, settings: wpb.RuntimeSettings) -> None:
        self.log_config = LogConfig(
            info=settings.log_info,
            warning=settings.log_warning,
            error=settings.log_error,
            verbose=settings.log_verbose,
            format=settings.log_format or "default",
        )
        apply_logging(self.log_config, self.instance)

    def _status(self) -> str:
        return f"serving {self.instance}: {self.requests} requests in {self.executed} batches"

    def _forget_daemon(self) -> None:
        """The daemon is gone: what it held (our outputs, its input segments) is void."""
        self.notify.status(f"{self.instance}: waiting for the daemon to come back")
        self.fronts.close()  # the front ends follow the daemon that let them in
        if self.executor is not None:
            self.executor.release(self.executor.held_batches())
        self.live.forget_all()
        self.inputs.close()
        self.bls.forget()
        self.link.forget_backlog()

    def _reconnect(self) -> bool:
        """Connect again within ``reconnect_s``, waiting longer after each connection the
        daemon did not take (see RECONNECT_FIRST_S): a worker the daemon refuses, or does not
        expect yet, calls about once a second, never in a tight loop."""
        deadline = time.monotonic() + self.reconnect_s
        while True:
            time.sleep(min(self._next_wait(), max(deadline - time.monotonic(), 0.0)))
            if time.monotonic() >= deadline:
                return False
            try:
                self.link.connect()
                return True
            except OSError:
                continue

    def _next_wait(self) -> float:
        wait = self._reconnect_wait * random.uniform(0.5, 1.5)
        self._reconnect_wait = min(self._reconnect_wait * 2, RECONNECT_LONGEST_S)
        return wait

    # -- initialize / adopt / finalize -----------------------------------------------------------

    def _initialize(self, init: wpb.Initialize) -> wpb.Initialized:
        if self.model is not None:
            return self._adopt(init)
        args = dict(init.args)
        state.set_model_dir(init.model_dir)
        shm_dir = init.shm_dir or SHM_DIR
        self.inputs = SegmentMap(shm_dir)
        try:
            on_gpu = gpu_inputs(args)
        except ValueError as exc:
            return wpb.Initialized(error=wpb.Error(code="INVALID_ARG", message=str(exc)))
        try:
            cls = load_model_class(init.model_path, init.model_dir, init.version, init.backend_dir)
            model = cls()
            if hasattr(model, "initialize"):
                call_maybe_async(self.loop, model.initialize, args)
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
        self.model = model
        self.live.decoupled = decoupled(args)
        policy = direct_batching_of(args)
        if policy is not None:
            self.batcher = FrontBatcher(
                policy,
                self.fronts,
                self.handle,
                self._refuse,
                name=version_name(args),
                instances=instances_of(args),
            )
        self._attach_cancel_flags(init)
        self.fingerprint = init_fingerprint(init)
        self.outputs = self._output_arena(init)
        self.executor = BatchExecutor(
            self.model,
            instance_name=args.get("model_instance_name", self.instance),
            model_name=args.get("model_name", ""),
            model_version=int(args.get("model_version", "1") or 1),
            inputs=self.inputs,
            outputs=self.outputs,
            aio=self.aio,
            live=self.live,
            gpu_inputs=on_gpu,
            cuda=self.bls.cuda,
            declared_outputs=declared_outputs(args),
        )
        self.bls.bind(self.inputs, self.outputs)
        # The model and its imports live as long as the process: out of the collector's way.
        gc.collect()
        gc.freeze()
        self.execute_timeout_s = init.execute_timeout_ms / 1000.0
        interval = max(init.heartbeat_interval_ms, 10) / 1000.0
        threading.Thread(
            target=self._heartbeat, args=(interval,), name="heartbeat", daemon=True
        ).start()
        return wpb.Initialized()

    def _adopt(self, init: wpb.Initialize) -> wpb.Initialized:
        """A new daemon after a restart: keep the model if it is the same one, with new
        shared-memory segments (the old daemon's are gone)."""
        if init_fingerprint(init) != self.fingerprint:
            log.warning("the daemon now has another model or arguments; restarting")
            return wpb.Initialized(
                error=wpb.Error(
                    code="UNAVAILABLE",
                    message=f"{self.instance} holds an older configuration; it restarts",
                )
            )
        assert self.executor is not None
        if self.outputs is not None:
            self.outputs.close()
        self.inputs.close()
        self.inputs = SegmentMap(init.shm_dir or SHM_DIR)
        self.outputs = self._output_arena(init)
        self.executor.rebind(self.inputs, self.outputs)
        self.execute_timeout_s = init.execute_timeout_ms / 1000.0  # the new daemon's
        self._attach_cancel_flags(init)
        self.bls.cuda.close()  # the old daemon's pools and its clients' registrations
        self.bls.bind(self.inputs, self.outputs)
        log.info("re-attached to a new daemon without re-initializing the model")
        return wpb.Initialized(adopted=True, warmed_up=self.warmed_up)

    def _attach_cancel_flags(self, init: wpb.Initialize) -> None:
        if self.live.flags is not None:
            self.live.flags.close()
        self.live.flags = CancelFlags.attach(init.cancel_region) if init.cancel_region else None

    @staticmethod
    def _output_arena(init: wpb.Initialize) -> Arena:
        return Arena(init.output_region_prefix, init.output_region_bytes, init.output_region_bytes)

    def _finalize(self) -> wpb.Finalized:
        self._stop.set()
        error = None
        self.finalizing = True
        if self.model is not None and hasattr(self.model, "finalize"):
            try:
                call_maybe_async(self.loop, self.model.finalize)
            except Exception as exc:  # noqa: BLE001 - report, then exit anyway
                text, tb = describe_exception(exc)
                error = wpb.Error(
                    code="INTERNAL", message=f"finalize() failed: {text}", traceback=tb
                )
        self.model = None
        self.close()
        return wpb.Finalized(error=error) if error is not None else wpb.Finalized()

    def finalize_alone(self, reason: str) -> None:
        """finalize() the model without a daemon asking: SIGTERM from systemd (``systemctl
        stop``), or the daemon did not come back."""
        self.notify.stopping(reason)
        self._finalize()

    def close(self) -> None:
        self.fronts.close()
        self.bls.cuda.close()
        self.inputs.close()
        self.bls.callee_segments.close()
        if self.outputs is not None:
            self.outputs.close()
            self.outputs = None
        self.live.forget_all()
        self.notify.close()


def _limit_text() -> str:
    soft, _hard = resource.getrlimit(resource.RLIMIT_DATA)
    return "" if soft == resource.RLIM_INFINITY else f" (memory limit {soft} bytes)"


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1
