"""Host faults for preflight's memory, fabric and kernel checks: each a real change inside ONE node container.

- `meminfo [available=SIZE] [total=SIZE] [swap=SIZE]`: the node's IDLE memory, what sim-memory (the node's
  daemon, node_memory.py) shows in /proc/meminfo before a running vLLM's claim is taken off it. It is a
  bind-mounted copy in the node's mount namespace (sshd and every SSH command see it; the host and the
  other nodes do not); the kernel's own accounting is untouched. The values are kept in
  /etc/sim-meminfo.json, so a `reboot` keeps the node's memory (like the hardware's). Every node starts at
  a DGX Spark's figures (node_memory.SPARK: the machine running the sim has far less memory than a GB10);
  what a value leaves out stays a Spark's; `reset=true` goes back to those.
- `mtu mtu=N [dev=enp1s0f0np0]`: `ip link set dev DEV mtu N` (a real MTU change of the node's interface);
  `reset=true` restores the MTU saved at the first change.
- `kernel release=STR`: a wrapper /usr/local/bin/uname (ahead of /usr/bin on the SSH user's PATH) that
  prints STR for `uname -r` and runs the real uname otherwise. It fakes only what `uname -r` prints through
  PATH: the kernel, /proc/sys/kernel/osrelease and `uname -a` stay real. `reset=true` removes it.
"""

from __future__ import annotations

import io
import json
import re
import tarfile

from .node_memory import SPARK
from .state import FABRIC_IFACE, NodeInfo, SimError, SimInputError

IFACE = FABRIC_IFACE  # the fabric port: what NCCL and the image copies use

MEMINFO_SPEC = "/etc/sim-meminfo.json"  # read by the node's sim-memory
# A GB10's 128 GB of unified memory as Linux reports it (MemTotal ~119.7 GiB), with the OS using ~4 GiB.
SPARK_MEMINFO = {"total": str(SPARK["MemTotal"]), "available": str(SPARK["MemAvailable"]),
                 "swap": str(SPARK["SwapTotal"])}  # kB
UNAME_WRAPPER = "/usr/local/bin/uname"
MTU_SAVED = "/run/sim-mtu-{dev}"

_SIZE = re.compile(r"(\d+)([kmgt]?)i?b?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1, "m": 1 << 10, "g": 1 << 20, "t": 1 << 30}  # in kB (KiB), as /proc/meminfo counts


def _bool(kind: str, value, key: str = "reset") -> bool:
    """A fault option's yes/no (true/false, 1/0, on/off); bad input names the fault and the key."""
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SimInputError(f"fault {kind}: {key}={value!r} is not a boolean")


def _kib(kind: str, key: str, value) -> int:
    """`2g`, `512m`, `1048576` (kB) -> kB."""
    m = _SIZE.fullmatch(str(value).strip())
    if not m:
        raise SimInputError(f"fault {kind}: {key}={value!r} is not a size (e.g. 2g, 512m, or kB)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def put_file(cluster, node: NodeInfo, path: str, data: bytes, mode: int) -> None:
    directory, name = path.rsplit("/", 1)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))
    if not cluster.container(node.index).put_archive(directory, buf.getvalue()):
        raise SimError(f"{node.name}: writing {path} failed")


def meminfo(cluster, node: NodeInfo, opts: dict) -> str:
    unknown = set(opts) - {"available", "total", "swap", "reset"}
    if unknown or not opts or ("reset" in opts and len(opts) > 1):
        raise SimInputError("fault meminfo takes [available=SIZE] [total=SIZE] [swap=SIZE], or reset=true")
    if "reset" in opts:
        if not _bool("meminfo", opts["reset"]):
            raise SimInputError("fault meminfo: reset=false does nothing")
        return meminfo(cluster, node, dict(SPARK_MEMINFO)).replace("idles at", "is back at a Spark's:", 1)
    keys = {"available": "MemAvailable", "total": "MemTotal", "swap": "SwapTotal"}
    want = {keys[k]: _kib("meminfo", k, v) for k, v in opts.items()}
    spec = {**SPARK, **want}
    if spec["MemAvailable"] > spec["MemTotal"]:
        raise SimInputError(f"fault meminfo: available ({spec['MemAvailable']} kB) is more than total "
                            f"({spec['MemTotal']} kB)")
    # the spec lives in /etc (kept across a reboot); the node's sim-memory re-reads it and shows the idle
    # figures less what runs, in the bind-mounted copy it keeps over /proc/meminfo
    put_file(cluster, node, MEMINFO_SPEC, (json.dumps(spec, sort_keys=True) + "\n").encode(), 0o644)
    shown = json.loads(cluster.exec(node.index, ["sim-memory", "reload"]).stdout)
    for attempt in range(3):  # a claim may end between the two reads (earlyoom acting on the new figures)
        seen = cluster.exec(node.index, ["cat", "/proc/meminfo"]).stdout
        wrong = _meminfo_differs(seen, shown)
        if not wrong:
            break
        if attempt == 2:
            raise SimError(f"{node.name}: /proc/meminfo shows {wrong[0]}, sim-memory says {wrong[1]}")
        shown = json.loads(cluster.exec(node.index, ["sim-memory", "show"]).stdout)
    claimed = sum(c["kb"] for c in shown["claims"])
    return (f"{node.name}: idles at MemTotal {spec['MemTotal']} kB, MemAvailable {spec['MemAvailable']} kB, "
            f"SwapTotal {spec['SwapTotal']} kB" + (f" (now {shown['MemAvailable']} kB: {claimed} kB claimed)"
                                                    if claimed else ""))


