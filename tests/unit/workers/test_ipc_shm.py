from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pbd_wire import shm
from pbd_wire.client_region import RegionIdentity
from pbd_wire.shm import Arena, Segment, SegmentMap, ShmExhausted, align, held_segments


def test_allocate_reuses_freed_space_and_coalesces(prefix):
    arena = Arena(prefix, 4096, 4096)
    a, b, c = arena.allocate(1000), arena.allocate(1000), arena.allocate(1000)
    assert [a.offset, b.offset, c.offset] == [0, align(1000), 2 * align(1000)]
    arena.free(b)
    arena.free(a)
    big = arena.allocate(2 * align(1000))  # fits only if a and b were coalesced
    assert big.offset == 0 and big.segment is a.segment
    assert len(arena.segments) == 1
    arena.close()
    assert not [n for n in os.listdir(shm.SHM_DIR) if n.startswith(prefix)]


def test_arena_grows_with_a_segment_big_enough(prefix):
    arena = Arena(prefix, 4096, 8192)
    arena.allocate(4000)
    block = arena.allocate(100_000)
    assert len(arena.segments) == 2
    assert block.segment.size >= 100_000
    assert block.segment.name.startswith(f"{prefix}1@")
    arena.close()


def test_other_side_reads_what_one_side_wrote(prefix):
    arena = Arena(prefix, 1 << 16, 1 << 16)
    block = arena.allocate(4 * 10)
    block.view()[:] = np.arange(10, dtype=np.float32).tobytes()
    peer = SegmentMap(allowed_prefix=prefix)
    view = peer.view(block.segment.name, block.offset, block.nbytes)
    assert np.frombuffer(view, np.float32).tolist() == list(range(10))
    array = np.frombuffer(view, np.float32)
    found = peer.locate(int(array.__array_interface__["data"][0]), array.nbytes)
    assert found is not None and found[0].name == block.segment.name and found[1] == block.offset
    del array, view
    peer.close()
    arena.close()


def test_a_new_generation_of_a_client_region_replaces_the_old_mapping(tmp_path):
    file = tmp_path / "client_region"
    file.write_bytes(bytes(4096))
    peer = SegmentMap(shm_dir=str(tmp_path))
    st = os.stat(file)
    for generation in range(1, 50):
        with open(file, "r+b") as f:
            f.write(generation.to_bytes(4, "little"))
        region = RegionIdentity(file.name, generation, st.st_dev, st.st_ino).worker_name
        view = peer.view(region, 0, 4)
        assert int.from_bytes(view, "little") == generation
        del view
    assert list(peer.segments) == [region]
    peer.close()


def test_segment_map_refuses_names_outside_its_prefix_and_bad_ranges(prefix):
    arena = Arena(prefix, 4096, 4096)
    block = arena.allocate(10)
    peer = SegmentMap(allowed_prefix=prefix)
    with pytest.raises(ValueError, match="not one of this peer's"):
        peer.get("someone-else")
    with pytest.raises(ValueError, match="outside segment"):
        peer.view(block.segment.name, 4000, 200)
    with pytest.raises(ValueError, match="invalid shared-memory segment name"):
        Segment.attach("../etc/passwd")
    peer.close()
    arena.close()


def test_segments_are_memfds_outside_dev_shm_and_go_with_their_owner(prefix):
    arena = Arena(prefix, 4096, 4096)
    block = arena.allocate(16)
    name = block.segment.name
    assert re.fullmatch(rf"{prefix}0@\d+\.\d+\.\d+", name)
    assert not [n for n in os.listdir(shm.SHM_DIR) if n.startswith(prefix)]
    assert list(held_segments(prefix)) == [f"{prefix}0"]
    peer = SegmentMap(allowed_prefix=prefix)
    peer.view(name, 0, 4)
    assert not peer.segments[name].gone()
    arena.close()  # the owner lets go: no one can map it any more
    assert peer.segments[name].gone()
    with pytest.raises(FileNotFoundError):
        Segment.attach(name)
    assert peer.sweep() == [name]
    assert list(held_segments(prefix)) == []


def test_a_reused_descriptor_number_is_not_mapped_as_the_old_segment(prefix):
    first = Segment.create(f"{prefix}a", 4096)
    name = first.name
    first.close()
    second = Segment.create(f"{prefix}b", 4096)  # most likely the same descriptor number
    try:
        with pytest.raises(FileNotFoundError, match="is gone"):
            Segment.attach(name)
    finally:
        second.close()


def test_a_segment_cannot_be_shrunk_under_another_process_mapping(prefix):
    segment = Segment.create(f"{prefix}sealed", 8192)
    try:
        with pytest.raises(PermissionError):
            os.ftruncate(segment.fd, 0)
        with pytest.raises(PermissionError):
            os.ftruncate(segment.fd, 1 << 20)
    finally:
        segment.close()


def test_another_process_maps_a_segment_by_its_wire_name(prefix):
    """A real second process: it opens the segment through /proc/<pid>/fd, as a worker or a
    front end does, and reads and writes the same memory."""
    segment = Segment.create(f"{prefix}shared", 4096)
    segment.view(0, 5)[:] = b"hello"
    child = (
        "import sys; from pbd_wire.shm import Segment;"
        "s = Segment.attach(sys.argv[1]); print(bytes(s.view(0, 5)).decode());"
        "s.view(0, 5)[:] = b'world'; s.close()"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, segment.name], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "hello"
    assert bytes(segment.view(0, 5)) == b"world"
    segment.close()


def test_memory_that_runs_out_is_a_clear_error(prefix, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(ShmExhausted) as info:
        Segment.create(f"{prefix}full", 1 << 20)
    assert "needed 1048576 bytes" in info.value.message
    assert "raise the memory limit" in info.value.message
    assert list(held_segments(prefix)) == []


def test_a_real_kernel_refusal_is_shm_exhausted(prefix):
    """A child process whose file-size limit (RLIMIT_FSIZE, which a memfd's fallocate obeys)
    is below what it asks: the kernel refuses, and the child sees ShmExhausted."""
    child = (
        "import resource, signal, sys; from pbd_wire.shm import Segment, ShmExhausted;"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN);"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20));"
        "\ntry:\n Segment.create(sys.argv[1], 8 << 20)\n"
        "except ShmExhausted as exc:\n print(exc.requested, 'Failed to increase' in exc.message)"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, f"{prefix}big"], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == [str(8 << 20), "True"]


def test_available_memory_is_what_meminfo_or_the_cgroup_allows():
    available = shm.available_memory()
    meminfo = Path("/proc/meminfo").read_text()
    mem_available = int(re.search(r"MemAvailable:\s+(\d+)", meminfo).group(1)) * 1024
    assert 0 < available <= mem_available * 1.5  # MemAvailable moves while we look


def test_a_segment_bigger_than_the_memory_left_is_refused_before_anything_is_reserved(prefix):
    """A memfd has no size limit of its own: asking the kernel for 32 TiB would wake the OOM
    killer (it did, in this suite, before this check). It is refused up front instead."""
    with pytest.raises(ShmExhausted) as info:
        Segment.create(f"{prefix}huge", 1 << 45)
    assert info.value.requested == 1 << 45
    assert 0 <= info.value.available < 1 << 45
    assert list(held_segments(prefix)) == []
