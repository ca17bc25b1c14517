"""pbd under a real (private) systemd: units, sd_notify, crashes, re-adoption, shutdown.

Each test boots its own systemd as PID 1 of new PID/mount/UTS/IPC namespaces (see
private_systemd.py), installs pbd with `pbd install-units` and drives it with systemctl and
the real tritonclient over 127.0.0.1. The finalizer kills that PID 1, pass or fail.
"""

from __future__ import annotations

import queue
import re

import numpy as np
import tritonclient.grpc as grpcclient
from conftest import INTEGRATION_MODELS, MODELS, make_repository, shm_prefix
from pbd_units import INSIDE, PbdUnits, counted, initialize_count, wait_until
from private_systemd import PrivateSystemd
from tritonclient.utils import InferenceServerException

SLEEPY_UNITS = ["pbd-worker@sleepy-1-sleepy_0_0.service", "pbd-worker@sleepy-1-sleepy_0_1.service"]
COUNTED_UNIT = "pbd-worker@counted-1-counted_0_0.service"


def _sleepy_inputs(ms: int, marker: str | None) -> list[grpcclient.InferInput]:
    delay = grpcclient.InferInput("DELAY_MS", [1], "INT32")
    delay.set_data_from_numpy(np.array([ms], dtype=np.int32))
    inputs = [delay]
    if marker is not None:
        m = grpcclient.InferInput("MARKER", [1], "BYTES")
        m.set_data_from_numpy(np.array([marker.encode()], dtype=np.object_))
        inputs.append(m)
    return inputs


