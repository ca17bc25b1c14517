"""Shared-memory segments and the arenas built from them.

A *segment* is a file in /dev/shm mapped with ``mmap`` (not ``multiprocessing.shared_memory``:
on Python < 3.13 its resource tracker unlinks segments the process merely attached to).
Space is reserved with ``posix_fallocate`` when a segment is created, so a full /dev/shm fails
there, with a message, instead of as a SIGBUS on first touch.

An *arena* is the growable set of segments one side allocates tensors in: the daemon writes
request inputs into its arena for a worker, the worker writes outputs into its own. The other
side reads through a :class:`SegmentMap`, which attaches segments by name on first use.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import mmap
import os
import re
from dataclasses import dataclass

import numpy as np

from pbd_wire.client_region import RegionIdentity, RegionRefused, open_region

SHM_DIR = "/dev/shm"
ALIGNMENT = 64
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


# What Triton's python backend says when /dev/shm cannot grow.
TRITON_PHRASE = "Failed to increase the shared memory pool size"


class ShmExhausted(Exception):
    """/dev/shm has no room for segment ``key``. ``message`` says what was asked, what is
    free, and what to change."""

    def __init__(self, requested: int, shm_dir: str, key: str) -> None:
        free = total = -1
        try:
            st = os.statvfs(shm_dir)
            free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        except OSError:
            pass
        self.requested, self.free, self.total = requested, free, total
        # Triton's words first (its QA and models look for "... pool size for key"):
        # alerting and model code that match on them match pbd too.
        self.message = (
            f"{TRITON_PHRASE} for key '{key}' to {requested} bytes: out of shared memory: "
            f"needed {requested} bytes in {shm_dir}, "
            f"{free} of {total} bytes are free; enlarge {shm_dir} "
            "(docker/podman '--shm-size', or 'mount -o remount,size=<bytes> /dev/shm') "
            "or send smaller tensors"
        )
        super().__init__(self.message)


# An instance's segments share one base name, which the daemon picks: its input arena
# "<base>-d<n>" (the daemon's), its output arena "<base>-w<n>" (the worker's) and its
# cancellation page "<base>-c".
INPUT_ARENA = "-d"
OUTPUT_ARENA = "-w"
CANCEL_PAGE = "-c"


def remove_instance_segments(base: str, shm_dir: str = SHM_DIR) -> list[str]:
    """Unlink every segment of the instance named ``base`` (mappings of them stay valid until
    unmapped); the names removed. For whoever outlives the other side: a worker whose daemon
    died, a daemon whose worker did."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []
    return unlink_starting(shm_dir, names, f"{base}-")


def unlink_starting(shm_dir: str, names: list[str], start: str) -> list[str]:
    """Unlink those of ``names`` (files in ``shm_dir``) that start with ``start``; the names
    removed (one already gone is not)."""
    removed = []
    for name in names:
        if not name.startswith(start):
            continue
        try:
            os.unlink(os.path.join(shm_dir, name))
        except FileNotFoundError:
            continue
        removed.append(name)
    return removed


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"invalid shared-memory segment name {name!r}")


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


class Segment:
    """One mapped /dev/shm file."""

    def __init__(self, name: str, fd: int, size: int, *, owner: bool, shm_dir: str) -> None:
        self.name = name
        self.size = size
        self.owner = owner
        self.path = os.path.join(shm_dir, name)
        try:
            self.mmap = mmap.mmap(fd, size) if size else None
        finally:
            os.close(fd)
        self.buffer = memoryview(self.mmap) if self.mmap is not None else memoryview(b"")
        # Base address, so an ndarray can be recognised as living inside this segment.
        self.address = (
            int(np.frombuffer(self.buffer, np.uint8).__array_interface__["data"][0]) if size else 0
        )

    @classmethod
    def create(cls, name: str, size: int, shm_dir: str = SHM_DIR) -> Segment:
        _check_name(name)
        path = os.path.join(shm_dir, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            os.close(fd)
            os.unlink(path)
            if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
                raise ShmExhausted(size, shm_dir, name) from exc
            raise
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        return cls(name, fd, size, owner=True, shm_dir=shm_dir)

    @classmethod
    def attach(cls, name: str, shm_dir: str = SHM_DIR) -> Segment:
        _check_name(name)
        fd = os.open(os.path.join(shm_dir, name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
        except BaseException:
            os.close(fd)
            raise
        return cls(name, fd, size, owner=False, shm_dir=shm_dir)

    @classmethod
    def attach_client(cls, identity: RegionIdentity, shm_dir: str = SHM_DIR) -> Segment:
        """A client's registered region: the very file the daemon registered, or
        :class:`RegionRefused`."""
        try:
            fd, st = open_region(shm_dir, identity.file, identity=identity)
        except RegionRefused as exc:
            raise RegionRefused(f"client shared-memory file '{identity.file}': {exc}") from None
        return cls(identity.file, fd, st.st_size, owner=False, shm_dir=shm_dir)

    def view(self, offset: int, nbytes: int) -> memoryview:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError(
                f"range [{offset}, {offset + nbytes}) outside segment {self.name!r} "
                f"of {self.size} bytes"
            )
        return self.buffer[offset : offset + nbytes]

    def close(self) -> None:
        self.buffer.release()
        if self.mmap is not None:
            try:
                self.mmap.close()
            except BufferError:
                # A numpy view handed to model code is still alive; the mapping goes away
                # with it. The file itself is unlinked regardless.
                pass

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


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

    def __init__(
        self, prefix: str, initial_bytes: int, growth_bytes: int, shm_dir: str = SHM_DIR
    ) -> None:
        self.prefix = prefix
        self.initial_bytes = align(max(initial_bytes, ALIGNMENT))
        self.growth_bytes = align(max(growth_bytes, ALIGNMENT))
        self.shm_dir = shm_dir
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
        segment = Segment.create(f"{self.prefix}{self._next}", size, self.shm_dir)
        self._next += 1
        self.segments.append(segment)
        self._free[segment.name] = FreeList(size)
        return segment

    def allocate(self, nbytes: int) -> Block:
        """A block of ``nbytes``; raises :class:`ShmExhausted` when /dev/shm is full."""
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
        """Unmap and unlink every segment."""
        for segment in self.segments:
            segment.close()
            segment.unlink()
        self.segments.clear()
        self._free.clear()


class SegmentMap:
    """The other side's segments, attached by name on first use and kept mapped."""

    def __init__(self, shm_dir: str = SHM_DIR, allowed_prefix: str = "") -> None:
        self.shm_dir = shm_dir
        self.allowed_prefix = allowed_prefix
        self.segments: dict[str, Segment] = {}

    def get(self, name: str) -> Segment:
        """``name`` is a file name, or a client region's worker-side name (see
        :mod:`pbd_wire.client_region`): a client region the daemon registered anew is
        mapped anew, even if its file has the same name."""
        segment = self.segments.get(name)
        if segment is None:
            if not name.startswith(self.allowed_prefix):
                raise ValueError(f"segment {name!r} is not one of this peer's")
            base = name.partition("#")[0]
            identity = RegionIdentity.parse(name)
            if identity is None:
                segment = Segment.attach(base, self.shm_dir)
            else:
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
