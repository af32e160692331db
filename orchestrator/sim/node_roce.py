"""A Spark's RoCE HCA as sysfs shows it, for nodes of the RoCE profile (issue 18, field note 12).

The host kernel has no RDMA devices and sysfs cannot be written, so the node gets a tmpfs over /sys/class
with every real class dir bound back into it and a fake `infiniband` tree beside them (verified in a node
container: `ip`, /sys/class/net and the rest still read the real kernel). The tree is laid out as on a
Spark's rocep1s0f0 port 1: index 0/1 the fe80 link-local GID as RoCE v1/v2, index 2/3 ::ffff:<fabric ip>
as RoCE v1/v2, the rest of the table zero. The host side (this module) computes the files from a small
spec; the node script only writes what /etc/sim-roce.json lists, so a fault edits the spec and re-runs it.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass, field

from .state import FABRIC_IFACE

ROCE_SPEC = "/etc/sim-roce.json"
SPARK_HCA = "rocep1s0f0"
SPARK_GID_INDEX = 3  # RoCE v2 on ::ffff:<fabric ip>, the entry NCCL_IB_GID_INDEX names on a Spark
GID_TABLE = 16  # entries a port lists (real ConnectX ports list up to 255; the unused ones read all zeros)
ZERO_GID = ":".join(["0000"] * 8)
ACTIVE, DOWN = "4: ACTIVE", "1: DOWN"


def gid_text(addr: str) -> str:
    """An IPv6 address (or IPv4, as ::ffff:a.b.c.d) in sysfs's 8 x 4-hex-digit form."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + addr)
    return ":".join(ip.exploded.split(":"))


def link_local(fabric_ip: str) -> str:
    """A stable fe80 GID per node (a Spark's comes from the port's MAC; the sim derives one from its IP)."""
    a, b, c, d = (int(x) for x in fabric_ip.split("."))
    return gid_text(f"fe80::{0x0200 | a:x}:{b:02x}ff:fe{c:02x}:{d:x}")


@dataclass
class Port:
    state: str = ACTIVE
    gids: list[tuple[str, str]] = field(default_factory=list)  # (gid, "RoCE v1"/"RoCE v2"), by index
    netdev: str = FABRIC_IFACE  # the Ethernet device behind the port (gid_attrs/ndevs names it per GID)


@dataclass
class RoceSpec:
    hcas: dict[str, dict[str, Port]]  # HCA name -> port number -> Port
    device: bool = True  # /dev/infiniband present

    def to_json(self) -> str:
        """The spec the node script applies: every file to write, relative to /sys/class/infiniband."""
        return json.dumps({"device": self.device, "files": files(self)}, indent=1, sort_keys=True) + "\n"


def spark(fabric_ip: str, hca: str = SPARK_HCA) -> RoceSpec:
    """The HCA a Spark shows, with its fabric IP's GIDs at the indexes a Spark puts them."""
    ll, mapped = link_local(fabric_ip), gid_text(fabric_ip)
    gids = [(ll, "RoCE v1"), (ll, "RoCE v2"), (mapped, "RoCE v1"), (mapped, "RoCE v2")]
    return RoceSpec({hca: {"1": Port(ACTIVE, gids, FABRIC_IFACE)}})


def files(spec: RoceSpec) -> dict[str, str]:
    """relpath -> content of the fake tree; unused GID slots read zeros and have no readable type,
    as on a real port (reading their type fails with EINVAL there; here the file is absent)."""
    out: dict[str, str] = {}
    for hca, ports in spec.hcas.items():
        for num, port in ports.items():
            base = f"{hca}/ports/{num}"
            out[f"{base}/state"] = port.state + "\n"
            out[f"{base}/link_layer"] = "Ethernet\n"
            for i in range(GID_TABLE):
                gid, kind = port.gids[i] if i < len(port.gids) else (ZERO_GID, "")
                out[f"{base}/gids/{i}"] = gid + "\n"
                if kind:  # a used slot names its type and netdev (what `show_gids` and ibdev2netdev read)
                    out[f"{base}/gid_attrs/types/{i}"] = kind + "\n"
                    out[f"{base}/gid_attrs/ndevs/{i}"] = port.netdev + "\n"
    return out


