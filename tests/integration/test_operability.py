"""What an operator sees: failed executes in the log at the default level, versions still
loading in the repository index, and a client's error text without pbd's own frames."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pbd_harness import (
    EXAMPLE_MODELS,
    ROOT,
    TEST_MODELS,
    DaemonFactory,
    error_of,
    infer_input,
    make_repository,
    running_daemon,
    wait_until,
)

FAILURES = 3
# A log record's first line: "<date> <time> LEVEL logger: message".
_RECORD = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) ", re.MULTILINE)


def records(log: str, level: str) -> list[str]:
    """The first lines of the log's records at ``level``."""
    return [
        log[m.start() : log.find("\n", m.start())]
        for m in _RECORD.finditer(log)
        if m.group(1) == level
    ]


def test_failed_executes_logged_once_each_without_pbd_frames_for_the_client(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"raise_in_execute": TEST_MODELS / "raise_in_execute"})
    daemon = start_daemon(repo, settle=["raise_in_execute"])
    client = daemon.client()
    bad = [infer_input("INPUT0", np.array([-1], dtype=np.int32), "INT32")]
    for _ in range(FAILURES):
        message = error_of(lambda: client.infer("raise_in_execute", bad)).message()
    # The model's frame, none of pbd's, and no path of pbd's install.
    assert "model.py" in message
    assert "pbd_worker" not in message and "executor.py" not in message, message
    assert str(ROOT / "workers") not in message

    def logged() -> list[str]:
        return [r for r in records(daemon.log(), "ERROR") if "execute failed" in r]

    lines = wait_until(lambda: len(logged()) == FAILURES and logged(), 30, "the ERROR lines")
    for line in lines:
        assert "instance 'raise_in_execute_0_0' of model 'raise_in_execute' version 1" in line
        assert "boom from execute" in line
    # The full traceback (pbd's frames too) is in the log for whoever debugs it.
    assert "pbd_worker" in daemon.log()


