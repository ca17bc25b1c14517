#!/usr/bin/env bash
# PID 1 of a private systemd, run inside `unshare --fork --pid --mount --uts --ipc --mount-proc`.
#   boot_systemd.sh SHARED_DIR
# Makes every mount private and gives the namespace its own /run, /tmp, /var/tmp and /var/log
# (systemd's tmpfiles would otherwise clean the machine's /tmp; journald and utmp would write
# into the machine's /var/log). SHARED_DIR appears inside as /run/pbd-test: its units/ are
# installed into /run/systemd/system before systemd starts. Units that would change the
# machine itself (kernel settings, modules, remounting /, users, /dev/log, timers) are masked.
set -euo pipefail
shared="$1"
exec 3<"$shared"  # keep a handle: /tmp is covered below and the path may be under it
mount --make-rprivate /
for dir in /run /tmp /var/tmp /var/log; do
  mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$dir"
done
chmod 1777 /tmp /var/tmp
mkdir -p /run/systemd/system /run/pbd-test
mount --bind /proc/self/fd/3 /run/pbd-test
exec 3<&-
hostname pbd-test-systemd
for unit in \
    systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \
    systemd-tmpfiles-clean.timer systemd-sysctl.service systemd-modules-load.service \
    systemd-remount-fs.service systemd-sysusers.service systemd-update-utmp.service \
    systemd-update-utmp-runlevel.service systemd-journal-flush.service \
    systemd-random-seed.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-udev-settle.service systemd-hwdb-update.service ldconfig.service \
    systemd-machine-id-commit.service systemd-binfmt.service systemd-firstboot.service \
    systemd-journal-catalog-update.service systemd-update-done.service \
    systemd-journald-dev-log.socket systemd-journald-audit.socket \
    systemd-udevd-control.socket systemd-udevd-kernel.socket \
    systemd-pstore.service systemd-boot-system-token.service \
    timers.target getty.target console-getty.service systemd-logind.service \
    systemd-ask-password-console.path systemd-ask-password-wall.path \
    postgresql.service; do
  ln -sf /dev/null "/run/systemd/system/$unit"
done
if [ -d /run/pbd-test/units ]; then
  cp -r /run/pbd-test/units/. /run/systemd/system/
fi
exec /lib/systemd/systemd --system --unit=basic.target