def _meminfo_differs(seen: str, shown: dict) -> tuple[str, str] | None:
    """The first of MemTotal, MemAvailable, SwapTotal where /proc/meminfo and sim-memory's state disagree."""
    for key in ("MemTotal", "MemAvailable", "SwapTotal"):
        line = re.search(rf"^{key}:\s+(\d+) kB$", seen, re.MULTILINE)
        if line is None or int(line.group(1)) != shown[key]:
            return (repr(line.group(0)) if line else f"no {key}", f"{key} {shown[key]} kB")
    return None


def mtu(cluster, node: NodeInfo, opts: dict) -> str:
    unknown = set(opts) - {"mtu", "dev", "reset"}
    dev = str(opts.get("dev", IFACE))
    if unknown or ("mtu" in opts) == ("reset" in opts) or not re.fullmatch(r"[A-Za-z0-9_.@-]{1,15}", dev):
        raise SimInputError("fault mtu takes mtu=N [dev=IFACE], or reset=true [dev=IFACE]")
    saved = MTU_SAVED.format(dev=dev)
    if "reset" in opts:
        if not _bool("mtu", opts["reset"]):
            raise SimInputError("fault mtu: reset=false does nothing")
        script = '[ -s "$1" ] && ip link set dev "$2" mtu "$(cat "$1")" && rm -f -- "$1" && cat "/sys/class/net/$2/mtu"'
        res = cluster.exec(node.index, ["sh", "-c", script, "sh", saved, dev], check=False)
        if res.code != 0:
            return f"{node.name}: {dev} MTU was not changed by a fault (nothing to reset)"
        return f"{node.name}: {dev} mtu {res.stdout.strip()} again"
    try:
        value = int(opts["mtu"])
    except ValueError:
        raise SimInputError(f"fault mtu: mtu={opts['mtu']!r} is not a number") from None
    if not 68 <= value <= 65535:
        raise SimInputError(f"fault mtu: mtu={value} outside 68..65535")
    cluster.exec(node.index, ["sh", "-c", '[ -s "$1" ] || cat "/sys/class/net/$2/mtu" > "$1"', "sh", saved, dev])
    res = cluster.exec(node.index, ["ip", "link", "set", "dev", dev, "mtu", str(value)], check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: ip link set dev {dev} mtu {value} failed: {res.stderr.strip()}")
    now = cluster.exec(node.index, ["cat", f"/sys/class/net/{dev}/mtu"]).stdout.strip()
    if now != str(value):
        raise SimError(f"{node.name}: {dev} mtu is {now} after setting {value}")
    return f"{node.name}: {dev} mtu {value}"


_WRAPPER = """#!/bin/sh
# spark-deploy sim fault `kernel`: fakes what `uname -r` prints on PATH; the kernel itself is unchanged.
if [ "$#" -eq 1 ] && { [ "$1" = -r ] || [ "$1" = --kernel-release ]; }; then
  echo {release}
  exit 0
fi
exec /usr/bin/uname "$@"
"""


def kernel(cluster, node: NodeInfo, opts: dict) -> str:
    if set(opts) not in ({"release"}, {"reset"}):
        raise SimInputError("fault kernel takes release=STRING (what `uname -r` prints), or reset=true")
    if "reset" in opts:
        if not _bool("kernel", opts["reset"]):
            raise SimInputError("fault kernel: reset=false does nothing")
        cluster.exec(node.index, ["rm", "-f", "--", UNAME_WRAPPER])
        return f"{node.name}: uname is the real one again"
    release = str(opts["release"])
    if not re.fullmatch(r"[A-Za-z0-9._+~-]{1,64}", release):
        raise SimInputError(f"fault kernel: release={release!r} must be 1-64 of A-Z a-z 0-9 . _ + ~ -")
    put_file(cluster, node, UNAME_WRAPPER, _WRAPPER.replace("{release}", release).encode(), 0o755)
    seen = cluster.exec(node.index, ["sh", "-lc", "uname -r"]).stdout.strip()
    if seen != release:
        raise SimError(f"{node.name}: `uname -r` prints {seen!r} after installing the wrapper")
    return f"{node.name}: `uname -r` prints {release} (wrapper {UNAME_WRAPPER}; the kernel is unchanged)"


EARLYOOM_PID = "/run/sim-earlyoom.pid"
# "$1" = -m PERCENT. Real earlyoom (Debian's), reading the node's /proc/meminfo (a Spark's, bind-mounted);
# -r 3600: one report line an hour, as Debian's /etc/default/earlyoom has it. Detached; its pid kept.
_EARLYOOM_START = ('[ ! -s "$2" ] || kill "$(cat "$2")" 2>/dev/null; '
                   'setsid nohup earlyoom -m "$1" -r 3600 >>/var/log/sim-earlyoom.log 2>&1 </dev/null & '
                   'echo $! > "$2"')
_EARLYOOM_STOP = 'f=$1; [ ! -s "$f" ] || { kill "$(cat "$f")" 2>/dev/null; rm -f "$f"; }; true'


def earlyoom(cluster, node: NodeInfo, opts: dict) -> str:
    """Run the real earlyoom on the node with `-m PERCENT` (field note 8: 0.835 left ~2 GiB and earlyoom
    killed the service), or stop it. A threshold the node's memory is already under is refused: earlyoom
    would at once kill the node's largest process (its dockerd) instead of modelling a Spark."""
    if set(opts) == {"stop"}:
        if not _bool("earlyoom", opts["stop"], "stop"):
            raise SimInputError("fault earlyoom: stop=false does nothing")
        cluster.exec(node.index, ["sh", "-c", _EARLYOOM_STOP, "sh", EARLYOOM_PID])
        return f"{node.name}: earlyoom stopped"
    if set(opts) != {"m"}:
        raise SimInputError("fault earlyoom takes m=PERCENT (earlyoom -m: SIGTERM below that % available), "
                            "or stop=true")
    try:
        percent = float(opts["m"])
    except ValueError:
        raise SimInputError(f"fault earlyoom: m={opts['m']!r} is not a number") from None
    if not 1 <= percent <= 90:
        raise SimInputError(f"fault earlyoom: m={opts['m']} is outside 1-90")
    seen = cluster.exec(node.index, ["cat", "/proc/meminfo"]).stdout
    kb = {k: int(v) for k, v in re.findall(r"^(MemTotal|MemAvailable|SwapTotal|SwapFree):\s+(\d+) kB$", seen,
                                           re.MULTILINE)}
    swap_pct = 100 * kb.get("SwapFree", 0) / kb["SwapTotal"] if kb.get("SwapTotal") else 0.0
    if kb["MemAvailable"] * 100 <= percent * kb["MemTotal"] and swap_pct <= 10:  # earlyoom's rule, -s 10
        raise SimInputError(f"fault earlyoom: {node.name} has only {100 * kb['MemAvailable'] / kb['MemTotal']:.1f}% "
                            f"available and {swap_pct:.0f}% swap free: earlyoom -m {opts['m']} would start killing "
                            "at once")
    if cluster.exec(node.index, ["sh", "-c", "command -v earlyoom"], check=False).code != 0:
        raise SimError(f"{node.name}: no earlyoom in this node image (rebuild: `spark-deploy sim images`)")
    cluster.exec(node.index, ["sh", "-c", _EARLYOOM_START, "sh", opts["m"], EARLYOOM_PID])
    for _ in range(50):  # bounded: earlyoom is up once pgrep sees it with our threshold
        found = cluster.exec(node.index, ["pgrep", "-a", "-x", "earlyoom"], check=False).stdout
        if f"-m {opts['m']}" in found:
            return f"{node.name}: earlyoom -m {opts['m']} runs ({found.split()[0]})"
        cluster.exec(node.index, ["sleep", "0.1"])
    raise SimError(f"{node.name}: earlyoom did not start; see /var/log/sim-earlyoom.log in the node")


_STALL = ('ids=$(docker ps -q --filter label=spark-deploy.managed=true --filter status=running); '
          '[ -n "$ids" ] || { echo "no running spark-deploy container"; exit 3; }; '
          'docker kill --signal USR1 $ids >/dev/null && echo $ids')


def stall(cluster, node: NodeInfo, opts: dict) -> str:
    """The engine of every running spark-deploy container on the node stops generating while its process and
    container run on and /health answers 200 (the stand-in's SIGUSR1: its scheduler stuck). Undone only by
    the container's restart (what the reset does: it removes the containers)."""
    if opts:
        raise SimInputError(f"fault stall takes no options, got {sorted(opts)}")
    done = cluster.exec(node.index, ["sh", "-c", _STALL], check=False)
    if done.code != 0:
        raise SimError(f"{node.name}: fault stall: {(done.stdout + done.stderr).strip()}")
    return f"{node.name}: engine stalled in {len(done.stdout.split())} container(s) (/health still 200)"
