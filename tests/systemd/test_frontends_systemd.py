"""`pbd serve --frontends 2` under a real (private) systemd (issue #29): the front ends live in
pbd.service's own cgroup (one unit), one killed is replaced without the unit noticing, a
`systemctl restart pbd` brings new front ends while the instances' units are re-adopted, and a
stop leaves no front end, no worker and no shared memory behind.
"""

from __future__ import annotations

import re

import numpy as np
from conftest import EXAMPLE_MODELS, MODELS, make_repository, shm_prefix
from pbd_units import PbdUnits, counted, initialize_count, wait_until
from private_systemd import PrivateSystemd

FRONT_MODULE = "pbd.fronts.front"
FRONT_LINKED = re.compile(r"front end \d+ connected")  # a worker's debug line


def service_processes(systemd: PrivateSystemd) -> dict[int, str]:
    """Every process of pbd.service's cgroup (PIDs as the namespace sees them): command line."""
    group = systemd.show("pbd.service", "ControlGroup")["ControlGroup"]
    if not group:
        return {}
    # By each process's /proc/PID/cgroup: the same on cgroup v1 (name=systemd) and v2.
    script = (
        "for d in /proc/[0-9]*; do "
        f'if grep -q ":{group}$" "$d/cgroup" 2>/dev/null; then '
        'printf "%s " "${d#/proc/}"; tr "\\0" " " < "$d/cmdline"; echo; fi; done'
    )
    out = systemd.run("sh", "-c", script).stdout
    return {
        int(pid): rest
        for pid, _, rest in (line.partition(" ") for line in out.splitlines() if line.strip())
    }


def worker_journal(systemd: PrivateSystemd) -> str:
    return systemd.journal("-u", "pbd-worker@*")


def front_connections(systemd: PrivateSystemd) -> int:
    """Front-end links the workers have taken so far (their journal)."""
    return len(FRONT_LINKED.findall(worker_journal(systemd)))


def front_ends(systemd: PrivateSystemd) -> list[int]:
    return sorted(pid for pid, cmd in service_processes(systemd).items() if FRONT_MODULE in cmd)


def test_front_ends_are_part_of_pbd_service(private_systemd: PrivateSystemd) -> None:
    systemd = private_systemd
    make_repository(
        systemd.shared, {"counted": MODELS / "counted", "add_sub": EXAMPLE_MODELS / "add_sub"}
    )
    pbd = PbdUnits(systemd, shm_prefix(), "frontends=2", "log_verbose=1")
    try:
        pbd.install()
        systemd.systemctl("start", "pbd.service")
        client = pbd.client()
        np.testing.assert_array_equal(counted(client), np.arange(4, dtype=np.float32) * 2)
        daemon = pbd.main_pid("pbd.service")
        first = wait_until(lambda: (f := front_ends(systemd)) and len(f) == 2 and f, 60, "2 fronts")
        processes = service_processes(systemd)
        # One unit: the daemon and its two front ends, nothing else (workers have their own).
        assert set(processes) == {daemon, *first}, processes

        # A front end killed: the daemon replaces it; systemd sees nothing (no restart).
        victim = first[0]
        systemd.run("kill", "-KILL", str(victim))
        replaced = wait_until(
            lambda: (f := front_ends(systemd)) and len(f) == 2 and victim not in f and f,
            60,
            "the killed front end replaced",
        )
        assert first[1] in replaced
        shown = systemd.show("pbd.service", "ActiveState", "NRestarts", "MainPID")
        assert shown == {"ActiveState": "active", "NRestarts": "0", "MainPID": str(daemon)}
        assert f"(pid {victim}) was killed by SIGKILL" in pbd.daemon_log()
        np.testing.assert_array_equal(counted(pbd.client()), np.arange(4, dtype=np.float32) * 2)

        # `systemctl restart pbd`: new front ends; the instances are re-adopted, not
        # re-initialized.
        workers = {unit: pbd.main_pid(unit) for unit in pbd.worker_units()}
        assert len(workers) == 2, workers
        links_before = front_connections(systemd)
        systemd.systemctl("restart", "pbd.service")
        assert pbd.main_pid("pbd.service") != daemon
        after = wait_until(lambda: (f := front_ends(systemd)) and len(f) == 2 and f, 60, "2 fronts")
        assert set(after).isdisjoint(replaced)
        assert {unit: pbd.main_pid(unit) for unit in pbd.worker_units()} == workers
        assert initialize_count(systemd) == 1
        np.testing.assert_array_equal(counted(pbd.client()), np.arange(4, dtype=np.float32) * 2)
        # The re-adopted workers take the new front ends' links (the new daemon's token) and
        # serve them directly: both front ends connect to both workers anew.
        for _ in range(4):  # new connections: both front ends serve some
            counted(pbd.client())
        wait_until(
            lambda: front_connections(systemd) >= links_before + 4,
            60,
            "the new front ends linked to the re-adopted workers",
        )
        assert "refused a front end" not in worker_journal(systemd)

        # `systemctl stop pbd`: nothing left.
        systemd.systemctl("stop", "pbd.service")
        assert systemd.show("pbd.service", "ActiveState")["ActiveState"] == "inactive"
        assert service_processes(systemd) == {}
        # No front end anywhere in there (the pattern does not match its own command line).
        grep = "grep -l 'pbd[.]fronts[.]front' /proc/[0-9]*/cmdline"
        stray = systemd.run("sh", "-c", grep, check=False)
        assert stray.stdout.split() == [], stray.stdout
        assert pbd.worker_units("active,activating,deactivating") == []
        assert pbd.shm_segments() == []
    finally:
        pbd.close()
