"""Model upload: every path checked before a byte is written, nothing written through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pbd.errors import Code, PbdError
from pbd.repository.upload import UploadLimits, Uploads, _write, check_upload, upload_parts

LIMITS = UploadLimits(max_bytes=100, max_files=3)


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("file:", "the path is empty"),
        ("file://etc/passwd", "the path has an empty part"),
        ("file:../x", "the path has '..'"),
        ("file:1/../../x", "the path has '..'"),
        ("file:1/./model.py", "the path has '.'"),
        ("file:1//model.py", "the path has an empty part"),
        ("file:1/", "the path has an empty part"),
        ("file:1/a\0b", "NUL"),
        ("file:1\\..\\x", "backslash"),
        ("file:1/" + "x" * 256, "longer than 255 bytes"),
        ("file:" + "/".join(["d" * 200] * 21), "longer than 4096 bytes"),
    ],
)
def test_paths_that_could_leave_the_directory_are_refused(key: str, why: str) -> None:
    with pytest.raises(PbdError) as info:
        upload_parts("m", key)
    assert info.value.code is Code.INTERNAL  # Triton's code for a bad file parameter
    message = info.value.message
    assert message.startswith("failed to load 'm', failed to poll from model repository")
    assert why in message


def test_relative_paths_are_their_parts() -> None:
    assert upload_parts("m", "file:1/model.py") == ("1", "model.py")
    # One leading '/' is the model directory, as Triton reads it: confined like the rest.
    assert upload_parts("m", "file:/1/model.py") == ("1", "model.py")
    assert upload_parts("m", "file:/etc/passwd") == ("etc", "passwd")
    assert upload_parts("m", "file:config.pbtxt") == ("config.pbtxt",)


def test_too_many_files_or_bytes() -> None:
    many = {f"file:1/f{i}": b"" for i in range(4)}
    with pytest.raises(PbdError, match=r"4 files, more than --model-upload-max-files \(3\)"):
        check_upload("m", many, LIMITS)
    big = {"file:1/a": b"x" * 60, "file:1/b": b"x" * 41}
    with pytest.raises(PbdError, match=r"101 bytes, more than --model-upload-max-bytes \(100\)"):
        check_upload("m", big, LIMITS)


def test_a_file_cannot_also_be_a_directory() -> None:
    with pytest.raises(PbdError, match="'file:1': it is also a directory"):
        check_upload("m", {"file:1": b"", "file:1/model.py": b""}, LIMITS)


def test_stage_writes_a_private_fresh_directory(tmp_path: Path) -> None:
    uploads = Uploads(str(tmp_path), LIMITS)
    files = {"file:1/model.py": b"code", "file:1/data/w.bin": b"\x00\x01"}
    first = uploads.stage("m", files)
    second = uploads.stage("m", files)
    assert first != second and first.name == second.name == "m"
    assert (first / "1" / "model.py").read_bytes() == b"code"
    assert (first / "1" / "data" / "w.bin").read_bytes() == b"\x00\x01"
    assert stat.S_IMODE(os.stat(first.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(first / "1" / "model.py").st_mode) == 0o600
    uploads.remove(first)
    assert not first.parent.exists() and second.exists()
    uploads.remove(tmp_path / "repository" / "m")  # not an upload: left alone
    uploads.close()
    assert not any(tmp_path.iterdir())


def test_nothing_is_written_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "1").symlink_to(outside)
    (model_dir / "model.py").symlink_to(outside / "target.py")
    with pytest.raises(OSError):
        _write(model_dir, ("1", "model.py"), b"x")
    with pytest.raises(OSError):
        _write(model_dir, ("model.py",), b"x")
    assert not any(outside.iterdir())


def test_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uploads = Uploads(str(tmp_path), LIMITS)
    written: list[tuple[str, ...]] = []

    def write_then_fail(model_dir: Path, parts: tuple[str, ...], data: bytes) -> None:
        if written:
            raise OSError(28, "No space left on device")
        _write(model_dir, parts, data)
        written.append(parts)

    monkeypatch.setattr("pbd.repository.upload._write", write_then_fail)
    with pytest.raises(PbdError, match="writing the upload failed: .*No space left"):
        uploads.stage("m", {"file:1/model.py": b"", "file:1/b": b""})
    assert written and uploads.root is not None and not any(uploads.root.iterdir())