def test_loading_versions_are_in_the_index_with_what_they_wait_for(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    daemon = start_daemon(repo)

    def loading() -> object:
        entry = daemon.index().get(("gated", "1"))
        return entry if entry is not None and entry.state == "LOADING" else None

    try:
        entry = wait_until(loading, 60, "gated to be LOADING in the index")
        assert "initialize()" in entry.reason
        status = subprocess.run(
            [sys.executable, "-m", "pbd", "status", "--url", daemon.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert re.search(r"gated\s+1\s+LOADING\s+.*initialize\(\)", status), status
        assert re.search(r"INFO \S+: loading model 'gated'", daemon.log()), daemon.log_tail()
    finally:
        hold.unlink()
    daemon.wait_settled(["gated"])
    assert daemon.index()[("gated", "1")].state == "READY"
    assert re.search(r"loaded model 'gated' versions \[1\] in \d+\.\d+s", daemon.log())


def test_sigterm_while_a_model_is_in_initialize_stops_it_and_exits(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    (repo / "gated" / "hold_initialize").write_text("")  # never removed: initialize() hangs
    daemon = start_daemon(repo, "--exit-timeout-secs", "1")
    wait_until(
        lambda: (
            daemon.index().get(("gated", "1"), None) is not None
            and daemon.index()[("gated", "1")].state == "LOADING"
            and daemon.workers_of("gated")
        ),
        60,
        "gated's worker to be in initialize()",
    )
    # The harness waits STOP_TIMEOUT_S at most; the hung initialize() holds the worker for
    # 300 s, so only stopping the instance ends the daemon in time. Clean exit is checked too.
    daemon.assert_clean_exit()
    assert re.search(r"still loading .*gated", daemon.log()), daemon.log_tail()


def _notified(sock: socket.socket, wanted: Callable[[str], bool], timeout_s: float) -> str:
    """The first sd_notify datagram on ``sock`` that ``wanted`` accepts."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            message = sock.recv(65536).decode()
        except TimeoutError:
            break
        if wanted(message):
            return message
        seen.append(message)
    raise AssertionError(f"no such sd_notify message in {timeout_s:g}s; got {seen}")


def test_status_while_loading_says_what_each_model_does(tmp_path: Path) -> None:
    repo = make_repository(tmp_path, {"gated": TEST_MODELS / "gated"})
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}  # workers send theirs too
        with running_daemon(repo, tmp_path, env=env):
            try:
                _notified(
                    sock,
                    lambda m: "STATUS=loading 1 model version(s): gated (initialize() of 1 " in m,
                    60,
                )
            finally:
                hold.unlink()
            ready = _notified(sock, lambda m: "READY=1" in m and "model version(s)" in m, 120)
            assert "STATUS=1 model version(s) ready, 1/1 instances ready" in ready, ready


def test_ready_comes_after_the_startup_wait_with_a_model_still_loading(tmp_path: Path) -> None:
    """A hung initialize() does not hold READY=1 (`systemctl start pbd`) for
    --model-init-timeout-secs: after --startup-wait-secs the daemon reports ready, STATUS=
    naming what still loads and for how long, and serves the models that loaded."""
    repo = make_repository(
        tmp_path, {"gated": TEST_MODELS / "gated", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    hold = repo / "gated" / "hold_initialize"
    hold.write_text("")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}
        with running_daemon(repo, tmp_path, "--startup-wait-secs", "2", env=env) as daemon:
            try:
                ready = _notified(sock, lambda m: "READY=1" in m and "model version(s)" in m, 60)
                assert re.search(
                    r"STATUS=loading 1 model version\(s\): gated \(initialize\(\) of 1 "
                    r"instance\(s\), \d+ s\); 1 model version\(s\) ready",
                    ready,
                ), ready
                assert daemon.index()[("gated", "1")].state == "LOADING"
                assert daemon.control().is_model_ready("add_sub")
                assert "still loading after 2s (--startup-wait-secs): gated" in daemon.log()
            finally:
                hold.unlink()
            daemon.wait_settled(["gated"])
            assert daemon.control().is_model_ready("gated")


def test_two_workers_printing_at_once_write_whole_prefixed_lines(
    start_daemon: DaemonFactory, tmp_path: Path
) -> None:
    repo = make_repository(tmp_path, {"chatty": TEST_MODELS / "chatty"})
    (repo / "chatty" / "print_lines").write_text("")
    daemon = start_daemon(repo, settle=["chatty"])
    assert daemon.index()[("chatty", "1")].state == "READY"
    short = re.compile(r"\[chatty/1/(chatty_0_[01])\] chatty-line \1 \d+ x{3000} end")
    piece = re.compile(r"\[chatty/1/(chatty_0_[01])\] ((?:chatty-long \1 \d+ )?y+(?: end)?)")
    printed = {"chatty_0_0": 0, "chatty_0_1": 0}
    long_text = {"chatty_0_0": "", "chatty_0_1": ""}
    log = daemon.log()
    assert not re.search(r"^\[chatty/1/chatty_0_\d\] $", log, re.MULTILINE)  # no empty lines
    for line in log.splitlines():
        if "x" * 20 in line:
            match = short.fullmatch(line)
            assert match, f"not a whole line of one worker: {line[:200]}...{line[-100:]}"
            printed[match.group(1)] += 1
        elif "y" * 20 in line:
            match = piece.fullmatch(line)
            assert match, f"not a whole line of one worker: {line[:200]}...{line[-100:]}"
            assert len(line) < 4096  # cut to fit one atomic write
            long_text[match.group(1)] += match.group(2)
    assert printed == {"chatty_0_0": 300, "chatty_0_1": 300}
    for name, text in long_text.items():  # the long lines, cut into pieces, lose nothing
        assert text == "".join(f"chatty-long {name} {i} " + "y" * 10_000 + " end" for i in range(3))
