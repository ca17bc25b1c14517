"""systemd's manager over the system D-Bus (dbus-fast, asyncio): calls, properties, and the
signals that tell when a job finished or a unit changed, so nothing here polls.

Job results come from ``JobRemoved`` (one signal per job, with "done", "failed", "canceled",
"timeout", "dependency", "skipped"); unit changes from ``PropertiesChanged`` on the unit's
object. Both need ``Subscribe()``, which this connection makes once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus

from pbd.errors import Code, PbdError

log = logging.getLogger("pbd.systemd")

SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT = "org.freedesktop.systemd1.Unit"
SERVICE = "org.freedesktop.systemd1.Service"
PROPERTIES = "org.freedesktop.DBus.Properties"
# Remember this many finished jobs: JobRemoved may arrive before the caller waits for it.
_FINISHED_JOBS = 256


class BusError(PbdError):
    def __init__(self, name: str, text: str) -> None:
        super().__init__(Code.UNAVAILABLE, f"systemd: {text} ({name})")
        self.name = name


class SystemdBus:
    def __init__(self) -> None:
        self.bus: MessageBus | None = None
        self._jobs: dict[str, asyncio.Future[str]] = {}
        self._finished: OrderedDict[str, str] = OrderedDict()
        self._changed: dict[str, asyncio.Event] = {}

    async def connect(self) -> None:
        try:
            self.bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
        except Exception as exc:  # noqa: BLE001 - any failure here means no systemd for us
            raise PbdError(
                Code.UNAVAILABLE, f"cannot reach systemd on the system bus: {exc}"
            ) from None
        self.bus.add_message_handler(self._on_message)
        for rule in (
            f"type='signal',sender='{SYSTEMD}',interface='{MANAGER}',member='JobRemoved'",
            f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',"
            f"member='PropertiesChanged',path_namespace='{MANAGER_PATH}/unit'",
        ):
            await self._call(
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "AddMatch",
                "s",
                [rule],
            )
        await self.manager("Subscribe")

    def close(self) -> None:
        if self.bus is not None:
            self.bus.disconnect()
            self.bus = None
        for future in self._jobs.values():
            if not future.done():
                future.cancel()

    # -- calls -----------------------------------------------------------------------------------

    async def _call(
        self,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: list[Any] | None = None,
    ) -> list[Any]:
        if self.bus is None:
            raise PbdError(Code.UNAVAILABLE, "systemd: not connected to the system bus")
        reply = await self.bus.call(
            Message(
                destination=destination,
                path=path,
                interface=interface,
                member=member,
                signature=signature,
                body=body or [],
            )
        )
        assert reply is not None
        if reply.message_type == MessageType.ERROR:
            text = reply.body[0] if reply.body else reply.error_name
            raise BusError(reply.error_name or "error", str(text))
        return list(reply.body)

    async def manager(self, member: str, signature: str = "", *args: Any) -> list[Any]:
        return await self._call(SYSTEMD, MANAGER_PATH, MANAGER, member, signature, list(args))

    async def get(self, path: str, interface: str, name: str) -> Any:
        (variant,) = await self._call(SYSTEMD, path, PROPERTIES, "Get", "ss", [interface, name])
        return variant.value

    async def get_all(self, path: str, interface: str) -> dict[str, Any]:
        (props,) = await self._call(SYSTEMD, path, PROPERTIES, "GetAll", "s", [interface])
        return {k: v.value for k, v in props.items()}

    async def load_unit(self, name: str) -> str:
        (path,) = await self.manager("LoadUnit", "s", name)
        return str(path)

    # -- jobs and changes ------------------------------------------------------------------------

    async def run_job(self, member: str, unit: str, timeout: float) -> str:
        """StartUnit/StopUnit/RestartUnit ``unit`` ("replace" mode) and wait for the job's
        result; "timeout" when it did not finish in ``timeout`` seconds."""
        (job,) = await self.manager(member, "ss", unit, "replace")
        return await self.job_result(str(job), timeout)

    async def job_result(self, job: str, timeout: float) -> str:
        if job in self._finished:
            return self._finished.pop(job)
        future = self._jobs.setdefault(job, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return "timeout"
        finally:
            if future.done():
                self._jobs.pop(job, None)

    def changes(self, path: str) -> asyncio.Event:
        """An event set at the next PropertiesChanged of ``path``. Take it *before* reading
        the properties, then wait on it: a change in between is not missed."""
        return self._changed.setdefault(path, asyncio.Event())

    def _on_message(self, msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "JobRemoved" and msg.interface == MANAGER:
            _id, job, _unit, result = msg.body
            future = self._jobs.get(job)
            if future is not None and not future.done():
                future.set_result(result)
            else:
                self._finished[job] = result
                while len(self._finished) > _FINISHED_JOBS:
                    self._finished.popitem(last=False)
        elif msg.member == "PropertiesChanged" and msg.path:
            event = self._changed.pop(msg.path, None)
            if event is not None:
                event.set()