def entry(spec: RoceSpec, hca: str, index: int, port: str = "1") -> str:
    """What a GID index is, in words for a message: 'RoCE v1 fe80:... (link-local)' etc."""
    gids = spec.hcas.get(hca, {}).get(port, Port()).gids
    if not 0 <= index < len(gids):
        return "no GID"
    gid, kind = gids[index]
    where = "link-local" if gid.startswith("fe80") else "IPv4-mapped" if gid.startswith("0000:" * 5 + "ffff") \
        else "global"
    return f"{kind} {gid} ({where})"


# Runs on the node as `sim-roce` (stdlib only; the node has no spark-deploy package). Idempotent: the
# tmpfs over /sys/class is made once per boot, the infiniband dir is rewritten from the spec every run.
SIM_ROCE = r'''#!/usr/bin/python3
"""spark-deploy sim: the node's fake RoCE HCA (/sys/class/infiniband, /dev/infiniband) from /etc/sim-roce.json.
No spec: no HCA (the tree and the device are removed), as on a node of profile tcp."""
import json
import os
import shutil
import stat
import subprocess

SPEC = "/etc/sim-roce.json"
REAL = "/run/sim-sysclass"  # the kernel's /sys/class, kept reachable under the tmpfs
IB = "/sys/class/infiniband"


def mounted(path):
    return subprocess.run(["mountpoint", "-q", path]).returncode == 0


def overlay():
    if mounted(REAL):
        return
    os.makedirs(REAL, exist_ok=True)
    subprocess.run(["mount", "--bind", "/sys/class", REAL], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "sim-sysclass", "/sys/class"], check=True)
    for name in sorted(os.listdir(REAL)):
        os.mkdir("/sys/class/" + name)
        subprocess.run(["mount", "--bind", REAL + "/" + name, "/sys/class/" + name], check=True)


def main():
    spec = json.load(open(SPEC)) if os.path.exists(SPEC) else None
    if spec is None and not mounted(REAL):
        return
    overlay()
    shutil.rmtree(IB, ignore_errors=True)
    if spec is None or not spec.get("device", True):
        shutil.rmtree("/dev/infiniband", ignore_errors=True)
    else:
        # libibverbs finds a device by its uverbs node (docker's `--device /dev/infiniband` copies the
        # nodes in the dir, so an empty dir would give the container none): real majors, no driver behind
        os.makedirs("/dev/infiniband", exist_ok=True)
        for name, minor in (("uverbs0", 192), ("rdma_cm", 255)):
            path = "/dev/infiniband/" + name
            if not os.path.exists(path):
                os.mknod(path, stat.S_IFCHR, os.makedev(231 if name == "uverbs0" else 10, minor))
                os.chmod(path, 0o666)  # as udev leaves them (mknod's mode is umasked)
    for rel, text in (spec or {}).get("files", {}).items():
        path = os.path.join(IB, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


main()
'''


# docker runs nvidia-container-runtime-hook as an OCI prestart hook for `--gpus`. runc calls it after the
# container's mounts are made but before pivot_root, so in the container's mount namespace both the node's
# tree and <rootfs>/sys are visible: the hook puts a tmpfs over the container's /sys/class (its own class
# dirs bound back: /sys/class/net stays the container's), and binds the node's infiniband dir in read-only,
# as a real HCA's sysfs shows in every container. Without a node tree it only reads the state and exits 0.
# The hook itself is sh: every `--gpus` container start runs it, and on a node without the tree (profile
# tcp, the default) it must cost no Python start. IB_HOOK is the part that carries the tree in.
NVIDIA_HOOK = """#!/bin/sh
# spark-deploy sim: stand-in for nvidia-container-runtime-hook (no GPU); carries the fake RoCE sysfs in
[ -d /sys/class/infiniband ] || { cat >/dev/null 2>&1; exit 0; }
exec /usr/bin/python3 /usr/local/lib/sim-ib-hook
"""

