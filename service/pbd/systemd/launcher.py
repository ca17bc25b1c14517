"""Model instances as ``pbd-worker@<instance>.service`` units (``pbd serve --launcher systemd``).

For each instance the daemon writes the unit's EnvironmentFile (interpreter, socket, instance
id and a token that stays the same for the unit's life, so a worker systemd restarted on its
own, or one that outlived a daemon restart, can still prove who it is) and a drop-in that puts
it in its model's slice; then it starts the unit over D-Bus and the start job finishes when
the worker sent READY=1, i.e. after initialize(). Crashes are restarted by systemd
(``Restart=on-failure``); the daemon re-attaches to the new process. How a unit ended
(exit status, signal, watchdog, start limit) comes from the unit's properties.

A running unit whose EnvironmentFile is gone (pbd.service failed, and systemd removed
/run/pbd with the tokens) keeps its model: systemd names its main process, the worker hub
takes that process whatever token it presents (``vouched_pid``), and the token it presented
is written back to its EnvironmentFile (``attached``) for the daemons after this one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from pbd.errors import PbdError
from pbd.settings import Settings
from pbd.systemd import units
from pbd.systemd.bus import SERVICE, UNIT, SystemdBus
from pbd.worker.launcher import WorkerHandle, WorkerSpec
from pbd_wire import SCHEDULING_ENV, TOKEN_ENV

log = logging.getLogger("pbd.systemd")

# systemd's ExecMainCode: how the main process ended (siginfo si_code).
_CLD_EXITED, _CLD_KILLED, _CLD_DUMPED = 1, 2, 3
# Results that mean "systemd will not restart this unit on its own".
_FINAL_SUBSTATES = {"failed", "dead", "exited"}
# A unit that has not stopped this long after its stop job began (SIGTERM: the worker
# finalizes and exits) is SIGKILLed; the unit's own TimeoutStopSec (1 min) is not waited for.
STOP_KILL_AFTER_S = 5.0
# After the SIGKILL: systemd only has to reap it.
STOP_REAP_S = 5.0


@dataclass
class UnitHandle:
    unit: str
    path: str
    instance_id: str
    started_pid: int = 0  # our worker's process (0: not known yet)
    token_lost: bool = False  # running, but its token went with its EnvironmentFile
    start_job: asyncio.Future[str] | None = None  # result of our StartUnit job
    pid_before: int = 0  # ExecMainPID before our StartUnit: unchanged = nothing was started

    @property
    def pid(self) -> int | None:
        return self.started_pid or None


@dataclass(frozen=True)
class UnitExit:
    unit: str
    code: int  # ExecMainCode
    status: int  # ExecMainStatus: exit status or signal number
    result: str  # Result: success, exit-code, signal, core-dump, watchdog, start-limit-hit, ...
    restarting: bool  # systemd will start it again (Restart=)
    refused: str = ""  # systemd refused to start it at all (the start limit), and why

    @property
    def permanent(self) -> bool:
        """Starting it again now would be refused too."""
        return bool(self.refused)

    def describe(self) -> str:
        if self.refused:
            return f"was not started by systemd: {self.refused} (unit {self.unit})"
        if self.result == "start-limit-hit":
            how = "hit its start limit; systemd no longer restarts it"
        elif self.result == "watchdog":
            how = "was killed by the systemd watchdog (no WATCHDOG=1 in time)"
        elif self.result == "timeout":
            how = "timed out in systemd"
        elif self.code in (_CLD_KILLED, _CLD_DUMPED):
            try:
                name = signal.Signals(self.status).name
            except ValueError:
                name = f"signal {self.status}"
            how = f"killed by signal {self.status} ({name})"
            if self.code == _CLD_DUMPED:
                how += " and dumped core"
        elif self.code == _CLD_EXITED:
            how = f"exited with status {self.status}"
        else:
            how = f"ended ({self.result})"
        then = "; systemd restarts it" if self.restarting else ""
        return f"{how} (unit {self.unit}{then})"


class SystemdLauncher:
    def __init__(self, settings: Settings, bus: SystemdBus | None = None) -> None:
        self.settings = settings
        self.bus = bus or SystemdBus()
        self.env_dir = Path(settings.systemd_env_dir)
        self.unit_dir = Path(settings.systemd_unit_dir)
        self.detaching = False
        self._tokens: dict[str, str] = {}
        # Instances whose token this daemon made up: no EnvironmentFile had one.
        self._new_tokens: set[str] = set()

    async def connect(self) -> None:
        await self.bus.connect()

    def close(self) -> None:
        self.bus.close()

    def _env_path(self, instance_id: str) -> Path:
        return self.env_dir / f"{units.escape(instance_id)}.env"

    def token(self, instance_id: str) -> str:
        """The instance's token: the one in its EnvironmentFile when a unit already has one
        (a worker from before a daemon restart presents it), else a new one."""
        token = self._tokens.get(instance_id)
        if token is None:
            token = units.read_env_file(self._env_path(instance_id)).get(TOKEN_ENV, "")
            if not token:
                token = secrets.token_hex(16)
                self._new_tokens.add(instance_id)
            self._tokens[instance_id] = token
        return token

    def _write_unit_files(self, spec: WorkerSpec) -> bool:
        """EnvironmentFile and slice drop-in; True when systemd must reload to see the drop-in."""
        env = {
            "PBD_PYTHON": spec.python or self.settings.systemd_python or sys.executable,
            "PBD_WORKER_SOCKET": spec.socket,
            "PBD_INSTANCE": spec.instance_id,
            "PBD_RECONNECT_SECS": f"{self.settings.systemd_reattach_secs:g}",
            SCHEDULING_ENV: self.settings.worker_scheduling,
            **spec.env,
        }
        units.write_private(self._env_path(spec.instance_id), units.env_file_text(env))
        model = spec.instance_id.split("/", 1)[0]
        dropin = self.unit_dir / f"{units.worker_unit(spec.instance_id)}.d" / "50-pbd-slice.conf"
        text = units.instance_dropin_text(model)
        if dropin.is_file() and dropin.read_text() == text:
            return False
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text(text)
        dropin.chmod(0o644)  # unit files are public (systemd warns otherwise); no secret here
        return True

    async def start(self, spec: WorkerSpec) -> UnitHandle:
        unit = units.worker_unit(spec.instance_id)
        changed = self._write_unit_files(spec)
        path = await self.bus.load_unit(unit)
        if changed and await self.bus.get(path, UNIT, "NeedDaemonReload"):
            await self.bus.manager("Reload")
        state = await self.bus.get(path, UNIT, "ActiveState")
        handle = UnitHandle(unit, path, spec.instance_id)
        if spec.instance_id in self._new_tokens and state == "activating":
            # Its EnvironmentFile was gone (pbd.service failed, e.g. on its start limit, and
            # systemd removed /run/pbd) while systemd (re)starts it: a process that read the
            # old file holds a token no daemon knows, and is not initialized yet. Replace it.
            log.warning(
                "%s is starting but its EnvironmentFile (and token) was gone; restarting it", unit
            )
            await self.stop_unit(unit)
            state = await self.bus.get(path, UNIT, "ActiveState")
        handle.token_lost = spec.instance_id in self._new_tokens and state in (
            "active",
            "reloading",
        )
        self._new_tokens.discard(spec.instance_id)
        if state in ("active", "reloading"):
            # Running already: a worker from before a daemon restart. It reconnects by itself;
            # if its token went with its EnvironmentFile, systemd's word that the unit's main
            # process is this instance's worker stands for the token (``vouched_pid``).
            handle.started_pid = int(await self.bus.get(path, SERVICE, "MainPID"))
            lost = " (its EnvironmentFile and token were gone)" if handle.token_lost else ""
            log.info(
                "%s is running (pid %d)%s; waiting for it to re-attach", unit, handle.pid, lost
            )
            return handle
        if state == "activating":
            # systemd restarts it on its own (Restart=, after a crash): another start job
            # would only count twice against the unit's start limit. Its worker connects.
            return handle
        handle.pid_before = int(await self.bus.get(path, SERVICE, "ExecMainPID"))
        # The job ends when the worker sent READY=1 (after initialize()), or failed; the
        # instance waits for its connection meanwhile, so do not block on the job here.
        (job,) = await self.bus.manager("StartUnit", "ss", unit, "replace")
        handle.start_job = asyncio.ensure_future(
            self.bus.job_result(str(job), self.settings.model_init_timeout_secs + 60)
        )
        return handle

    def vouched_pid(self, handle: WorkerHandle) -> int:
        assert isinstance(handle, UnitHandle)
        return handle.started_pid if handle.token_lost else 0

    def attached(self, handle: WorkerHandle, pid: int, token: str) -> None:
        assert isinstance(handle, UnitHandle)
        handle.started_pid = pid
        if handle.token_lost:
            # The worker keeps the token it was started with: the EnvironmentFile names it
            # again, for the next daemon and for a restart of the unit.
            handle.token_lost = False
            path = self._env_path(handle.instance_id)
            values = {**units.read_env_file(path), TOKEN_ENV: token}
            units.write_private(path, units.env_file_text(values))
            self._tokens[handle.instance_id] = token

    async def exit_of(self, handle: UnitHandle) -> UnitExit | None:
        """How the unit's main process ended, when it has (None while it runs)."""
        unit = await self.bus.get_all(handle.path, UNIT)
        service = await self.bus.get_all(handle.path, SERVICE)
        main_pid = int(service.get("MainPID", 0))
        sub = str(unit.get("SubState", ""))
        running = main_pid != 0 and (handle.started_pid in (0, main_pid))
        if running and sub not in _FINAL_SUBSTATES and sub != "auto-restart":
            return None
        refused = ""
        job = handle.start_job
        if (
            job is not None
            and job.done()
            and not job.cancelled()
            and job.result() != "done"
            and int(service.get("ExecMainPID", 0)) == handle.pid_before
        ):
            burst, interval = unit.get("StartLimitBurst"), unit.get("StartLimitIntervalUSec")
            refused = (
                f"its start limit is reached (StartLimitBurst={burst} starts in "
                f"StartLimitIntervalSec={int(interval or 0) / 1e6:g}s)"
            )
        return UnitExit(
            unit=handle.unit,
            code=int(service.get("ExecMainCode", 0)),
            status=int(service.get("ExecMainStatus", 0)),
            result=str(service.get("Result", "")),
            restarting=sub == "auto-restart" or (main_pid != 0 and main_pid != handle.started_pid),
            refused=refused,
        )

    async def wait(self, handle: WorkerHandle, timeout: float) -> UnitExit | None:
        assert isinstance(handle, UnitHandle)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        job = handle.start_job
        if job is not None and not job.done():
            # Until our start job finished the unit may not even have a process yet.
            await asyncio.wait({job}, timeout=timeout)
            if not job.done():
                return None
        while True:
            changed = self.bus.changes(handle.path)
            status = await self.exit_of(handle)
            if status is not None and (handle.started_pid or not status.restarting):
                return status
            left = deadline - loop.time()
            if left <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)

    async def abort(self, handle: WorkerHandle) -> None:
        """SIGKILL the main process; systemd records the failure and restarts the unit."""
        assert isinstance(handle, UnitHandle)
        if await self.exit_of(handle) is None:
            try:
                await self.bus.manager("KillUnit", "ssi", handle.unit, "main", signal.SIGKILL)
            except PbdError as exc:
                log.warning("could not kill %s: %s", handle.unit, exc.message)

    async def stop(self, handle: WorkerHandle, grace: float) -> UnitExit | None:
        """Give the worker ``grace`` seconds to end by itself (after Finalize, or after it
        reported that initialize() failed: its exit status is what the unit keeps), then
        stop the unit."""
        assert isinstance(handle, UnitHandle)
        if await self.wait(handle, grace) is None:
            await self.stop_unit(handle.unit)
        self._tokens.pop(handle.instance_id, None)
        return await self.exit_of(handle)

    async def own_job(self) -> str:
        """The type of the job systemd runs on the daemon's own unit ("restart", "stop", ...),
        "" when none: tells `systemctl restart pbd` (keep instances) from a stop."""
        try:
            (path,) = await self.bus.manager("GetUnitByPID", "u", os.getpid())
            job_id, job_path = await self.bus.get(str(path), UNIT, "Job")
            if not job_id:
                return ""
            return str(await self.bus.get(str(job_path), "org.freedesktop.systemd1.Job", "JobType"))
        except PbdError as exc:
            log.warning("could not ask systemd about our own unit: %s", exc.message)
            return ""

    async def _units(self, states: list[str]) -> list[str]:
        (rows,) = await self.bus.manager(
            "ListUnitsByPatterns", "asas", states, ["pbd-worker@*.service"]
        )
        return [str(row[0]) for row in rows]

    async def running_units(self) -> list[str]:
        """Instance units that are running or starting."""
        return await self._units(["active", "activating", "reloading"])

    async def reset_failed(self) -> None:
        """Forget the failed instance units (initialize() raised, start limit hit): stopping
        pbd for good leaves no failed unit behind; their journal keeps why they failed."""
        try:
            failed = await self._units(["failed"])
            for unit in failed:
                await self.bus.manager("ResetFailedUnit", "s", unit)
        except PbdError as exc:
            log.warning("could not reset the failed instance units: %s", exc.message)
            return
        if failed:
            log.info("reset failed instance unit(s): %s", ", ".join(failed))

    async def stop_unit(self, unit: str) -> None:
        """Stop ``unit`` now, in at most STOP_KILL_AFTER_S + STOP_REAP_S seconds.

        ``ignore-dependencies``: the instance units are ordered ``Before=pbd.service`` (so a
        system shutdown stops the daemon first); a plain stop job for one while pbd.service's
        own stop job runs would wait for that job to finish, which waits for us: a deadlock
        until systemd SIGKILLs the daemon (issue #31). A worker that ignores SIGTERM (hung in
        native code) is SIGKILLed instead of being given the unit's TimeoutStopSec."""
        (job,) = await self.bus.manager("StopUnit", "ss", unit, "ignore-dependencies")
        result = await self.bus.job_result(str(job), STOP_KILL_AFTER_S)
        if result == "timeout":
            log.warning("%s did not stop in %gs; killing it (SIGKILL)", unit, STOP_KILL_AFTER_S)
            try:
                await self.bus.manager("KillUnit", "ssi", unit, "all", signal.SIGKILL)
            except PbdError as exc:
                log.warning("could not kill %s: %s", unit, exc.message)
            result = await self.bus.job_result(str(job), STOP_REAP_S)
        if result != "done":
            log.warning("stop job of %s: %s", unit, result)