def test_shipped_units_verify(private_systemd: PrivateSystemd) -> None:
    from pbd.systemd.units import SHIPPED_DIR

    for name in ("pbd.service", "pbd-worker@.service"):
        private_systemd.run("cp", str(SHIPPED_DIR / name), f"/run/systemd/system/{name}")
    private_systemd.systemctl("daemon-reload")
    result = private_systemd.run(
        "systemd-analyze",
        "verify",
        "/run/systemd/system/pbd.service",
        "/run/systemd/system/pbd-worker@.service",
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pbd" not in result.stderr, result.stderr  # no warnings about our units either


def test_lifecycle_under_systemd(private_systemd: PrivateSystemd) -> None:
    systemd = private_systemd
    make_repository(
        systemd.shared,
        {"counted": MODELS / "counted", "sleepy": INTEGRATION_MODELS / "sleepy"},
        {"sleepy": ("count: 1", "count: 2")},
    )
    pbd = PbdUnits(systemd, shm_prefix())
    try:
        pbd.install()
        # The start job returns only after READY=1: the port is bound and models are loaded.
        systemd.systemctl("start", "pbd.service")
        client = pbd.client()
        assert client.is_server_ready()
        assert client.is_model_ready("counted") and client.is_model_ready("sleepy")
        status = systemd.show("pbd.service", "StatusText", "ActiveState")
        assert status["ActiveState"] == "active"
        assert "3/3 instances ready" in status["StatusText"], status
        assert pbd.worker_units() == sorted([COUNTED_UNIT, *SLEEPY_UNITS])
        for unit in pbd.worker_units():
            shown = systemd.show(unit, "StatusText", "Slice")
            assert shown["StatusText"].startswith("serving "), shown
            assert shown["Slice"] == f"pbd-{unit.split('@')[1].split('-')[0]}.slice", shown
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        assert initialize_count(systemd) == 1

        # A worker killed by systemd mid-request: only its requests fail.
        results: queue.Queue[tuple[int, object]] = queue.Queue()
        markers = [INSIDE / "markers" / f"m{i}" for i in range(4)]
        for i in range(4):
            client.async_infer(
                "sleepy",
                _sleepy_inputs(3000, str(markers[i])),
                lambda result, error, i=i: results.put((i, error or result)),
            )
        executing = systemd.shared / "markers"
        wait_until(lambda: len(list(executing.iterdir())) >= 2, 60, "two requests executing")
        victim = SLEEPY_UNITS[0]
        old_pid = pbd.main_pid(victim)
        systemd.systemctl("kill", "-s", "KILL", victim)
        outcomes = [results.get(timeout=60) for _ in range(4)]
        failures = [o for _, o in outcomes if isinstance(o, InferenceServerException)]
        successes = [o for _, o in outcomes if not isinstance(o, InferenceServerException)]
        assert 1 <= len(failures) <= 2, outcomes  # at most the pipeline depth of that worker
        for failure in failures:
            assert failure.status() == "StatusCode.UNAVAILABLE", failure
            assert "killed by signal 9 (SIGKILL)" in failure.message(), failure.message()
            assert victim in failure.message(), failure.message()
        for success in successes:
            assert success.as_numpy("SLEPT_MS").tolist() == [3000]
        # systemd restarts the unit (Restart=on-failure); the daemon re-attaches to it.
        wait_until(
            lambda: (
                systemd.show(victim, "NRestarts", "ActiveState")
                == {"NRestarts": "1", "ActiveState": "active"}
            ),
            60,
            f"{victim} restarted by systemd",
        )
        assert pbd.main_pid(victim) != old_pid
        wait_until(
            lambda: (
                "3/3 instances ready" in systemd.show("pbd.service", "StatusText")["StatusText"]
            ),
            60,
            "the daemon to count the restarted instance as ready",
        )
        for _ in range(4):  # both instances serve again
            result = client.infer("sleepy", _sleepy_inputs(1, None))
            assert result.as_numpy("SLEPT_MS").tolist() == [1]

        # `systemctl restart pbd`: the instances keep running and are not re-initialized.
        pids = {unit: pbd.main_pid(unit) for unit in pbd.worker_units()}
        daemon_pid = pbd.main_pid("pbd.service")
        systemd.systemctl("restart", "pbd.service")
        assert pbd.main_pid("pbd.service") != daemon_pid
        after = {unit: pbd.main_pid(unit) for unit in pbd.worker_units()}
        assert after == pids, systemd.journal("-u", "pbd*", "-o", "short-monotonic")[-20000:]
        assert initialize_count(systemd) == 1
        assert pbd.daemon_log().count("without re-initializing") == 3, pbd.daemon_log()
        # The old daemon said so: its models' instances were let go, not unloaded.
        log = pbd.daemon_log()
        assert "unloaded model" not in log, log
        assert "its instances keep running for the next daemon" in log, log
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        for _ in range(4):
            assert client.infer("sleepy", _sleepy_inputs(1, None)).as_numpy(
                "SLEPT_MS"
            ).tolist() == [1]

        # `systemctl stop pbd` stops every instance and leaves no shared memory behind.
        systemd.systemctl("stop", "pbd.service")
        assert pbd.worker_units("active,activating,deactivating") == []
        assert pbd.shm_segments() == []
        assert systemd.show("pbd.service", "ActiveState")["ActiveState"] == "inactive"
        log = pbd.daemon_log()
        assert re.search(r"Traceback", log) is None, log
    finally:
        pbd.close()


def test_initialize_failure_is_a_failed_unit(private_systemd: PrivateSystemd) -> None:
    systemd = private_systemd
    make_repository(
        systemd.shared,
        {"counted": MODELS / "counted", "fail_initialize": INTEGRATION_MODELS / "fail_initialize"},
    )
    pbd = PbdUnits(systemd, shm_prefix())
    try:
        pbd.install()
        systemd.systemctl("start", "pbd.service")
        client = pbd.client()
        unit = "pbd-worker@fail_initialize-1-fail_initialize_0_0.service"
        shown = systemd.show(unit, "ActiveState", "Result", "ExecMainStatus", "NRestarts")
        assert shown == {
            "ActiveState": "failed",
            "Result": "exit-code",
            "ExecMainStatus": "3",  # RestartPreventExitStatus=: not restarted
            "NRestarts": "0",
        }, shown
        assert not client.is_model_ready("fail_initialize")
        index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["fail_initialize"].state == "UNAVAILABLE"
        assert "init exploded" in index["fail_initialize"].reason
        assert client.is_model_ready("counted")
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        assert systemd.show(unit, "NRestarts")["NRestarts"] == "0"
        # systemd's view says what failed, and why: STATUS, the ready line, the unit's journal.
        status = systemd.show("pbd.service", "StatusText")["StatusText"]
        assert status.startswith("1 model version(s) ready, 1/1 instances ready"), status
        assert "; 1 failed: fail_initialize (Internal: initialize() failed: " in status, status
        assert "init exploded" in status, status
        assert re.search(
            r"pbd ready: 1 of 2 model version\(s\) loaded; failed: fail_initialize "
            r"\(Internal: initialize\(\) failed: .*init exploded",
            pbd.daemon_log(),
        ), pbd.daemon_log()
        worker_journal = systemd.journal("-u", unit)
        assert "initialize() failed: " in worker_journal, worker_journal
        assert "init exploded" in worker_journal, worker_journal
        systemd.systemctl("stop", "pbd.service")
        assert pbd.shm_segments() == []
        # Stopped for good: no failed instance unit is left behind.
        assert pbd.worker_units("failed") == []
        assert systemd.show(unit, "ActiveState")["ActiveState"] == "inactive"
    finally:
        pbd.close()


def test_crash_loop_hits_the_start_limit(private_systemd: PrivateSystemd) -> None:
    systemd = private_systemd
    make_repository(
        systemd.shared,
        {"counted": MODELS / "counted", "crash_on_execute": MODELS / "crash_on_execute"},
    )
    pbd = PbdUnits(systemd, shm_prefix())
    unit = "pbd-worker@crash_on_execute-1-crash_on_execute_0_0.service"
    try:
        pbd.install()
        systemd.systemctl("start", "pbd.service")
        client = pbd.client()
        inp = grpcclient.InferInput("INPUT0", [1], "FP32")
        inp.set_data_from_numpy(np.ones(1, np.float32))
        messages = []
        # Each request kills the worker; systemd restarts it until StartLimitBurst=5 starts
        # in 60 s (the daemon adds no starts of its own while systemd restarts the unit).
        for _ in range(8):
            try:
                client.infer("crash_on_execute", [inp], client_timeout=60)
            except InferenceServerException as exc:
                messages.append((exc.status(), exc.message()))
        assert 5 <= len(messages) <= 8, messages
        crashes = [m for s, m in messages if "exited with status 17" in m]
        assert len(crashes) == 5, messages  # initial start + 4 restarts
        for status, _message in messages:
            assert status in ("StatusCode.UNAVAILABLE", "StatusCode.NOT_FOUND"), messages
        assert f"(unit {unit}" in crashes[0], crashes[0]
        # Five restarts scheduled; the fifth was refused by the start limit.
        assert systemd.show(unit, "NRestarts", "ActiveState") == {
            "NRestarts": "5",
            "ActiveState": "failed",
        }
        # The daemon gives up on the instance with systemd's reason; others keep serving.
        wait_until(lambda: not client.is_model_ready("crash_on_execute"), 120, "not ready")
        index = {m.name: m for m in client.get_model_repository_index().models}
        reason = index["crash_on_execute"].reason
        assert "start limit is reached (StartLimitBurst=5 starts in" in reason, reason
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        systemd.systemctl("stop", "pbd.service")
        assert pbd.shm_segments() == []
    finally:
        pbd.close()


def test_wedged_daemon_is_restarted_by_the_watchdog(private_systemd: PrivateSystemd) -> None:
    systemd = private_systemd
    make_repository(systemd.shared, {"counted": MODELS / "counted"})
    pbd = PbdUnits(systemd, shm_prefix())
    try:
        pbd.install()
        pbd.dropin("pbd.service", "[Service]\nWatchdogSec=3\nRestartSec=0.5\n")
        systemd.systemctl("start", "pbd.service")
        worker_pid = pbd.main_pid(COUNTED_UNIT)
        daemon_pid = pbd.main_pid("pbd.service")
        # Freeze the daemon: its event loop sends no WATCHDOG=1; systemd kills and restarts it.
        systemd.run("kill", "-STOP", str(daemon_pid))
        wait_until(
            lambda: (
                systemd.show("pbd.service", "NRestarts", "ActiveState")
                == {"NRestarts": "1", "ActiveState": "active"}
            ),
            60,
            "the watchdog restart of pbd",
        )
        assert "watchdog timeout" in systemd.journal("-u", "pbd.service").lower()
        # The instance outlived the crashed daemon and was adopted by the new one.
        assert pbd.main_pid(COUNTED_UNIT) == worker_pid
        assert initialize_count(systemd) == 1
        client = pbd.client()
        wait_until(lambda: client.is_model_ready("counted"), 60, "counted ready")
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        systemd.systemctl("stop", "pbd.service")
        assert pbd.worker_units("active,activating,deactivating") == []
        assert pbd.shm_segments() == []
    finally:
        pbd.close()