IB_HOOK = r'''#!/usr/bin/python3
"""spark-deploy sim: the RoCE part of the nvidia-container-runtime-hook stand-in (OCI state on stdin)."""
import json
import os
import subprocess
import sys

CARRY = """set -e
cls=$1
keep=/run/sim-ib-hook
mkdir -p "$keep"
mount --bind "$cls" "$keep"
mount -t tmpfs -o mode=0755 sim-sysclass "$cls"
for d in "$keep"/*; do n=${d##*/}; mkdir "$cls/$n"; mount --bind "$d" "$cls/$n"; done
umount "$keep"
mkdir "$cls/infiniband"
mount --rbind -o ro /sys/class/infiniband "$cls/infiniband"
"""


def main():
    try:
        state = json.load(sys.stdin)
    except ValueError:
        return 0
    if not os.path.isdir("/sys/class/infiniband"):
        return 0
    with open(os.path.join(state["bundle"], "config.json")) as f:
        root = json.load(f)["root"]["path"]
    root = os.path.join(state["bundle"], root)  # absolute stays absolute
    r = subprocess.run(["nsenter", "-t", str(state["pid"]), "-m", "sh", "-c", CARRY, "sim-hook",
                        root + "/sys/class"], capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write("sim nvidia hook: carrying /sys/class/infiniband in failed: " + r.stderr)
    return r.returncode


sys.exit(main())
'''


# RDMA wants locked memory without limit, so the roce profile renders `--ulimit memlock=-1`. Setting an
# rlimit above the hard one needs CAP_SYS_RESOURCE, which this host gives nobody (its hard memlock is
# 8 MiB), so runc would refuse every such container ("error setting rlimit type 8"). The node's dockerd
# runs runc through this wrapper: for a container that asks for more locked memory than the node may
# give, it lowers the request to the node's hard limit and tells the process what was asked
# (SIM_MEMLOCK_ASKED, read by the stand-in's NCCL). A container that did not ask keeps the node's 8 MiB,
# and the stand-in fails its IB set-up as NCCL does with too little locked memory. `docker exec` into such
# a container carries the same rlimits in its process spec, lowered the same way. sh: runc runs several
# times per container; Python starts only for a `create` or `exec` whose spec asks for a memlock limit.
DAEMON_JSON = '{"runtimes": {"sim-runc": {"path": "/usr/local/sbin/sim-runc"}}, "default-runtime": "sim-runc"}\n'

SIM_RUNC = """#!/bin/sh
# spark-deploy sim: runc, with a memlock request the node cannot grant lowered to what it can (node_roce.py)
spec=
prev=
for a in "$@"; do
  case "$prev" in
    --bundle|-b) spec=$a/config.json ;;  # create: the container's spec
    --process|-p) spec=$a ;;            # exec: the process's (docker repeats the container's rlimits)
  esac
  case "$a" in --bundle=*) spec=${a#--bundle=}/config.json ;; --process=*) spec=${a#--process=} ;; esac
  prev=$a
done
if [ -n "$spec" ] && grep -q RLIMIT_MEMLOCK "$spec" 2>/dev/null; then
  /usr/bin/python3 /usr/local/lib/sim-runc-memlock "$spec" || exit 1
fi
exec /usr/sbin/runc "$@"
"""

RUNC_MEMLOCK = r'''#!/usr/bin/python3
"""spark-deploy sim: lower an OCI spec's (or an exec process spec's) RLIMIT_MEMLOCK to the node's hard
limit, noting what was asked."""
import json
import os
import resource
import sys

path = sys.argv[1]
with open(path) as f:
    spec = json.load(f)
_, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
proc = spec["process"] if isinstance(spec.get("process"), dict) else spec  # a container spec, or an exec process
changed = False
for lim in proc.get("rlimits") or []:
    if lim.get("type") == "RLIMIT_MEMLOCK" and hard != resource.RLIM_INFINITY and lim.get("hard", 0) > hard:
        asked = "unlimited" if lim["hard"] >= 2 ** 63 - 1 or lim["hard"] < 0 else str(lim["hard"])
        lim["soft"] = lim["hard"] = hard
        proc["env"] = [e for e in proc.get("env") or [] if not e.startswith("SIM_MEMLOCK_ASKED=")]
        proc["env"].append("SIM_MEMLOCK_ASKED=" + asked)
        changed = True
if changed:
    tmp = path + ".sim"
    with open(tmp, "w") as f:
        json.dump(spec, f)
    os.replace(tmp, path)
'''
