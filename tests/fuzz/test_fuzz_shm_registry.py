"""The system shared-memory registry under crafted keys, offsets and sizes: sequences of
register / status / unregister / acquire / release against a directory that holds every kind
of file a hostile client could name.

Oracle: every call returns or raises :class:`PbdError`; a registered region is always a
regular, single-link file of this uid in the directory, never a link or a pbd segment, with
``0 <= offset`` and ``offset + byte_size`` inside the file as registered; acquire never hands
out bytes outside the region; status lists exactly what is registered.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzz_oracles import tally
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pbd.errors import PbdError
from pbd.memory.client_shm import ClientShmRegistry, SystemRegion

EXAMPLES = 300
FILE_BYTES = 128
OWN_PREFIX = "pbdfz"
# What a client may name: its own files, and every way to name something else. Files named
# like pbd's segments are only clients' files: pbd's own segments are memfds, in no directory.
KEYS = [
    "good", "/good", "//good", "small", "link", "hard", "hard2", "dir", "fifo", "missing",
    ".", "..", "/", "", "a/b", "/../etc/passwd", "good\0x", "x#1", "k" * 300, "\u0661",
    f"{OWN_PREFIX}-arena", "other-123x0abc12-0-d0", "pbd-99x1f-2-w3",
]  # fmt: skip
INTS = st.one_of(
    st.sampled_from([0, 1, -1, 63, 64, 65, FILE_BYTES - 1, FILE_BYTES, FILE_BYTES + 1]),
    st.integers(-4, FILE_BYTES + 4),
    st.integers(-(2**63), 2**64),
)

SMALL = st.one_of(st.integers(-1, 16), INTS)


@pytest.fixture(scope="module")
def shm_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="pbd-fuzz-shm-"))
    outside = root / "outside"
    outside.write_bytes(b"s" * FILE_BYTES)
    shm = root / "shm"
    shm.mkdir()
    (shm / "good").write_bytes(bytes(FILE_BYTES))
    (shm / "small").write_bytes(bytes(8))
    (shm / "link").symlink_to(outside)
    (shm / "hard").write_bytes(bytes(FILE_BYTES))
    os.link(shm / "hard", shm / "hard2")
    (shm / "dir").mkdir()
    os.mkfifo(shm / "fifo")
    (shm / f"{OWN_PREFIX}-arena").write_bytes(bytes(FILE_BYTES))
    (shm / "other-123x0abc12-0-d0").write_bytes(bytes(FILE_BYTES))
    yield shm
    for path in sorted(root.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    root.rmdir()


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("register"),
            st.sampled_from(["a", "b", ""]),
            st.one_of(st.just("/good"), st.sampled_from(KEYS)),
            INTS,
            INTS,
        ),
        st.tuples(st.just("status"), st.sampled_from(["a", "b", "", "zz"])),
        st.tuples(st.just("unregister"), st.sampled_from(["a", "b", "", "zz"])),
        st.tuples(st.just("acquire"), st.sampled_from(["a", "b", "zz"]), SMALL, SMALL),
    ),  # fmt: skip
    max_size=12,
)


def _check_region(region: SystemRegion, shm_dir: Path) -> None:
    path = shm_dir / region.identity.file
    st_ = os.lstat(path)
    assert stat.S_ISREG(st_.st_mode) and st_.st_nlink == 1 and st_.st_uid == os.geteuid()
    assert (st_.st_dev, st_.st_ino) == (region.identity.device, region.identity.inode)
    assert region.offset >= 0 and region.byte_size >= 0
    assert region.offset + region.byte_size <= st_.st_size


@settings(max_examples=EXAMPLES)
@given(ops=OPS)
@example(ops=[("register", "a", "/good", 64, 64), ("acquire", "a", 0, 16), ("unregister", "a")])
def test_fuzz_shm_registry(shm_dir: Path, ops: list[tuple]) -> None:
    registry = ClientShmRegistry(enabled=True, key_prefixes=[], shm_dir=str(shm_dir))
    held = []
    for op, name, *args in ops:
        try:
            if op == "register":
                registry.register(name, *args)
                outcome = "registered"
            elif op == "status":
                found = registry.status(name)
                assert {r.name for r in found} <= set(registry.regions)
                outcome = "status"
            elif op == "unregister":
                registry.unregister(name)
                outcome = "unregistered"
            else:
                region, where = registry.acquire(name, *args)
                assert isinstance(region, SystemRegion)
                offset, size = args
                assert offset >= 0 and size >= 0
                assert region.offset <= where and where + size <= region.offset + region.byte_size
                held.append(region)
                outcome = "acquired"
        except PbdError:
            outcome = f"{op} refused"
        tally("shm registry (hypothesis)", outcome)
        for region in registry.system_regions():
            _check_region(region, shm_dir)
    for region in held:
        registry.release(region)
    registry.unregister("")
    assert registry.regions == {}
