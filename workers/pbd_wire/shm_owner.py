"""Owner records: how a daemon's segments say whether their daemon still lives.

A daemon writes ``<prefix>-<daemon id>.owner`` beside its segments and holds an
open-file-description lock (``F_OFD_SETLK``) on it while it runs. The lock lives on the file,
so every PID namespace sharing the directory sees it (containers sharing /dev/shm, where a pid
alone says nothing), and the kernel drops it however the daemon dies. Whoever can take the
lock knows the daemon is gone. An OFD lock, not a POSIX record lock: it conflicts between two
opens in one process too, and closing some other descriptor of the file does not drop it.

Both sides use this: the daemon (``pbd.memory.segments``) to claim its segments and sweep a
dead daemon's; a worker whose daemon died, to remove the record once the last segment of that
daemon is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import time

OWNER_SUFFIX = ".owner"
# struct flock on Linux (64-bit off_t): l_type, l_whence, l_start, l_len, l_pid, padding.
_FLOCK = "hhqqi4x"
# A dead daemon's record is held only for the moment a sweeper looks at it.
_BUSY_TRIES, _BUSY_WAIT_S = 20, 0.01


def owner_path(daemon_base: str, shm_dir: str) -> str:
    """The record of the daemon whose segments start with ``daemon_base`` (prefix-id)."""
    return os.path.join(shm_dir, f"{daemon_base}{OWNER_SUFFIX}")


def try_lock(fd: int) -> bool:
    """Take the exclusive OFD lock on ``fd`` without waiting; False if someone holds it."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def owner_record() -> str:
    """Who this process is, wherever the record is read: pid, PID namespace, boot."""
    try:
        pid_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pid_ns = "unknown"
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            boot_id = boot.read().strip()
    except OSError:
        boot_id = "unknown"
    return f"pid {os.getpid()}\npid_namespace {pid_ns}\nboot_id {boot_id}\n"


def remove_orphaned_record(instance_base: str, shm_dir: str) -> bool:
    """After a worker removed its instance's segments because its daemon went away: remove
    the daemon's owner record as well when nobody holds it and no segment of that daemon is
    left (the last of its workers out does it; a daemon that starts later with the same
    prefix otherwise). True when removed."""
    daemon_base = instance_base.rsplit("-", 1)[0]
    path = owner_path(daemon_base, shm_dir)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        for _ in range(_BUSY_TRIES):
            if try_lock(fd):
                break
            time.sleep(_BUSY_WAIT_S)  # another worker looking, or the daemon lives
        else:
            return False
        try:
            names = os.listdir(shm_dir)
        except OSError:
            return False
        if any(n.startswith(f"{daemon_base}-") for n in names):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    finally:
        os.close(fd)
