"""Faults injected into a simulated node: every one is a real change inside the node container.

Options arrive as Python keyword arguments or as CLI ``key=value`` strings; each kind validates its own.
"""

from __future__ import annotations

import io
import json
import re
import socket
import tarfile
from collections.abc import Callable

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from . import faults_host, faults_model, faults_roce, provision
from .state import FABRIC_IFACE, MGMT_IFACE, NODE_JIT_CACHE, SHARED_MOUNT, NodeInfo, SimError, SimInputError

NETS = {"fabric": (FABRIC_IFACE,), "management": (MGMT_IFACE,), "all": (MGMT_IFACE, FABRIC_IFACE)}
GPU_FILE = "/etc/sim-gpu.json"
SHARED_JIT = f"{SHARED_MOUNT}/jit"


class _Pending(Exception):
    pass


def _poll(check: Callable[[], None], timeout: float, what: str) -> None:
    """Call check() until it stops raising _Pending, or fail after timeout seconds."""
    try:
        for attempt in Retrying(stop=stop_after_delay(timeout), reraise=True,
                                wait=wait_exponential(multiplier=0.05, max=0.5),
                                retry=retry_if_exception_type(_Pending)):
            with attempt:
                check()
    except _Pending as exc:
        raise SimError(f"{what}: still not true after {timeout:.0f}s ({exc})") from exc


def _port_open(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1.0):
            return True
    except OSError:
        return False


def _until_port(node: NodeInfo, port: int, answers: bool, timeout: float, what: str) -> None:
    """Wait (bounded) until node.ip:port answers, or stops answering: starts and kills are asynchronous."""
    def check() -> None:
        if _port_open(node.ip, port) != answers:
            raise _Pending(f"{node.ip}:{port} {'does not answer' if answers else 'still answers'}")

    _poll(check, timeout, what)


def _no_opts(kind: str, opts: dict) -> None:
    if opts:
        raise SimInputError(f"fault {kind} takes no options, got {sorted(opts)}")


def _service(cluster, node: NodeInfo, action: str, svc: str, opts: dict) -> str:
    _no_opts(f"{action}-{svc}", opts)
    cluster.exec(node.index, ["sim-service", action, svc])
    want_up = action == "start"
    what = f"{action} {svc} on {node.name}"
    if svc == "sshd":
        _until_port(node, 22, want_up, 60, what)
    else:
        def check() -> None:
            ok = cluster.exec(node.index, ["docker", "info", "--format", "{{.ServerVersion}}"],
                              check=False).code == 0
            if ok != want_up:
                raise _Pending(f"docker info {'fails' if want_up else 'answers'}")
        _poll(check, 60, what)
    return f"{node.name}: {svc} {'started' if want_up else 'stopped'}"


def _peers(cluster, node: NodeInfo) -> list[NodeInfo]:
    return [n for n in cluster.nodes() if n.index != node.index]


def _net(kind: str, opts: dict, default: str) -> str:
    net = str(opts.get("net", default))
    if net not in NETS:
        raise SimInputError(f"fault {kind}: net={net!r}; one of {', '.join(NETS)}")
    return net


def partition(cluster, node: NodeInfo, opts: dict) -> str:
    """Blackhole routes on the node: net=fabric (default) cuts it from the other nodes' fabric addresses,
    the controller still reaches it; net=management cuts the management link (the controller, whose
    replies go to the gateway, and the other nodes' management addresses); net=all both."""
    if set(opts) - {"net"}:
        raise SimInputError("fault partition takes [net=fabric|management|all]")
    net = _net("partition", opts, "fabric")
    peers = _peers(cluster, node)
    cut: list[str] = []
    if net in ("fabric", "all"):
        cut += [p.fabric_ip for p in peers if p.fabric_ip]
    if net in ("management", "all"):
        cut += [p.ip for p in peers] + [_gateway(cluster)]
    for ip in cut:
        cluster.exec(node.index, ["ip", "route", "replace", "blackhole", f"{ip}/32"])
    who = ", ".join(p.name for p in peers) or "nobody"
    return (f"{node.name}: {net} cut off from {who}" + (" and the controller" if net != "fabric" else "")
            + f" (blackhole routes to {', '.join(cut) or 'nothing'})")


