"""Files baked into the simulated-cluster node images (stubs, entrypoint, sim-service, sim-boot, sshd config).

Kept as strings so they travel with the Python package; `images.py` hashes their
content into the image tag, so editing any of them rebuilds (the cheap top layer only).
"""

from __future__ import annotations

import json

DEFAULT_GPU = {
    "name": "NVIDIA GB10",
    "driver": "580.159.03",
    "memory_mib": 122502,
    "clock_mhz": 2418,
    "max_clock_mhz": 2418,
    "cuda": "13.0",
}

GPU_JSON = json.dumps(DEFAULT_GPU, indent=2) + "\n"

# Stand-in for nvidia-smi. Reads /etc/sim-gpu.json on every call so tests and the
# `gpu` fault can change what it reports.
NVIDIA_SMI = r'''#!/usr/bin/python3
"""nvidia-smi stand-in for a simulated DGX Spark (reads /etc/sim-gpu.json)."""
import hashlib
import json
import socket
import sys
import time

CONF = "/etc/sim-gpu.json"


def load():
    with open(CONF) as f:
        g = json.load(f)
    g.setdefault("name", "NVIDIA GB10")
    g.setdefault("driver", "580.159.03")
    g.setdefault("memory_mib", 122502)
    g.setdefault("clock_mhz", 2418)
    g.setdefault("max_clock_mhz", g["clock_mhz"])
    g.setdefault("cuda", "13.0")
    g.setdefault("compute_cap", "12.1")
    g.setdefault("bus_id", "0000000F:01:00.0")
    if "uuid" not in g:
        h = hashlib.sha256(socket.gethostname().encode()).hexdigest()
        g["uuid"] = "GPU-%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:32])
    return g


def fields(g):
    mem_used = int(g.get("memory_used_mib", 0))
    # (value, unit) per queryable field; unit None = no unit
    return {
        "index": ("0", None),
        "count": ("1", None),
        "name": (g["name"], None),
        "uuid": (g["uuid"], None),
        "driver_version": (g["driver"], None),
        "pci.bus_id": (g["bus_id"], None),
        "compute_cap": (g["compute_cap"], None),
        "memory.total": (str(g["memory_mib"]), "MiB"),
        "memory.used": (str(mem_used), "MiB"),
        "memory.free": (str(int(g["memory_mib"]) - mem_used), "MiB"),
        "clocks.sm": (str(g["clock_mhz"]), "MHz"),
        "clocks.current.sm": (str(g["clock_mhz"]), "MHz"),
        "clocks.gr": (str(g["clock_mhz"]), "MHz"),
        "clocks.current.graphics": (str(g["clock_mhz"]), "MHz"),
        "clocks.max.sm": (str(g["max_clock_mhz"]), "MHz"),
        "clocks.max_sm": (str(g["max_clock_mhz"]), "MHz"),
        "clocks.max.gr": (str(g["max_clock_mhz"]), "MHz"),
        "clocks.max.graphics": (str(g["max_clock_mhz"]), "MHz"),
        "temperature.gpu": (str(g.get("temperature_c", 42)), None),
        "power.draw": (str(g.get("power_w", 11.0)), "W"),
        "utilization.gpu": (str(g.get("utilization", 0)), "%"),
        # why the clock is below its max: idle (normal) or an application-clock lock (`nvidia-smi -lgc`)
        "clocks_event_reasons.gpu_idle": ("Active" if g.get("idle") else "Not Active", None),
        "clocks_event_reasons.applications_clocks_setting": ("Active" if g.get("clocks_locked") else "Not Active",
                                                             None),
        "persistence_mode": ("Enabled", None),
        "pstate": ("P0", None),
    }


def query(g, spec, fmt):
    opts = [o.strip() for o in fmt.split(",")]
    if "csv" not in opts:
        sys.stderr.write('"%s" is not a valid format. Only csv is supported by this stand-in.\n' % fmt)
        return 2
    table = fields(g)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for n in names:
        if n not in table:
            sys.stderr.write('Field "%s" is not a valid field to query.\n\n' % n)
            return 2
    if "noheader" not in opts:
        print(", ".join(n + (" [%s]" % table[n][1] if table[n][1] else "") for n in names))
    row = []
    for n in names:
        value, unit = table[n]
        row.append(value if (unit is None or "nounits" in opts) else "%s %s" % (value, unit))
    print(", ".join(row))
    return 0


def banner(g):
    bar = "+-----------------------------------------+------------------------+----------------------+"
    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print("+-----------------------------------------------------------------------------------------+")
    head = "NVIDIA-SMI %s" % g["driver"]
    mid = "Driver Version: %s" % g["driver"]
    tail = "CUDA Version: %s" % g["cuda"]
    print("| %-34s %-31s %-20s |" % (head, mid, tail))
    print(bar)
    print("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    print("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    print("|                                         |                        |               MIG M. |")
    print("|=========================================+========================+======================|")
    print("|   0  %-29s  On  |   %s Off |                  N/A |" % (g["name"][:29], g["bus_id"]))
    print("| N/A   %2sC    P0            %4sW /  N/A | %22s |      0%%      Default |"
          % (g.get("temperature_c", 42), int(float(g.get("power_w", 11.0))),
             # a GB10's unified memory has no framebuffer: the real banner says "Not Supported" there
             "Not Supported" if "GB10" in g["name"] else
             "%dMiB / %dMiB" % (int(g.get("memory_used_mib", 0)), int(g["memory_mib"]))))
    print("|                                         |                        |                  N/A |")
    print(bar)
    print("| %-87s |" % ("Clocks: SM %s MHz (max %s MHz)" % (g["clock_mhz"], g["max_clock_mhz"])))
    print("+-----------------------------------------------------------------------------------------+")
    return 0


def main(argv):
    try:
        g = load()
    except (OSError, ValueError) as exc:
        sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                         "(%s)\n" % exc)
        return 9
    if g.get("fail"):
        sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                         "Make sure that the latest NVIDIA driver is installed and running.\n")
        return 9
    spec = fmt = None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-L", "--list-gpus"):
            print("GPU 0: %s (UUID: %s)" % (g["name"], g["uuid"]))
            return 0
        if a == "--version":
            print("NVIDIA-SMI version  : %s" % g["driver"])
            print("NVML version        : %s" % g["driver"].rsplit(".", 1)[0])
            print("DRIVER version      : %s" % g["driver"])
            print("CUDA Version        : %s" % g["cuda"])
            return 0
        if a.startswith("--query-gpu="):
            spec = a.split("=", 1)[1]
        elif a == "--query-gpu" and i + 1 < len(argv):
            i += 1
            spec = argv[i]
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a == "--format" and i + 1 < len(argv):
            i += 1
            fmt = argv[i]
        elif a in ("-i", "--id") and i + 1 < len(argv):
            i += 1
        elif a.startswith("--id=") or a in ("-q", "--query"):
            pass
        else:
            sys.stderr.write("Invalid combination of input arguments. "
                             "Please run 'nvidia-smi -h' for help.\n")
            return 2
        i += 1
    if spec is not None:
        return query(g, spec, fmt or "csv")
    return banner(g)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''

# docker >= 19.03 adds the nvidia-container-runtime-hook prestart hook for `--gpus`: its stand-in is
# node_roce.NVIDIA_HOOK (it also carries the fake RoCE sysfs into the container).

SSHD_CONFIG = """# spark-deploy sim: by key only (the DGX OS user, and root for the tests that need it)
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
UseDNS no
"""

# start|stop|status a node service. Under systemd (the node-systemd image) it is systemctl on the packages'
# own units; under docker-init, pids we record ourselves (no reliance on daemon pidfiles).
SIM_SERVICE = r"""#!/bin/sh
# usage: sim-service start|stop|status sshd|dockerd
set -eu
action=${1:?action}
svc=${2:?service}
case "$svc" in
  sshd) log=/var/log/sshd.log; units="ssh.service"; main=ssh.service ;;
  dockerd) log=/var/log/dockerd.log; units="docker.socket docker.service"; main=docker.service ;;
  *) echo "sim-service: unknown service: $svc" >&2; exit 2 ;;
esac
if [ -d /run/systemd/system ]; then  # systemd is PID 1 (sd_booted)
  case "$action" in
    start|stop) exec systemctl "$action" $units ;;
    status) exec systemctl is-active --quiet "$main" ;;
    *) echo "sim-service: unknown action: $action" >&2; exit 2 ;;
  esac
fi
pidfile=/run/sim-$svc.pid
running() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
case "$action" in
  start)
    if running; then exit 0; fi
    if [ "$svc" = sshd ]; then
      mkdir -p /run/sshd
      nohup /usr/sbin/sshd -D -e >>"$log" 2>&1 </dev/null &
    else
      rm -f /var/run/docker.pid
      nohup dockerd >>"$log" 2>&1 </dev/null &
    fi
    echo $! >"$pidfile"
    ;;
  stop)
    if ! running; then rm -f "$pidfile"; exit 0; fi
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null; do
      i=$((i + 1))
      if [ "$i" -gt 150 ]; then kill -KILL "$pid" 2>/dev/null || true; fi
      if [ "$i" -gt 200 ]; then echo "sim-service: $svc ($pid) did not stop" >&2; exit 1; fi
      sleep 0.1
    done
    rm -f "$pidfile"
    ;;
  status)
    running
    ;;
  *) echo "sim-service: unknown action: $action" >&2; exit 2 ;;
esac
"""

# What a node keeps across a reboot beyond its disk: its simulated hardware. The fill-disk fault writes its
# spec under /etc and calls this; at boot sim-boot.service (systemd) or sim-entrypoint (docker-init) calls
# it. (Memory is sim-memory's: node_memory.py, a daemon, since what it shows moves with what runs.)
SIM_BOOT = r'''#!/usr/bin/python3
"""spark-deploy sim: apply the node's simulated disk, at boot and when a fault changes it.

/etc/sim-net.json      which address is which link: each link gets a Spark's name (Docker names them eth0,
                       eth1 in whatever order it attaches them), the unplugged QSFP port is made, and the
                       default route goes over the management link
/etc/sim-fill-disk     SIZE: a SIZE tmpfs over /var/lib/docker/tmp (a full disk stays full after a reboot)
/etc/sim-roce.json     the fake RoCE HCA under /sys/class/infiniband and /dev/infiniband (sim-roce)
usage: sim-boot [net] [fill-disk] [roce]      (no argument: every step)
"""
import json
import os
import subprocess
import sys

