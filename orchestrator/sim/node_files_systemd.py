"""Files of the systemd node image (kind ``node-systemd``): unit drop-ins, the boot unit, masks.

PID 1 is systemd (exec'd by `sim-init`, which first gives the boot its own boot_id); dockerd (Debian's docker.socket + docker.service + containerd.service) and sshd
(ssh.service) are the packages' own units, enabled by their postinst as on any Debian host. We add only:

- ssh.service drop-in: generate host keys missing at first boot (none are baked into the image) and keep
  them afterwards (`ssh-keygen -A` never overwrites), so known_hosts stays valid across reboots.
- sim-boot.service: re-applies the node's simulated disk (a full disk) at every boot.
- sim-memory.service: the node's unified memory (node_memory.py), up before dockerd and sshd.
- journald: persistent journal, so `journalctl -b -1` shows the boot before a reboot.
- default.target = multi-user.target (a server), and masks of units that have nothing to do in a
  container (gettys, apt timers reaching a mirror the internal network cannot reach, fs maintenance).
"""

from __future__ import annotations

SYMLINK = 0o120777  # S_IFLNK | 0777: the file's content is the link target (see images._files_tar)

# PID 1 of a systemd node (exec keeps PID 1, so PID 1 is systemd itself once booted)
SIM_INIT = """#!/bin/sh
# spark-deploy sim: a container shares the host kernel's boot_id, a real reboot makes a new one: give each
# boot of this node its own (journalctl --list-boots, `cat /proc/sys/kernel/random/boot_id`), then be systemd.
cat /proc/sys/kernel/random/uuid >/run/sim-boot-id
mount --bind /run/sim-boot-id /proc/sys/kernel/random/boot_id || echo "sim-init: boot_id stays the host's" >&2
exec /lib/systemd/systemd "$@"
"""

SSH_DROPIN = """# spark-deploy sim: host keys are made at first boot and kept (ssh-keygen -A skips existing keys)
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
"""

SIM_BOOT_UNIT = """[Unit]
Description=spark-deploy sim: re-apply the simulated disk (a full disk)
DefaultDependencies=no
After=local-fs.target
Before=docker.service containerd.service ssh.service multi-user.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/sim-boot

[Install]
WantedBy=multi-user.target
"""

SIM_MEMORY_UNIT = """[Unit]
Description=spark-deploy sim: a Spark's unified memory in /proc/meminfo
DefaultDependencies=no
After=local-fs.target
Before=docker.service containerd.service ssh.service multi-user.target

[Service]
ExecStart=/usr/local/sbin/sim-memory serve
ExecStartPost=/bin/sh -c 'for _ in $(seq 1 100); do /usr/local/sbin/sim-memory show >/dev/null 2>&1 && exit 0; sleep 0.05; done; exit 1'
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

JOURNALD = """# spark-deploy sim: keep the journal across reboots (journalctl -b -1)
[Journal]
Storage=persistent
SystemMaxUse=32M
"""

MASKED = (
    "getty@.service", "console-getty.service", "serial-getty@.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
    "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer", "systemd-pstore.service",
    "earlyoom.service",  # only `sim fault NODE earlyoom m=N` runs it: the meminfo fault must not feed it
)


def files() -> dict[str, tuple[bytes, int]]:
    out = {
        "usr/local/sbin/sim-init": (SIM_INIT.encode(), 0o755),
        "etc/systemd/system/ssh.service.d/spark-deploy-sim.conf": (SSH_DROPIN.encode(), 0o644),
        "etc/systemd/system/sim-boot.service": (SIM_BOOT_UNIT.encode(), 0o644),
        "etc/systemd/system/multi-user.target.wants/sim-boot.service":
            (b"/etc/systemd/system/sim-boot.service", SYMLINK),
        "etc/systemd/system/sim-memory.service": (SIM_MEMORY_UNIT.encode(), 0o644),
        "etc/systemd/system/multi-user.target.wants/sim-memory.service":
            (b"/etc/systemd/system/sim-memory.service", SYMLINK),
        "etc/systemd/journald.conf.d/spark-deploy-sim.conf": (JOURNALD.encode(), 0o644),
        "etc/systemd/system/default.target": (b"/lib/systemd/system/multi-user.target", SYMLINK),
    }
    for unit in MASKED:
        out[f"etc/systemd/system/{unit}"] = (b"/dev/null", SYMLINK)
    return out
