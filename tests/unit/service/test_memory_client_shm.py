"""The system shared-memory registry refuses keys that lead anywhere but a client's own file,
and workers map only the file the daemon registered (issue 18, findings 1, 2 and 7)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pbd.errors import Code, PbdError
from pbd.memory.client_shm import ClientShmRegistry
from pbd_wire.client_region import RegionRefused
from pbd_wire.shm import SegmentMap


@pytest.fixture
def registry(tmp_path: Path) -> ClientShmRegistry:
    return ClientShmRegistry(
        enabled=True, key_prefixes=[], shm_dir=str(tmp_path / "shm")
    )


@pytest.fixture
def shm_dir(registry: ClientShmRegistry) -> Path:
    path = Path(registry.shm_dir)
    path.mkdir()
    return path


def _refused(registry: ClientShmRegistry, key: str, offset: int = 0, size: int = 16) -> PbdError:
    with pytest.raises(PbdError) as caught:
        registry.register("r", key, offset, size)
    assert "r" not in registry.regions
    return caught.value


def test_a_symbolic_link_is_refused(registry: ClientShmRegistry, shm_dir: Path, tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * 64)
    (shm_dir / "k").symlink_to(secret)
    err = _refused(registry, "/k")
    assert err.code is Code.INTERNAL
    assert err.message == "Unable to open shared memory region: '/k' (a symbolic link)"


def test_a_hard_link_a_directory_and_a_fifo_are_refused(registry: ClientShmRegistry, shm_dir: Path):
    (shm_dir / "own").write_bytes(bytes(64))
    os.link(shm_dir / "own", shm_dir / "alias")
    assert "2 links" in _refused(registry, "/alias").message
    (shm_dir / "dir").mkdir()
    assert "Unable to open" in _refused(registry, "/dir").message
    os.mkfifo(shm_dir / "fifo")
    assert "not a regular file" in _refused(registry, "/fifo").message


def test_a_segment_of_another_user_is_refused(registry: ClientShmRegistry, shm_dir: Path):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    (shm_dir / "theirs").write_bytes(bytes(64))
    os.chown(shm_dir / "theirs", 12345, 12345)
    err = _refused(registry, "/theirs")
    assert err.code is Code.INTERNAL and "owned by uid 12345" in err.message


@pytest.mark.parametrize("key", [".", "..", "/.", "/..", "a/b", "/"])
def test_keys_that_are_not_one_file_name_are_refused(
    registry: ClientShmRegistry, shm_dir: Path, key: str
):
    err = _refused(registry, key)
    assert err.code is Code.INVALID_ARG and f"invalid shm key '{key}'" in err.message


@pytest.mark.parametrize("key", ["/pbd-anything", "/pbd-123x0a0b0c-0-d0", "/other-99xff-3-w12"])
def test_a_key_named_like_a_pbd_segment_is_only_a_client_file(
    registry: ClientShmRegistry, shm_dir: Path, key: str
):
    """pbd's own segments are memfds, in no directory: a key shaped like one of their names
    names the client's own file, which registers as any other."""
    (shm_dir / key.lstrip("/")).write_bytes(bytes(64))
    registry.register("r", key, 0, 64)
    assert [r.name for r in registry.system_regions()] == ["r"]


@pytest.mark.parametrize(("offset", "size", "field"), [(-100, 16, "offset"), (0, -1, "byte_size")])
def test_negative_offsets_and_sizes_are_refused(
    registry: ClientShmRegistry, shm_dir: Path, offset: int, size: int, field: str
):
    (shm_dir / "k").write_bytes(bytes(64))
    err = _refused(registry, "/k", offset, size)
    assert err.code is Code.INVALID_ARG and f"{field} must not be negative" in err.message


def test_the_worker_maps_only_the_file_that_was_registered(
    registry: ClientShmRegistry, shm_dir: Path, tmp_path: Path
):
    (shm_dir / "k").write_bytes(b"a" * 64)
    registry.register("r", "/k", 0, 64)
    worker_name = registry.regions["r"].worker_name  # type: ignore[union-attr]
    peer = SegmentMap(str(shm_dir))
    assert bytes(peer.view(worker_name, 0, 4)) == b"aaaa"
    peer.close()
    # The client (or anyone able to write the directory) swaps the key for a link.
    (shm_dir / "k").unlink()
    (tmp_path / "target").write_bytes(b"t" * 64)
    (shm_dir / "k").symlink_to(tmp_path / "target")
    with pytest.raises(RegionRefused, match="symbolic link"):
        SegmentMap(str(shm_dir)).view(worker_name, 0, 4)
    (shm_dir / "k").unlink()
    (shm_dir / "k").write_bytes(b"b" * 64)  # another file under the same name
    with pytest.raises(RegionRefused, match="replaced after it was registered"):
        SegmentMap(str(shm_dir)).view(worker_name, 0, 4)


def test_a_held_unregister_keeps_the_name_taken_until_released(
    registry: ClientShmRegistry, shm_dir: Path
) -> None:
    """What front ends may still use: unregistered, listed by no new request, its name still
    taken until the holder releases it; an unregister without a hold removes at once."""
    (shm_dir / "a").write_bytes(bytes(64))
    registry.register("r", "/a", 0, 64)
    registry.register("s", "/a", 0, 32)
    (held,) = registry.unregister("r", held=True)
    assert held.name == "r" and held.awaiting_unregister
    with pytest.raises(PbdError) as taken:
        registry.register("r", "/a", 0, 64)
    assert taken.value.code is Code.ALREADY_EXISTS
    with pytest.raises(PbdError) as gone:
        registry.acquire("r", 0, 16)
    assert gone.value.message == "Unable to find shared memory region: 'r'"
    assert registry.unregister("r", held=True) == []  # already going: no second hold
    registry.release(held)
    registry.register("r", "/a", 0, 64)
    assert registry.unregister("s") == [] and "s" not in registry.regions
