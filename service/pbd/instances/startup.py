"""Bringing an instance's worker up: wait for it to connect (or for it to exit first), then
Initialize it and read the reply (metric families the model makes in initialize() come
first). The parameter is the instance being started (``Instance.start`` drives this)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from pbd.errors import Code, PbdError, unavailable
from pbd.instances.launcher import InstanceLauncher, WorkerHandle
from pbd.instances.worker_link import WorkerLink
from pbd.settings import Settings
from pbd_wire import worker_pb2 as wpb


class StartingInstance(Protocol):
    """What bringing a worker up uses of its instance (``pbd.instances.instance.Instance``,
    which imports this module)."""

    @property
    def conn(self) -> WorkerLink | None: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def launcher(self) -> InstanceLauncher: ...
    @property
    def handle(self) -> WorkerHandle | None: ...
    def describe(self) -> str: ...
    def push_runtime_settings(self) -> None: ...
    def on_metrics(self, updates: wpb.MetricUpdates) -> None: ...
    async def exit_text(self) -> str: ...


async def initialize_worker(instance: StartingInstance, init: wpb.Initialize) -> wpb.Initialized:
    """Send ``init``; the reply (model metric families it makes come first)."""
    assert instance.conn is not None
    instance.push_runtime_settings()
    instance.conn.send(wpb.DaemonToWorker(initialize=init))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + instance.settings.model_init_timeout_secs
    while True:
        reply = await _wait_message(
            instance,
            max(deadline - loop.time(), 0.0),
            "initialize()",
            instance.settings.model_init_timeout_secs,
        )
        if reply.WhichOneof("kind") != "metrics":
            break
        instance.on_metrics(reply.metrics)
    if reply.WhichOneof("kind") != "initialized":
        raise PbdError(Code.INTERNAL, f"{instance.describe()}: unexpected first reply")
    return reply.initialized


async def wait_connected(
    instance: StartingInstance, connected: asyncio.Future[WorkerLink]
) -> WorkerLink:
    assert instance.handle is not None
    return await connected_or_exited(
        instance.launcher,
        instance.handle,
        connected,
        instance.settings.worker_start_timeout_secs,
        f"worker for {instance.describe()}",
    )


async def connected_or_exited(
    launcher: InstanceLauncher,
    handle: WorkerHandle,
    connected: asyncio.Future[WorkerLink],
    timeout: float,
    what: str,
) -> WorkerLink:
    """The link of the worker ``handle`` started, once it said hello; UNAVAILABLE naming
    how it ended if it exited (or ``timeout`` passed) first (``permanent`` when retrying
    would not help). Used for instances and for the auto-complete worker alike."""
    exited = asyncio.ensure_future(launcher.wait(handle, timeout))
    racing: set[asyncio.Future[Any]] = {connected, exited}
    done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
    if connected in done:
        exited.cancel()
        link = connected.result()
        launcher.attached(handle, link.pid)
        return link
    connected.cancel()
    status = exited.result()
    how = status.describe() if status else "did not connect in time"
    error = unavailable(f"{what} {how} before connecting")
    error.permanent = status is not None and status.permanent
    raise error


async def _wait_message(
    instance: StartingInstance, timeout: float, what: str, limit: float | None = None
) -> wpb.WorkerToDaemon:
    assert instance.conn is not None
    try:
        message = await asyncio.wait_for(instance.conn.recv(), timeout)
    except TimeoutError:
        limit = timeout if limit is None else limit
        raise unavailable(f"{instance.describe()}: {what} did not finish in {limit:g}s") from None
    if message is None:
        raise unavailable(
            f"worker for {instance.describe()} {await instance.exit_text()} during {what}"
        )
    return message
