"""A worker's stdout and stderr: every line whole, prefixed, in writes a pipe keeps whole."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pbd_worker.output import PIPE_BUF, LineWriter

PREFIX = "[m/1/m_0] "


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def pending(fd: int) -> bytes:
    """What is in the pipe now."""
    try:
        return os.read(fd, 1 << 20)
    except BlockingIOError:
        return b""


def test_print_pieces_become_one_prefixed_line(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    out = LineWriter(write_end, PREFIX)
    print("hello", "world", file=out)  # four write() calls on the stream
    assert pending(read_end) == b"[m/1/m_0] hello world\n"
    out.write("no end yet")
    assert pending(read_end) == b""  # held until its newline
    out.write(" ... done\nnext\n")
    assert pending(read_end) == b"[m/1/m_0] no end yet ... done\n[m/1/m_0] next\n"
    out.write("progress 10%")
    out.flush()  # a flush ends the line...
    assert pending(read_end) == b"[m/1/m_0] progress 10%\n"
    out.write("\n")  # ...and the newline after it adds no empty line
    assert pending(read_end) == b""
    out.write("\n")
    assert pending(read_end) == b"[m/1/m_0] \n"


def test_a_long_line_is_cut_into_whole_prefixed_lines(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    out = LineWriter(write_end, PREFIX)
    text = "é" * 5000  # 10,000 bytes; no character may be cut in two
    out.write(text + "\n")
    data = pending(read_end)
    lines = data.decode().split("\n")[:-1]
    assert len(lines) == 3
    for line in lines:
        assert line.startswith(PREFIX) and len(line.encode()) + 1 <= PIPE_BUF
    assert "".join(line[len(PREFIX) :] for line in lines) == text


def test_every_write_fits_pipe_buf(pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes) -> int:
        sizes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    read_end, write_end = pipe
    out = LineWriter(write_end, PREFIX)
    out.write("".join(f"line {i} " + "z" * 300 + "\n" for i in range(40)) + "w" * 9000)
    assert sizes and max(sizes) <= PIPE_BUF
    data = pending(read_end)
    assert all(line.startswith(PREFIX.encode()) for line in data.split(b"\n")[:-1])


def test_log_records_and_bytes(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    out = LineWriter(write_end, PREFIX)
    out.unprefixed.write("2024-01-01 INFO [m/1/m_0] pbd_worker: hi\n")
    assert pending(read_end) == b"2024-01-01 INFO [m/1/m_0] pbd_worker: hi\n"
    out.buffer.write(b"raw bytes\n")
    assert pending(read_end) == b"[m/1/m_0] raw bytes\n"
    assert out.fileno() == write_end and out.writable()
