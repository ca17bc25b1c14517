"""How worker processes are started and stopped.

Launchers share one interface, so the supervisor does not care whether a worker is a child
process (``ProcessLauncher``, here) or a systemd unit (``pbd.systemd.launcher``). Liveness is
*not* the launcher's job: the worker's connection and heartbeats say that. The launcher only
reports how a worker ended, for the error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import secrets
import signal
import sys
from dataclasses import dataclass, field
from typing import Protocol

from pbd_wire import SCHEDULING_ENV


@dataclass(frozen=True)
class WorkerSpec:
    instance_id: str
    socket: str
    env: dict[str, str] = field(default_factory=dict)
    # Bytes of private memory (heap, anonymous mappings; not shared memory) the worker may use;
    # 0: no limit. The process launcher sets RLIMIT_DATA; past it allocations fail
    # (MemoryError), and the worker exits and is replaced.
    memory_limit: int = 0
    # The interpreter (a model's EXECUTION_ENV_PATH environment); "" = the daemon's.
    python: str = ""

    def argv(self) -> list[str]:
        return [
            self.python or sys.executable,
            "-m",
            "pbd_worker",
            "--socket",
            self.socket,
            "--instance",
            self.instance_id,
        ]


@dataclass(frozen=True)
class ExitStatus:
    returncode: int
    permanent = False

    def describe(self) -> str:
        if self.returncode < 0:
            signum = -self.returncode
            try:
                name = signal.Signals(signum).name
            except ValueError:
                name = f"signal {signum}"
            return f"killed by signal {signum} ({name})"
        return f"exited with status {self.returncode}"


# How a process that hit its memory limit in C code (not as a MemoryError) usually ends.
_MEMORY_SIGNALS = (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGKILL)


def describe_exit(status: WorkerExit | None, why: str = "", memory_limit: int = 0) -> str:
    """How a worker ended, for an error message: the launcher's account, what the worker
    said before it went (``why``), or a hint when a limited process died by a signal."""
    text = status.describe() if status is not None else "closed its connection"
    if why:
        return f"{text}: {why}"
    if memory_limit and getattr(status, "returncode", None) in _MEMORY_SIGNALS:
        text += f" (its memory limit is {memory_limit} bytes; it may have run out)"
    return text


class WorkerHandle(Protocol):
    @property
    def pid(self) -> int | None: ...


class WorkerExit(Protocol):
    def describe(self) -> str: ...

    @property
    def permanent(self) -> bool:
        """Starting the worker again would fail the same way (e.g. a systemd start limit)."""
        ...


class InstanceLauncher(Protocol):
    # True while the daemon restarts under systemd: stopping an instance then only lets go of
    # it (the worker keeps running and re-attaches to the next daemon).
    detaching: bool

    def token(self, instance_id: str) -> str:
        """The secret the worker of ``instance_id`` presents when it connects."""
        ...

    async def start(self, spec: WorkerSpec) -> WorkerHandle: ...
    def vouched_pid(self, handle: WorkerHandle) -> int:
        """A running process the launcher knows is the worker of ``handle`` though its token
        is not known any more (0: none; the worker proves itself with its token)."""
        ...

    def attached(self, handle: WorkerHandle, pid: int, token: str) -> None:
        """The worker of ``handle`` connected: its process is ``pid``, presenting ``token``."""
        ...

    async def stop(self, handle: WorkerHandle, grace: float) -> WorkerExit | None:
        """End the worker for good."""
        ...

    async def abort(self, handle: WorkerHandle) -> None:
        """Kill a broken worker now; a launcher with its own restart policy then applies it."""
        ...

    async def wait(self, handle: WorkerHandle, timeout: float) -> WorkerExit | None:
        """How the worker ended, once it has (None: still running after ``timeout``)."""
        ...


@dataclass
class ProcessHandle:
    process: asyncio.subprocess.Process

    @property
    def pid(self) -> int | None:
        return self.process.pid


class ProcessLauncher:
    """Workers as direct child processes of the daemon (the default; needs nothing else)."""

    detaching = False

    def __init__(self, scheduling: str = "batch") -> None:
        self.scheduling = scheduling

    def token(self, instance_id: str) -> str:
        return secrets.token_hex(16)

    async def start(self, spec: WorkerSpec) -> ProcessHandle:
        env = dict(os.environ)
        env.update(spec.env)
        env[SCHEDULING_ENV] = self.scheduling
        process = await asyncio.create_subprocess_exec(
            *spec.argv(),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            # Own session: a terminal's Ctrl-C goes to the daemon, which stops workers in order.
            start_new_session=True,
        )
        if spec.memory_limit > 0:
            # Before the model's code runs: that waits for Initialize, sent after this returns.
            try:
                resource.prlimit(
                    process.pid, resource.RLIMIT_DATA, (spec.memory_limit, spec.memory_limit)
                )
            except (OSError, ValueError):
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
                raise
        return ProcessHandle(process)

    async def wait(self, handle: WorkerHandle, timeout: float) -> ExitStatus | None:
        assert isinstance(handle, ProcessHandle)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(handle.process.wait(), timeout)
        code = handle.process.returncode
        return None if code is None else ExitStatus(code)

    def vouched_pid(self, handle: WorkerHandle) -> int:
        return 0  # every child is started with a token of this daemon

    def attached(self, handle: WorkerHandle, pid: int, token: str) -> None:
        pass  # our child: its pid and token are known from the start

    async def abort(self, handle: WorkerHandle) -> None:
        await self.stop(handle, 0.0)

    async def stop(self, handle: WorkerHandle, grace: float) -> ExitStatus | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        assert isinstance(handle, ProcessHandle)
        if handle.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                handle.process.terminate()
            status = await self.wait(handle, grace)
            if status is not None:
                return status
            with contextlib.suppress(ProcessLookupError):
                handle.process.kill()
        return await self.wait(handle, 10.0)