def _gateway(cluster) -> str:
    info = cluster.info() or {}
    if not info.get("gateway"):
        raise SimError(f"sim cluster {cluster.name}: no gateway in cluster.json (made by an older version?)")
    return info["gateway"]


def heal(cluster, node: NodeInfo, opts: dict) -> str:
    _no_opts("heal", opts)
    routes = cluster.exec(node.index, ["ip", "-4", "route", "show", "type", "blackhole"]).stdout
    for line in routes.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "blackhole":
            cluster.exec(node.index, ["ip", "route", "del", "blackhole", fields[1]])
    for dev in NETS["all"]:
        qdisc = cluster.exec(node.index, ["tc", "qdisc", "show", "dev", dev], check=False).stdout
        if re.search(r"qdisc (netem|tbf) ", qdisc):
            cluster.exec(node.index, ["tc", "qdisc", "del", "dev", dev, "root"])
    return f"{node.name}: network healed (blackholes and qdisc removed)"


def _number(kind: str, key: str, value, lo: float, hi: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SimInputError(f"fault {kind}: {key}={value!r} is not a number") from None
    if not lo <= v <= hi:
        raise SimInputError(f"fault {kind}: {key}={value} outside {lo}..{hi}")
    return v


def netem(cluster, node: NodeInfo, opts: dict) -> str:
    """Delay/loss on what the node sends over net=all (default), fabric or management."""
    unknown = set(opts) - {"delay", "jitter", "loss", "net"}
    if unknown or not set(opts) - {"net"}:
        raise SimInputError("fault netem takes delay=MS [jitter=MS] loss=PCT [net=fabric|management|all]")
    args = ["netem"]
    if "delay" in opts:
        args += ["delay", f"{_number('netem', 'delay', opts['delay'], 0, 60000):g}ms"]
        if "jitter" in opts:
            args.append(f"{_number('netem', 'jitter', opts['jitter'], 0, 60000):g}ms")
    if "loss" in opts:
        args += ["loss", f"{_number('netem', 'loss', opts['loss'], 0, 100):g}%"]
    devs = NETS[_net("netem", opts, "all")]
    for dev in devs:
        argv = ["tc", "qdisc", "replace", "dev", dev, "root", *args]
        res = cluster.exec(node.index, argv, check=False)
        if res.code != 0:
            if "unknown" in (res.stderr + res.stdout).lower():
                raise SimError("netem is not available: this kernel has no sch_netem "
                               "(CONFIG_NET_SCH_NETEM is not set); `throttle rate=...` (tbf) is")
            raise SimError(f"{node.name}: {' '.join(argv)} failed: {res.stderr.strip()}")
    return f"{node.name}: {' '.join(args)} on {', '.join(devs)}"


def throttle(cluster, node: NodeInfo, opts: dict) -> str:
    """A token bucket on what the node sends over net=all (default), fabric or management."""
    unknown = set(opts) - {"rate", "net"}
    rate = str(opts.get("rate", "10mbit"))
    if unknown or not re.fullmatch(r"\d+(\.\d+)?(bit|kbit|mbit|gbit)", rate):
        raise SimInputError("fault throttle takes rate=<N>(bit|kbit|mbit|gbit) [net=fabric|management|all], "
                            "e.g. rate=10mbit")
    devs = NETS[_net("throttle", opts, "all")]
    for dev in devs:
        cluster.exec(node.index, ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                                  "burst", "32kbit", "latency", "400ms"])
    return f"{node.name}: {', '.join(devs)} limited to {rate} (tbf)"


