"""Shared-memory segments and the arenas built from them.

A *segment* of pbd's own (a daemon's, a front end's or a worker's arena, a cancellation page)
is an anonymous memory file (``memfd_create``), mapped with ``mmap``. It has no name in any
directory: nothing in /dev/shm to fill (a container's is 64 MiB), to collide with another
daemon's, to guess, or to leave behind. Its pages are counted against the memory limit of the
process's cgroup, and they are freed when the last process holding it (a descriptor or a
mapping) exits or lets go. The owner keeps its descriptor open for as long as the segment
lives; a peer (another pbd process of the same user, in the same PID namespace) maps it by
opening ``/proc/<owner pid>/fd/<fd>``: the kernel lets a process open another's descriptor so
only where it could read that process's memory (ptrace's read check: same user, no more
privileges), which is exactly who may share its tensors. The name on the wire says where:
``<base>@<pid>.<fd>.<inode>``; the inode, checked after opening, makes a pid or descriptor
number reused by another process fail instead of mapping something else.

A segment bigger than the memory this process may still use (its cgroup's headroom, or the
machine's MemAvailable) is refused before anything is reserved: a memfd has no size limit of
its own, as a tmpfs had, and asking past the limit would wake the OOM killer, which picks some
process to kill rather than failing this one request. Space is then reserved with
``posix_fallocate``, so memory that runs out fails there, with a message, instead of as a
SIGBUS on first touch; then the size is sealed
(``F_SEAL_SHRINK``/``F_SEAL_GROW``), so no process holding it can truncate it under another's
mapping.

Clients' regions (Triton's system shared-memory extension) are files the client names in
``shm_dir`` (/dev/shm): :mod:`pbd_wire.client_region` opens those.

An *arena* is the growable set of segments one side allocates tensors in: the daemon or a
front end writes request inputs into its arena for a worker, the worker writes outputs into
its own. The other side reads through a :class:`SegmentMap`, which maps segments on first use.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import mmap
import os
import re
import stat
from dataclasses import dataclass

import numpy as np

from pbd_wire.client_region import RegionIdentity, RegionRefused, open_region

SHM_DIR = "/dev/shm"  # where clients' regions are (Triton's shm_open keys)
ALIGNMENT = 64
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
# A peer's segment on the wire: <base>@<pid>.<fd>.<inode>
_WIRE = re.compile(r"^([A-Za-z0-9_.\-]+)@(\d+)\.(\d+)\.(\d+)$")
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


# What Triton's python backend says when its shared-memory pool cannot grow.
TRITON_PHRASE = "Failed to increase the shared memory pool size"


class ShmExhausted(Exception):
    """No memory for a new segment ``key`` of ``requested`` bytes. ``message`` says what was
    asked, what this process may still use, and what to change."""

    def __init__(self, requested: int, key: str) -> None:
        self.requested = requested
        self.available = available_memory()
        # Triton's words first (its QA and models look for "... pool size for key"):
        # alerting and model code that match on them match pbd too.
        self.message = (
            f"{TRITON_PHRASE} for key '{key}' to {requested} bytes: out of memory for "
            f"shared tensors: needed {requested} bytes, {self.available} bytes are available "
            "to this service (its cgroup's memory.max less memory.current, or the system's "
            "MemAvailable); raise the memory limit (a pod's resources.limits.memory, "
            "systemd's MemoryMax=) or send smaller tensors"
        )
        super().__init__(self.message)


def available_memory() -> int:
    """Bytes this process may still allocate: the tightest of its cgroup v2 limits (less what
    each cgroup uses) and the system's MemAvailable; -1 when none can be read."""
    found: list[int] = []
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemAvailable:"):
            found.append(int(line.split()[1]) * 1024)
    own = [ln for ln in _read("/proc/self/cgroup").splitlines() if ln.startswith("0::")]
    group = os.path.normpath(os.path.join(CGROUP_ROOT, own[0][3:].lstrip("/"))) if own else ""
    while group.startswith(CGROUP_ROOT):
        limit, used = _read(f"{group}/memory.max").strip(), _read(f"{group}/memory.current")
        if limit.isdigit() and used.strip().isdigit():
            found.append(max(0, int(limit) - int(used)))
        if group == CGROUP_ROOT:
            break
        group = os.path.dirname(group)
    return min(found) if found else -1


CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, ValueError):
        return ""


# An instance's segments share one base name, which the daemon picks: its input arena
# "<base>-d<n>" (the daemon's), its output arena "<base>-w<n>" (the worker's) and its
# cancellation page "<base>-c".
INPUT_ARENA = "-d"
OUTPUT_ARENA = "-w"
CANCEL_PAGE = "-c"


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"invalid shared-memory segment name {name!r}")


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


_PROC_PID: tuple[int, int] = (-1, -1)


def proc_pid() -> int:
    """This process's pid as the mounted /proc numbers it (its peers open our descriptors
    there; in a PID namespace whose /proc is the parent's, ``getpid()`` would differ)."""
    global _PROC_PID
    pid = os.getpid()
    if _PROC_PID[0] != pid:  # first call, or a forked child
        try:
            _PROC_PID = (pid, int(os.readlink("/proc/self")))
        except (OSError, ValueError):
            _PROC_PID = (pid, pid)
    return _PROC_PID[1]


class Segment:
    """One mapped segment: pbd's own (a memfd), or a client's registered /dev/shm file."""

    def __init__(self, name: str, fd: int, size: int, *, owner: bool, path: str = "") -> None:
        self.name = name
        self.size = size
        self.owner = owner
        self.path = path  # a client's file; "" for a memfd
        # The owner keeps its descriptor: it is how peers reach the segment.
        self.fd = fd if owner else -1
        try:
            self.mmap = mmap.mmap(fd, size) if size else None
        finally:
            if not owner:
                os.close(fd)
        self.buffer = memoryview(self.mmap) if self.mmap is not None else memoryview(b"")
        # Base address, so an ndarray can be recognised as living inside this segment.
        self.address = (
            int(np.frombuffer(self.buffer, np.uint8).__array_interface__["data"][0]) if size else 0
        )

    @classmethod
    def create(cls, base: str, size: int) -> Segment:
        """A new memfd of ``size`` bytes, its pages reserved, named on the wire
        ``<base>@<pid>.<fd>.<inode>``. :class:`ShmExhausted` when memory runs out."""
        _check_name(base)
        if size > available_memory() >= 0:
            # Refused before asking: a memfd has no size limit of its own (a tmpfs had one),
            # and reserving more than the cgroup or the machine has would wake the OOM
            # killer, which picks a process to kill, not this request to fail.
            raise ShmExhausted(size, base)
        fd = os.memfd_create(base, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            if size:
                os.posix_fallocate(fd, 0, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            ino = os.fstat(fd).st_ino
            return cls(f"{base}@{proc_pid()}.{fd}.{ino}", fd, size, owner=True)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise ShmExhausted(size, base) from exc
            raise
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def attach(cls, name: str) -> Segment:
        """A peer's segment, by its wire name. FileNotFoundError when its owner is gone (or
        let it go); ValueError for a name that is not a segment's, or a descriptor that is no
        longer that segment; PermissionError when this process may not open it (another
        user, more privileges)."""
        found = _WIRE.match(name)
        if found is None:
            raise ValueError(f"invalid shared-memory segment name {name!r}")
        base, pid, number, ino = found.group(1), *map(int, found.group(2, 3, 4))
        try:
            fd = os.open(f"/proc/{pid}/fd/{number}", os.O_RDWR | os.O_CLOEXEC)
        except PermissionError as exc:
            raise PermissionError(
                exc.errno,
                f"cannot open segment {name!r} of process {pid}: pbd's processes must run as "
                "one user with the same privileges, in one PID namespace, with /proc mounted",
            ) from None
        try:
            st = os.fstat(fd)
            link = os.readlink(f"/proc/self/fd/{fd}")
            ours = f"/memfd:{base} (deleted)"
            if st.st_ino != ino or not stat.S_ISREG(st.st_mode) or link != ours:
                raise FileNotFoundError(
                    errno.ENOENT, f"segment {name!r} is gone (process {pid} let it go)"
                )
        except BaseException:
            os.close(fd)
            raise
        return cls(name, fd, st.st_size, owner=False)

    @classmethod
    def attach_client(cls, identity: RegionIdentity, shm_dir: str = SHM_DIR) -> Segment:
        """A client's registered region: the very file the daemon registered, or
        :class:`RegionRefused`."""
        try:
            fd, st = open_region(shm_dir, identity.file, identity=identity)
        except RegionRefused as exc:
            raise RegionRefused(f"client shared-memory file '{identity.file}': {exc}") from None
        return cls(
            identity.file, fd, st.st_size, owner=False, path=os.path.join(shm_dir, identity.file)
        )

    def gone(self) -> bool:
        """A peer's segment whose owner let it go (exited, or closed it), or a client's file
        that was removed: only mappings like ours keep it now."""
        if self.owner:
            return False
        if self.path:
            return not os.path.exists(self.path)
        found = _WIRE.match(self.name)
        if found is None:
            return True
        pid, number, ino = map(int, found.group(2, 3, 4))
        try:
            return os.stat(f"/proc/{pid}/fd/{number}").st_ino != ino
        except OSError:
            return True

    def view(self, offset: int, nbytes: int) -> memoryview:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(
                f"range [{offset}, {offset + nbytes}) outside segment {self.name!r} "
                f"of {self.size} bytes"
            )
        return self.buffer[offset : offset + nbytes]

    def close(self) -> None:
        """Unmap (and, the owner, let go of the descriptor: no peer can map it after)."""
        self.buffer.release()
        if self.mmap is not None:
            try:
                self.mmap.close()
            except BufferError:
                # A numpy view handed to model code is still alive; the mapping goes away
                # with it.
                pass
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(frozen=True)
class Block:
    segment: Segment
    offset: int
    nbytes: int  # as asked; the reservation is align(nbytes)

    def view(self) -> memoryview:
        return self.segment.view(self.offset, self.nbytes)


class FreeList:
    """First-fit free list over one segment, coalescing neighbours on free."""

    def __init__(self, size: int) -> None:
        self.offsets: list[int] = [0] if size else []
        self.sizes: list[int] = [size] if size else []

    def take(self, size: int) -> int | None:
        for i, free in enumerate(self.sizes):
            if free >= size:
                offset = self.offsets[i]
                if free == size:
                    del self.offsets[i], self.sizes[i]
                else:
                    self.offsets[i] += size
                    self.sizes[i] -= size
                return offset
        return None

    def give(self, offset: int, size: int) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        if i > 0 and self.offsets[i - 1] + self.sizes[i - 1] == offset:
            i -= 1
            self.sizes[i] += size
        else:
            self.offsets.insert(i, offset)
            self.sizes.insert(i, size)
        if i + 1 < len(self.offsets) and self.offsets[i] + self.sizes[i] == self.offsets[i + 1]:
            self.sizes[i] += self.sizes[i + 1]
            del self.offsets[i + 1], self.sizes[i + 1]


class Arena:
    """Allocates blocks in segments named ``<prefix><n>``, adding a segment when none fits."""

    def __init__(self, prefix: str, initial_bytes: int, growth_bytes: int) -> None:
        self.prefix = prefix
        self.initial_bytes = align(max(initial_bytes, ALIGNMENT))
        self.growth_bytes = align(max(growth_bytes, ALIGNMENT))
        self.segments: list[Segment] = []
        self._free: dict[str, FreeList] = {}
        self._next = 0

    def find(self, name: str) -> Segment | None:
        for segment in self.segments:
            if segment.name == name:
                return segment
        return None

    @property
    def capacity(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def used(self) -> int:
        """Bytes allocated now (block sizes rounded up to the alignment)."""
        return self.capacity - sum(sum(f.sizes) for f in self._free.values())

    def _grow(self, need: int) -> Segment:
        size = self.initial_bytes if not self.segments else self.growth_bytes
        size = max(size, need)
        segment = Segment.create(f"{self.prefix}{self._next}", size)
        self._next += 1
        self.segments.append(segment)
        self._free[segment.name] = FreeList(size)
        return segment

    def allocate(self, nbytes: int) -> Block:
        """A block of ``nbytes``; raises :class:`ShmExhausted` when memory runs out."""
        size = align(max(nbytes, 1))
        for segment in self.segments:
            offset = self._free[segment.name].take(size)
            if offset is not None:
                return Block(segment, offset, nbytes)
        segment = self._grow(size)
        offset = self._free[segment.name].take(size)
        assert offset is not None
        return Block(segment, offset, nbytes)

    def free(self, block: Block) -> None:
        self._free[block.segment.name].give(block.offset, align(max(block.nbytes, 1)))

    def close(self) -> None:
        """Unmap every segment and let go of it."""
        for segment in self.segments:
            segment.close()
        self.segments.clear()
        self._free.clear()


def held_segments(prefix: str, proc: str = "/proc") -> dict[str, os.stat_result]:
    """The segments whose base starts with ``prefix`` that some process still holds (a
    descriptor, or a mapping alone), by ``<base>`` in name order, with their status (size,
    blocks): what an operator or a test checks is gone once the processes that used it are."""
    marker = f"/memfd:{prefix}"
    held: dict[str, os.stat_result] = {}
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return {}
    for pid in pids:
        for where in ("fd", "map_files"):
            with contextlib.suppress(OSError):
                for entry in os.listdir(f"{proc}/{pid}/{where}"):
                    with contextlib.suppress(OSError):
                        path = f"{proc}/{pid}/{where}/{entry}"
                        link = os.readlink(path)
                        if link.startswith(marker):
                            base = link[len("/memfd:") :].removesuffix(" (deleted)")
                            held[base] = os.stat(path)
    return dict(sorted(held.items()))


class SegmentMap:
    """The other side's segments, attached by name on first use and kept mapped."""

    def __init__(self, shm_dir: str = SHM_DIR, allowed_prefix: str = "") -> None:
        self.shm_dir = shm_dir
        self.allowed_prefix = allowed_prefix
        self.segments: dict[str, Segment] = {}

    def get(self, name: str) -> Segment:
        """``name`` is a peer's segment (``<base>@<pid>.<fd>.<inode>``), or a client region's
        worker-side name (see :mod:`pbd_wire.client_region`): a client region the daemon
        registered anew is mapped anew, even if its file has the same name."""
        segment = self.segments.get(name)
        if segment is None:
            if not name.startswith(self.allowed_prefix):
                raise ValueError(f"segment {name!r} is not one of this peer's")
            identity = RegionIdentity.parse(name)
            if identity is None:
                segment = Segment.attach(name)
            else:
                base = name.partition("#")[0]
                segment = Segment.attach_client(identity, self.shm_dir)
                # A new registration of a client region replaces the older ones: keeping
                # every generation mapped would grow by a mapping per registration.
                for old in [n for n in self.segments if n.partition("#")[0] == base]:
                    with contextlib.suppress(BufferError):  # views alive: unmapped with them
                        self.segments.pop(old).close()
            self.segments[name] = segment
        return segment

    def view(self, name: str, offset: int, nbytes: int) -> memoryview:
        return self.get(name).view(offset, nbytes)

    def sweep(self) -> list[str]:
        """Unmap the segments whose owners let them go (an instance stopped or replaced); a
        mapping a result still views goes with the last such view. The names unmapped."""
        gone = [name for name, segment in self.segments.items() if segment.gone()]
        for name in gone:
            with contextlib.suppress(BufferError):
                self.segments.pop(name).close()
        return gone

    def locate(
        self, address: int, nbytes: int, *, clients: bool = True
    ) -> tuple[Segment, int] | None:
        """The segment and offset holding ``[address, address + nbytes)``, if any; with
        ``clients=False`` only the daemon's segments count, not clients' registered regions
        (mapped under ``<file>#<generation>``), which a reply cannot name."""
        for name, segment in self.segments.items():
            if not clients and "#" in name:
                continue
            if segment.address <= address and address + nbytes <= segment.address + segment.size:
                return segment, address - segment.address
        return None

    def close(self) -> None:
        for segment in self.segments.values():
            segment.close()
        self.segments.clear()