NET_SPEC = "/etc/sim-net.json"
FILL_SPEC = "/etc/sim-fill-disk"
DOCKER_TMP = "/var/lib/docker/tmp"
CABLE_NS = "sim-cable"  # the far end of an unplugged port lives here: the node sees NO-CARRIER


def ip(*args):
    subprocess.run(["ip", *args], check=True)


def links():
    out = subprocess.run(["ip", "-j", "addr"], check=True, capture_output=True, text=True).stdout
    return [e for e in json.loads(out or "[]") if e.get("ifname")]


def net():
    if not os.path.exists(NET_SPEC):
        return
    with open(NET_SPEC) as f:
        spec = json.load(f)
    for want in spec.get("links", []):
        have = [e["ifname"] for e in links() if any(a.get("local") == want["ip"] for a in e.get("addr_info", []))]
        if not have:
            sys.exit("sim-boot net: no link holds %s (for %s)" % (want["ip"], want["name"]))
        if have[0] != want["name"]:
            ip("link", "set", have[0], "down")
            ip("link", "set", have[0], "name", want["name"])
        ip("link", "set", want["name"], "up")
    for i, name in enumerate(spec.get("unplugged", [])):
        if not os.path.exists("/sys/class/net/" + name):
            if not os.path.exists("/run/netns/" + CABLE_NS):
                ip("netns", "add", CABLE_NS)
            ip("link", "add", name, "type", "veth", "peer", "name", "sim-cable%d" % i, "netns", CABLE_NS)
        ip("link", "set", name, "up")
    if spec.get("default_via"):
        ip("route", "replace", "default", "via", spec["default_via"], "dev", spec["default_dev"])


