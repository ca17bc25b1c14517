"""Unpacking a packed environment: path escapes and special files are refused before
anything is written; a good archive lands complete or not at all."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pbd.execenv.archive import Progress, UnsafeArchive, check_member, extract_archive


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


@pytest.mark.parametrize(
    ("info", "why"),
    [
        (member("/etc/passwd"), "absolute path"),
        (member("../escape"), "'..' component"),
        (member("bin/../../escape"), "'..' component"),
        (member("lib/x", tarfile.SYMTYPE, "/usr/lib/x"), "points to an absolute path"),
        (member("lib/x", tarfile.SYMTYPE, "../../x"), "leaves the archive"),
        (member("x", tarfile.SYMTYPE, ".."), "leaves the archive"),
        (member("x", tarfile.LNKTYPE, "../outside"), "hard link"),
        (member("x", tarfile.LNKTYPE, "/etc/shadow"), "hard link"),
        (member("dev/null", tarfile.CHRTYPE), "device, FIFO"),
        (member("dev/sda", tarfile.BLKTYPE), "device, FIFO"),
        (member("pipe", tarfile.FIFOTYPE), "device, FIFO"),
    ],
)
def test_unsafe_members_are_refused(info: tarfile.TarInfo, why: str) -> None:
    with pytest.raises(UnsafeArchive, match=why):
        check_member(info)


@pytest.mark.parametrize(
    "info",
    [
        member("bin/python3"),
        member("./lib/python3.11/site.py"),
        member("lib", tarfile.DIRTYPE),
        member("bin/python", tarfile.SYMTYPE, "python3"),
        member("lib64", tarfile.SYMTYPE, "lib"),
        member("lib/a/b", tarfile.SYMTYPE, "../../bin/python3"),
        member("bin/python3.11", tarfile.LNKTYPE, "bin/python3"),
    ],
)
def test_ordinary_members_pass(info: tarfile.TarInfo) -> None:
    check_member(info)


def write_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return path


def test_a_good_archive_is_unpacked(tmp_path: Path) -> None:
    python = member("bin/python3")
    python.mode = 0o755
    archive = write_archive(
        tmp_path / "env.tar.gz",
        [(python, b"#!/bin/sh\n"), (member("bin/python", tarfile.SYMTYPE, "python3"), b"")],
    )
    destination = tmp_path / "cache" / "env"
    extract_archive(archive, destination)
    assert (destination / "bin" / "python3").read_bytes() == b"#!/bin/sh\n"
    assert (destination / "bin" / "python3").stat().st_mode & 0o100
    assert (destination / "bin" / "python").readlink() == Path("python3")


def test_an_unsafe_archive_writes_nothing(tmp_path: Path) -> None:
    archive = write_archive(
        tmp_path / "evil.tar.gz",
        [(member("bin/ok"), b"fine"), (member("../../escaped"), b"bad")],
    )
    destination = tmp_path / "cache" / "env"
    with pytest.raises(UnsafeArchive, match="'../../escaped'"):
        extract_archive(archive, destination)
    assert not destination.exists()
    assert list((tmp_path / "cache").iterdir()) == []
    assert not list(tmp_path.parent.glob("escaped"))


def test_not_an_archive(tmp_path: Path) -> None:
    bogus = tmp_path / "env.tar.gz"
    bogus.write_bytes(b"not a tar file at all")
    with pytest.raises(tarfile.TarError):
        extract_archive(bogus, tmp_path / "cache" / "env")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_packed_plain_venv_is_refused_with_what_works_instead() -> None:
    link = tarfile.TarInfo("./bin/python3")
    link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3.11"
    with pytest.raises(UnsafeArchive) as info:
        check_member(link)
    message = str(info.value)
    assert "points to an absolute path '/usr/bin/python3.11'" in message
    assert "conda pack" in message and "EXECUTION_ENV_PATH to the venv's directory" in message


def test_progress_is_reported_through_both_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pbd.execenv.archive as archive_module

    monkeypatch.setattr(archive_module, "PROGRESS_INTERVAL_S", 0.0)  # report on every read
    random = np.random.default_rng(7)
    files = [(member(f"lib/f{i}.bin"), random.bytes(100_000)) for i in range(40)]  # ~4 MB
    archive = write_archive(tmp_path / "big.tar.gz", files)
    reports: list[Progress] = []
    assert extract_archive(archive, tmp_path / "cache" / "env", reports.append) == 40
    checking = [p for p in reports if not p.extracting]
    extracting = [p for p in reports if p.extracting]
    assert len(checking) > 5 and len(extracting) > 5, reports
    assert all(p.size == archive.stat().st_size and p.members_total == 0 for p in checking)
    assert all(p.members_total == 40 for p in extracting)
    assert checking[-1].members >= 30 and extracting[-1].members >= 30
    percents = [p.percent for p in reports]
    assert percents == sorted(percents) and percents[0] < 10 and percents[-1] > 90
    assert checking[-1].percent <= 50 < extracting[-1].percent
    assert re.fullmatch(
        r"\d+%, extracting \(\d+ of 40 members, \d+\.\d MB of 4\.\d MB read\)",
        extracting[0].describe(),
    ), extracting[0].describe()
    assert re.fullmatch(
        r"\d+%, checking members \(\d+ so far, \d+\.\d MB of 4\.\d MB read\)",
        checking[0].describe(),
    ), checking[0].describe()
