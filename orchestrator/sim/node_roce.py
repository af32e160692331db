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

ROCE_SPEC = "/etc/sim-roce.json"
SPARK_HCA = "rocep1s0f0"
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
    return RoceSpec({hca: {"1": Port(ACTIVE, gids)}})


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
                if kind:
                    out[f"{base}/gid_attrs/types/{i}"] = kind + "\n"
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
