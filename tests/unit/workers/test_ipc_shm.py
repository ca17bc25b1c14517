from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from pbd_wire import shm
from pbd_wire.client_region import RegionIdentity
from pbd_wire.shm import Arena, Segment, SegmentMap, ShmExhausted, align


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
    assert block.segment.name == f"{prefix}1"
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


def test_a_new_generation_of_a_client_region_replaces_the_old_mapping(prefix):
    arena = Arena(prefix, 4096, 4096)
    block = arena.allocate(16)
    peer = SegmentMap()
    name = block.segment.name
    st = os.stat(block.segment.path)
    for generation in range(1, 50):
        block.view()[:4] = generation.to_bytes(4, "little")
        region = RegionIdentity(name, generation, st.st_dev, st.st_ino).worker_name
        view = peer.view(region, block.offset, 4)
        assert int.from_bytes(view, "little") == generation
        del view
    assert list(peer.segments) == [region]
    peer.close()
    arena.close()


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


def test_full_dev_shm_is_a_clear_error_and_leaves_no_file(prefix, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(ShmExhausted) as info:
        Segment.create(f"{prefix}full", 1 << 20)
    assert "needed 1048576 bytes" in info.value.message
    assert "--shm-size" in info.value.message
    assert not os.path.exists(os.path.join(shm.SHM_DIR, f"{prefix}full"))


def test_real_tmpfs_exhaustion(tmp_path, prefix):
    """posix_fallocate on a tiny tmpfs fails with ENOSPC -> ShmExhausted (needs root+mount)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=1m tmpfs {mount_point} 2>/dev/null"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with pytest.raises(ShmExhausted) as info:
            Segment.create(f"{prefix}x", 8 << 20, shm_dir=str(mount_point))
        assert info.value.requested == 8 << 20
        assert 0 <= info.value.free <= 1 << 20
        assert os.listdir(mount_point) == []
    finally:
        os.system(f"umount {mount_point}")


def test_the_segments_of_one_instance_are_removed_and_its_neighbours_kept(prefix):
    base, neighbour = f"{prefix}7", f"{prefix}70"
    made = [
        Segment.create(f"{base}{shm.INPUT_ARENA}0", 4096),
        Segment.create(f"{base}{shm.OUTPUT_ARENA}0", 4096),
        Segment.create(f"{base}{shm.CANCEL_PAGE}", 4096),
        Segment.create(f"{neighbour}{shm.OUTPUT_ARENA}0", 4096),
    ]
    made[1].view(0, 4)[:] = b"kept"
    removed = shm.remove_instance_segments(base)
    assert sorted(removed) == sorted(s.name for s in made[:3])
    assert made[1].view(0, 4) == b"kept"  # a mapping outlives its name
    assert os.path.exists(made[3].path)
    assert shm.remove_instance_segments(base) == []
    for segment in made:
        segment.close()
