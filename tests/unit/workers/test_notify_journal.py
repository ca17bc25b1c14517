"""sd_notify messages on a real datagram socket, and journald-style log lines."""

from __future__ import annotations

import io
import logging
import os
import socket
from pathlib import Path

import pytest

from pbd_worker.journal import JournalFormatter, stderr_is_journal
from pbd_worker.notify import Notifier


def _environ(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in values.items():
        monkeypatch.setenv(key, value)


def test_notifier_sends_datagrams_to_notify_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        server.settimeout(10)
        _environ(
            monkeypatch,
            NOTIFY_SOCKET=path,
            WATCHDOG_USEC="4000000",
            WATCHDOG_PID=str(os.getpid()),
        )
        notifier = Notifier()
        try:
            assert notifier.enabled and notifier.watchdog_interval_s == 2.0
            notifier.ready("serving\nm")
            notifier.watchdog()
            notifier.stopping("bye")
        finally:
            notifier.close()
        got = [server.recv(4096).decode() for _ in range(3)]
    assert got == ["READY=1\nSTATUS=serving m", "WATCHDOG=1", "STOPPING=1\nSTATUS=bye"]


def test_notifier_without_socket_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    _environ(monkeypatch)
    notifier = Notifier()
    assert not notifier.enabled and notifier.watchdog_interval_s == 0.0
    notifier.ready("x")
    notifier.close()


def test_watchdog_for_another_pid_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(path)
        _environ(monkeypatch, NOTIFY_SOCKET=path, WATCHDOG_USEC="1000", WATCHDOG_PID="1")
        notifier = Notifier()
        assert notifier.watchdog_interval_s == 0.0
        notifier.close()


def test_journal_formatter_prefixes_every_line_with_the_priority() -> None:
    formatter = JournalFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("pbd", logging.ERROR, __file__, 1, "a\nb", None, None)
    assert formatter.format(record) == "<3>ERROR pbd: a\n<3>b"
    record = logging.LogRecord("pbd", logging.INFO, __file__, 1, "ok", None, None)
    assert formatter.format(record) == "<6>INFO pbd: ok"


def test_stderr_is_journal_compares_device_and_inode(tmp_path: Path) -> None:
    with open(tmp_path / "f", "w") as stream:
        st = os.fstat(stream.fileno())
        assert stderr_is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
        assert not stderr_is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
        assert not stderr_is_journal(stream, {})
    assert not stderr_is_journal(io.StringIO(), {"JOURNAL_STREAM": "1:2"})