_RATE = re.compile(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)")
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def fabric_slow(cluster, node: NodeInfo, opts: dict) -> str:
    """The node's fabric link slowed to RATE: a token bucket (tbf) on what it sends over its fabric veth,
    its burst sized for the rate (10 ms of it) so the rate is what TCP gets, as a DAC negotiated down does."""
    rate = str(opts.get("rate", ""))
    m = _RATE.fullmatch(rate)
    if set(opts) - {"rate"} or not m or float(m.group(1)) <= 0:
        raise SimInputError("fault fabric-slow takes RATE as <N>(bit|kbit|mbit|gbit), e.g. `fabric-slow 500mbit`")
    burst = max(int(float(m.group(1)) * _BITS[m.group(2)] / 8 / 100), 16 * 1024)  # bytes: 10 ms at the rate
    argv = ["tc", "qdisc", "replace", "dev", FABRIC_IFACE, "root", "tbf", "rate", rate, "burst", str(burst),
            "latency", "50ms"]
    res = cluster.exec(node.index, argv, check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: {' '.join(argv)} failed: {res.stderr.strip()}")
    return f"{node.name}: fabric {FABRIC_IFACE} sends at most {rate} (tbf); `sim fault {node.name} heal` undoes it"


_GPU_KEYS = {"driver": ("driver", str), "clock": ("clock_mhz", int), "max_clock": ("max_clock_mhz", int),
             "name": ("name", str), "memory_mib": ("memory_mib", int), "cuda": ("cuda", str),
             "fail": ("fail", bool), "idle": ("idle", bool), "locked": ("clocks_locked", bool)}


def gpu(cluster, node: NodeInfo, opts: dict) -> str:
    from .node_files import DEFAULT_GPU

    unknown = set(opts) - set(_GPU_KEYS) - {"reset"}
    if unknown or not opts:
        raise SimInputError(f"fault gpu takes {', '.join(sorted(_GPU_KEYS))}=VALUE or reset=true")
    if faults_host._bool("gpu", opts.get("reset", False)):
        doc = dict(DEFAULT_GPU)
    else:
        doc = json.loads(cluster.exec(node.index, ["cat", GPU_FILE]).stdout)
    for key, value in opts.items():
        if key == "reset":
            continue
        field, typ = _GPU_KEYS[key]
        try:
            doc[field] = faults_host._bool("gpu", value, key) if typ is bool else typ(value)
        except ValueError:
            raise SimInputError(f"fault gpu: {key}={value!r} is not a {typ.__name__}") from None
    data = (json.dumps(doc, indent=2) + "\n").encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(GPU_FILE.rsplit("/", 1)[1])
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    if not cluster.container(node.index).put_archive("/etc", buf.getvalue()):
        raise SimError(f"{node.name}: writing {GPU_FILE} failed")
    return f"{node.name}: gpu now {json.dumps(doc, sort_keys=True)}"


def shared_jit(cluster, node: NodeInfo, opts: dict) -> str:
    _no_opts("shared-jit", opts)
    cluster.exec(node.index, ["mkdir", "-p", SHARED_JIT])
    provision.own_dirs(cluster.container(node.index), [SHARED_JIT])  # the login user's JIT dir, on NFS
    cluster.exec(node.index, ["rm", "-rf", "--", NODE_JIT_CACHE])
    cluster.exec(node.index, ["ln", "-sfn", SHARED_JIT, NODE_JIT_CACHE])
    return f"{node.name}: {NODE_JIT_CACHE} -> {SHARED_JIT} (shared by every node that has this fault)"


def local_jit(cluster, node: NodeInfo, opts: dict) -> str:
    _no_opts("local-jit", opts)
    cluster.exec(node.index, ["sh", "-c", '[ -L "$1" ] && rm -f -- "$1"; mkdir -p -- "$1"', "sh",
                              NODE_JIT_CACHE])
    provision.own_dirs(cluster.container(node.index), [NODE_JIT_CACHE])
    return f"{node.name}: {NODE_JIT_CACHE} is a local directory again"


def _port(kind: str, opts: dict) -> int:
    if set(opts) != {"port"}:
        raise SimInputError(f"fault {kind} takes PORT (port=N)")
    return int(_number(kind, "port", opts["port"], 1, 65535))


def occupy_port(cluster, node: NodeInfo, opts: dict) -> str:
    port = _port("occupy-port", opts)
    script = ('echo $$ > /run/sim-port-"$1".pid; '
              'exec python3 -m http.server --bind 0.0.0.0 "$1" >/var/log/sim-port-"$1".log 2>&1')
    cluster.container(node.index).exec_run(["sh", "-c", script, "sh", str(port)], detach=True,
                                           workdir="/tmp")
    _until_port(node, port, True, 15, f"occupy port {port} on {node.name}")
    return f"{node.name}: port {port} taken by python3 -m http.server"


def free_port(cluster, node: NodeInfo, opts: dict) -> str:
    port = _port("free-port", opts)
    cluster.exec(node.index, ["sh", "-c", 'f=/run/sim-port-"$1".pid; [ ! -s "$f" ] || '
                              '{ kill "$(cat "$f")" 2>/dev/null; rm -f "$f"; }; true', "sh", str(port)])
    _until_port(node, port, False, 15, f"free port {port} on {node.name}")  # released: nothing answers
    return f"{node.name}: port {port} released"


DOCKER_TMP = "/var/lib/docker/tmp"  # where the node's dockerd stages what `docker load`/`docker pull` receive
FILL_SPEC = "/etc/sim-fill-disk"  # the tmpfs size, read by the node's sim-boot


def fill_disk(cluster, node: NodeInfo, opts: dict) -> str:
    """A full disk for everything the engine receives: a small tmpfs over its staging directory, so a
    `docker load` fails with the kernel's own ENOSPC once `free` bytes are written (images stay)."""
    unknown = set(opts) - {"free"}
    free = str(opts.get("free", "8m"))
    if unknown or not re.fullmatch(r"\d+[kmg]?", free):
        raise SimInputError("fault fill-disk takes free=<N>[k|m|g], e.g. free=8m")
    # kept in /etc so a reboot keeps the disk full; the node's `sim-boot fill-disk` (re)mounts it
    faults_host.put_file(cluster, node, FILL_SPEC, f"{free}\n".encode(), 0o644)
    cluster.exec(node.index, ["sim-boot", "fill-disk"])

    def check() -> None:
        if cluster.exec(node.index, ["mountpoint", "-q", DOCKER_TMP], check=False).code != 0:
            raise _Pending(f"{DOCKER_TMP} is not mounted")

    _poll(check, 10, f"fill-disk on {node.name}")
    return f"{node.name}: only {free} free for what its Docker engine receives ({DOCKER_TMP} is a {free} tmpfs)"


def free_disk(cluster, node: NodeInfo, opts: dict) -> str:
    _no_opts("free-disk", opts)
    cluster.exec(node.index, ["rm", "-f", "--", FILL_SPEC])
    cluster.exec(node.index, ["sim-boot", "fill-disk"])  # no spec: unmounts every tmpfs over DOCKER_TMP
    return f"{node.name}: {DOCKER_TMP} is on the node's Docker volume again"


def reboot(cluster, node: NodeInfo, opts: dict) -> str:
    """Restart the node container: an orderly shutdown (systemd: SIGRTMIN+3; docker-init: SIGTERM to
    sim-entrypoint), then a boot where systemd, dockerd and restart policies act as they do on a real one."""
    unknown = set(opts) - {"timeout"}
    if unknown:
        raise SimInputError("fault reboot takes [timeout=SECONDS] (bound on getting ready again; default 120)")
    timeout = _number("reboot", "timeout", opts.get("timeout", 120), 5, 1800)
    return cluster.reboot(node.index, ready_timeout=timeout).describe()


KINDS: dict[str, Callable] = {
    "stop-sshd": lambda c, n, o: _service(c, n, "stop", "sshd", o),
    "start-sshd": lambda c, n, o: _service(c, n, "start", "sshd", o),
    "stop-dockerd": lambda c, n, o: _service(c, n, "stop", "dockerd", o),
    "start-dockerd": lambda c, n, o: _service(c, n, "start", "dockerd", o),
    "partition": partition,
    "heal": heal,
    "netem": netem,
    "throttle": throttle,
    "fabric-slow": fabric_slow,
    "gpu": gpu,
    "shared-jit": shared_jit,
    "local-jit": local_jit,
    "occupy-port": occupy_port,
    "free-port": free_port,
    "fill-disk": fill_disk,
    "free-disk": free_disk,
    "model-remove-shard": faults_model.remove_shard,
    "model-change-blob": faults_model.change_blob,
    "model-incomplete": faults_model.incomplete,
    "model-reset": faults_model.reset,
    "meminfo": faults_host.meminfo,
    "mtu": faults_host.mtu,
    "kernel": faults_host.kernel,
    "earlyoom": faults_host.earlyoom,
    "stall": faults_host.stall,
    "roce": faults_roce.roce,
    "reboot": reboot,
}


def apply(cluster, node: NodeInfo, kind: str, **opts) -> str:
    if kind not in KINDS:
        raise SimInputError(f"unknown fault {kind!r}; kinds: {', '.join(KINDS)}")
    return KINDS[kind](cluster, node, opts)
