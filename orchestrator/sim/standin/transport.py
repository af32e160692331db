"""Which link the collectives use, decided as NCCL and Gloo decide it from the env and the node's interfaces.

vLLM's process group has a Gloo side (CPU tensors, barriers) and an NCCL side (the all-reduces). Gloo binds
to exactly GLOO_SOCKET_IFNAME and fails at init when no interface has that name. NCCL reads
NCCL_SOCKET_IFNAME as prefixes (`=` exact, `^` exclude) for its bootstrap and its socket transport, and
uses InfiniBand/RoCE only when NCCL_IB_DISABLE is not 1 and an HCA is there; with NCCL_DEBUG=INFO it says
which (`NET/Socket : Using [0]IF:IP<0>`). A wrong name on a real Spark is no warning: either init fails,
or the collectives quietly run over whichever link the name matched.
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct

from .base import SimError

_SIOCGIFADDR = 0x8915
IB_SYSFS = "/sys/class/infiniband"
IB_DEV = "/dev/infiniband"


def interfaces() -> dict[str, str]:
    """name -> IPv4 address ('' if none) of every interface of this network namespace but lo."""
    out: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            if name == "lo":
                continue
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                out[name] = socket.inet_ntoa(packed[20:24])
            except OSError:
                out[name] = ""
    return out


def select(spec: str, names: list[str], exact: bool) -> list[str]:
    """NCCL's (prefix, `=`, `^`) or Gloo's (exact) reading of a *_SOCKET_IFNAME value."""
    if not exact and spec.startswith("^"):
        excluded = [e for e in spec[1:].split(",") if e]
        return [n for n in names if not any(n.startswith(e) for e in excluded)]
    strict = exact or spec.startswith("=")
    wanted = [e for e in spec.lstrip("=").split(",") if e]
    return [n for n in names if any(n == w if strict else n.startswith(w) for w in wanted)]


def _hca_wanted(spec: str, name: str, port: str) -> bool:
    """NCCL_IB_HCA: comma list of `name[:port]`, prefixes unless `=` (exact), all excluded with `^`."""
    if not spec:
        return True
    exclude, spec = spec.startswith("^"), spec.lstrip("^")
    exact, spec = spec.startswith("="), spec.lstrip("=")
    hit = False
    for item in filter(None, spec.split(",")):
        want, _, want_port = item.partition(":")
        if (name == want if exact else name.startswith(want)) and want_port in ("", port):
            hit = True
    return hit != exclude


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def roce(env, sysfs: str = IB_SYSFS, dev: str = IB_DEV) -> tuple[str, str] | None:
    """(HCA, port) NCCL's IB transport takes, None when it falls back to sockets (IB disabled, no device,
    NCCL_IB_HCA matching no active port), or SimError where NCCL init fails: a GID index the port's table
    does not have, or one whose GID is unset (ibv_query_gid / the QP's address fails)."""
    verbs = os.path.isdir(dev) and any(n.startswith("uverbs") for n in os.listdir(dev))  # what libibverbs opens
    if env.get("NCCL_IB_DISABLE") == "1" or not verbs or not os.path.isdir(sysfs):
        return None
    for name in sorted(os.listdir(sysfs)):
        ports = os.path.join(sysfs, name, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            if not _hca_wanted(env.get("NCCL_IB_HCA", ""), name, port):
                continue
            if not _read(os.path.join(ports, port, "state")).endswith("ACTIVE"):
                continue
            index = env.get("NCCL_IB_GID_INDEX", "")
            if index:
                gid = _read(os.path.join(ports, port, "gids", index)) if index.isdigit() else ""
                if not gid or set(gid) <= {"0", ":"}:
                    raise SimError(
                        f"NCCL WARN NET/IB : ibv_query_gid failed for {name}:{port} GID index {index}\n"
                        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7")
            _memlock(env, name, port)
            return name, port
    return None


MEMLOCK_NEEDED = 64 << 20  # the sim's bar for "enough": NCCL registers its IB buffers (MBs per channel)


def _memlock(env, name: str, port: str) -> None:
    """SimError as NCCL fails when the process may not lock its IB buffers: a container without
    `--ulimit memlock=-1` keeps the default few MiB. SIM_MEMLOCK_ASKED is what the container asked for
    where the node could not grant it (node_roce.SIM_RUNC: this host lets nobody raise the limit)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    asked = env.get("SIM_MEMLOCK_ASKED", "")
    if soft == resource.RLIM_INFINITY or soft >= MEMLOCK_NEEDED or asked == "unlimited" \
            or (asked.isdigit() and int(asked) >= MEMLOCK_NEEDED):
        return
    raise SimError(
        f"NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory (NET/IB {name}:{port}; "
        f"locked-memory limit {soft >> 10} KiB: run the container with --ulimit memlock=-1)\n"
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7")


def connect(env, ifaces: dict[str, str] | None = None, sysfs: str = IB_SYSFS, dev: str = IB_DEV) -> list[str]:
    """The NCCL INFO lines of this rank's communicator set-up (empty unless NCCL_DEBUG=INFO), or SimError
    with the message Gloo or NCCL fails with."""
    ifaces = interfaces() if ifaces is None else ifaces
    with_addr = [n for n, a in ifaces.items() if a]
    gloo = env.get("GLOO_SOCKET_IFNAME", "")
    if gloo and not any(ifaces.get(n) for n in select(gloo, list(ifaces), exact=True)):
        raise SimError("RuntimeError: [../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. "
                       f"Unable to find address for: {gloo}")
    nccl = env.get("NCCL_SOCKET_IFNAME", "")
    chosen = [n for n in (select(nccl, with_addr, exact=False) if nccl else sorted(with_addr)) if ifaces[n]]
    if not chosen:
        raise SimError("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                       "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\n"
                       "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
                       "or device error.\nLast error:\nBootstrap : no socket interface found")
    hca = roce(env, sysfs, dev)
    if str(env.get("NCCL_DEBUG", "")).upper() not in ("INFO", "TRACE"):
        return []
    boot = f"NCCL INFO Bootstrap : Using {chosen[0]}:{ifaces[chosen[0]]}<0>"
    if hca:
        oob = f"OOB {chosen[0]}:{ifaces[chosen[0]]}<0>"
        return [boot, f"NCCL INFO NET/IB : Using [0]{hca[0]}:{hca[1]}/RoCE [RO]; {oob}", "NCCL INFO Using network IB"]
    used = " ".join(f"[{i}]{n}:{ifaces[n]}<0>" for i, n in enumerate(chosen))
    ib = [] if env.get("NCCL_IB_DISABLE") == "1" else ["NCCL INFO NET/IB : No device found."]
    return [boot, *ib, f"NCCL INFO NET/Socket : Using {used}", "NCCL INFO Using network Socket"]