def mounted(path):
    return subprocess.run(["mountpoint", "-q", path]).returncode == 0


def unmount_all(path):
    while mounted(path):
        subprocess.run(["umount", path], check=True)


def fill_disk():
    unmount_all(DOCKER_TMP)
    if not os.path.exists(FILL_SPEC):
        return
    with open(FILL_SPEC) as f:
        size = f.read().strip()
    os.makedirs(DOCKER_TMP, mode=0o700, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "sim-fill-disk", DOCKER_TMP],
                   check=True)


def roce():
    """The fake RoCE HCA (sim-roce, orchestrator/sim/node_roce.py): a no-op without /etc/sim-roce.json."""
    subprocess.run(["/usr/local/sbin/sim-roce"], check=True)


STEPS = {"net": net, "fill-disk": fill_disk, "roce": roce}

if __name__ == "__main__":
    names = sys.argv[1:] or list(STEPS)
    for name in names:
        if name not in STEPS:
            sys.stderr.write("sim-boot: unknown step %r (steps: %s)\n" % (name, ", ".join(STEPS)))
            sys.exit(2)
    for name in names:
        STEPS[name]()
'''

ENTRYPOINT = r"""#!/bin/sh
# spark-deploy simulated DGX Spark: own host keys, own dockerd, sshd.
set -eu
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# a (re)boot starts with an empty /run, as its tmpfs would be: no stale pidfiles or sockets
find /run -mindepth 1 -maxdepth 1 ! -name lock -exec rm -rf -- {} +
# a container shares the host kernel's boot_id, a real reboot makes a new one: give each boot its own (what
# up's per-boot fact cache keys on), as sim-init does for a systemd node
cat /proc/sys/kernel/random/uuid >/run/sim-boot-id
mount --bind /run/sim-boot-id /proc/sys/kernel/random/boot_id || echo "sim-entrypoint: boot_id stays the host's" >&2
ssh-keygen -A  # makes only the host keys that are missing: kept across reboots
mkdir -p /run/sshd /run/lock /root/.ssh /var/log
chmod 700 /root/.ssh
sim-boot
# the node's unified memory (sim-memory: /proc/meminfo moves with what runs), up before anything can claim
setsid sim-memory serve >>/var/log/sim-memory.log 2>&1 </dev/null &
for _ in $(seq 1 100); do sim-memory show >/dev/null 2>&1 && break; sleep 0.05; done
sim-service start dockerd
sim-service start sshd
stop() { sim-service stop sshd || true; sim-service stop dockerd || true; exit 0; }
trap stop TERM INT
# keep-alive for PID 1's child; readiness is polled from outside
while :; do sleep 3600 & wait $! || true; done
"""
