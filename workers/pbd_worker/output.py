"""A worker's stdout and stderr: whole lines, each starting with the worker's instance.

Under the process launcher every worker writes into the daemon's stdout and stderr. Python's
own streams cut a line into several write()s (print() writes its text and its end apart, a full
buffer goes out mid-line), so two workers printing at once interleave on one line, and nothing
says which model printed what. Here every line goes out in a write() of at most ``PIPE_BUF``
bytes, which a pipe (and a file, on Linux) keeps whole among other writers; a longer line is
cut into several, each with the prefix. A line is held until its newline, or until the model
flushes (``print(..., flush=True)``): an unfinished line is then ended there. Output that
bypasses Python (a C library writing to file descriptor 1) is not covered.
"""

from __future__ import annotations

import io
import os
import select
import sys
import threading

PIPE_BUF = select.PIPE_BUF


class LineWriter(io.TextIOBase):
    """A text stream onto file descriptor ``fd`` that writes whole, prefixed lines."""

    encoding = "utf-8"
    errors = "backslashreplace"

    def __init__(self, fd: int, prefix: str = "") -> None:
        super().__init__()
        self._fd = fd
        self._prefix = prefix.encode(self.encoding, self.errors)
        self._room = PIPE_BUF - len(self._prefix) - 1  # bytes of text per written line
        if self._room < 64:
            raise ValueError(f"prefix too long for whole-line writes: {prefix!r}")
        self._partial = ""
        # The line being written was sent before its newline came (too long, or flushed): that
        # newline only ends it, it is no empty line of its own.
        self._sent_early = False
        self._lock = threading.Lock()  # models print from threads of their own

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, text: str) -> int:
        if not text:
            return 0
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            if self._sent_early and lines and not lines[0]:
                del lines[0]
            self._sent_early = False
            if len(self._partial) > self._room:  # a line without end: do not hold it all
                lines.append(self._partial)
                self._partial, self._sent_early = "", True
            if lines:
                self._send(lines)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            if self._partial:
                self._send([self._partial])
                self._partial, self._sent_early = "", True

    def _send(self, lines: list[str]) -> None:
        pieces = [piece for line in lines for piece in self._cut(line)]
        batch = b""
        for piece in pieces:
            if len(batch) + len(piece) > PIPE_BUF:
                _write_all(self._fd, batch)
                batch = b""
            batch += piece
        _write_all(self._fd, batch)

    def _cut(self, line: str) -> list[bytes]:
        """``line`` as prefixed, newline-ended pieces of at most PIPE_BUF bytes each, cut
        between characters."""
        data = line.encode(self.encoding, self.errors)
        pieces = []
        while True:
            end = min(len(data), self._room)
            while end < len(data) and data[end] & 0xC0 == 0x80:  # inside a UTF-8 character
                end -= 1
            pieces.append(self._prefix + data[:end] + b"\n")
            data = data[end:]
            if not data:
                return pieces

    @property
    def unprefixed(self) -> LineWriter:
        """The same descriptor, whole lines without the prefix: for log records, which name
        the instance themselves."""
        return LineWriter(self._fd)

    @property
    def buffer(self) -> _BytesWriter:
        """Some libraries write bytes to ``sys.stdout.buffer``."""
        return _BytesWriter(self)


class _BytesWriter:
    def __init__(self, text: LineWriter) -> None:
        self.text = text

    def write(self, data: bytes) -> int:
        self.text.write(bytes(data).decode(LineWriter.encoding, LineWriter.errors))
        return len(data)

    def flush(self) -> None:
        self.text.flush()


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def install(instance: str) -> None:
    """Make the worker's ``print()`` and stderr output whole lines, prefixed ``[instance]``."""
    sys.stdout = LineWriter(1, f"[{instance}] ")
    sys.stderr = LineWriter(2, f"[{instance}] ")
