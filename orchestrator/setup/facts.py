"""What `setup` reads on each node, read only: a constant script plus a pure parser per fact.

Gathered in ONE SSH round trip per node with the facts driver (facts/core.py): every script runs at
once, framed. The parsers are unit-tested on captured outputs (tests/unit/test_setup_facts.py).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..checks import writable
from ..config.inventory import Node
from ..facts.disk import NETWORK_FS
from ..facts.memory import EarlyOom, MemInfo, parse_earlyoom, parse_meminfo
from ..facts.core import DRIVER, Fact, Observed, parse_framed
from ..transport.node import NodeConnection

__all__ = ["EarlyOom", "MemInfo", "NETWORK_FS", "gather", "FACTS"]


@dataclass(frozen=True)
class Link:
    name: str
    operstate: str
    mtu: int
    ipv4: tuple[tuple[str, int], ...]  # (address, prefix length)
    loopback: bool = False

    @property
    def up(self) -> bool:
        return self.operstate == "UP" or (self.operstate == "UNKNOWN" and not self.loopback)

    def network(self, addr: str) -> ipaddress.IPv4Network:
        prefix = dict(self.ipv4)[addr]
        return ipaddress.ip_network(f"{addr}/{prefix}", strict=False)


def parse_links(stdout: str) -> dict[str, Link]:
    """`ip -j addr` -> links by name with their IPv4 addresses and prefix lengths."""
    out: dict[str, Link] = {}
    for entry in json.loads(stdout or "[]"):
        name = entry.get("ifname")
        if not name:
            continue  # some iproute2 versions print {} for a link that vanished meanwhile
        v4 = tuple((str(ipaddress.ip_address(a["local"])), int(a.get("prefixlen", 32)))
                   for a in entry.get("addr_info", []) if a.get("family") == "inet" and a.get("local"))
        out[name] = Link(name, entry.get("operstate", "UNKNOWN"), int(entry.get("mtu", 0)), v4,
                         entry.get("link_type") == "loopback")
    return out


def parse_default_route(stdout: str) -> str | None:
    """`ip -j -4 route show default` -> the device of the first default route (None: there is none)."""
    routes = json.loads(stdout or "[]")
    return next((r["dev"] for r in routes if r.get("dev")), None)


_SPEEDS = r'''for d in /sys/class/net/*; do
  s=$(cat "$d/speed" 2>/dev/null) || s=?
  printf '%s %s\n' "${d##*/}" "${s:-?}"
done'''


def parse_speeds(stdout: str) -> dict[str, int | None]:
    """`NAME MBIT` per line from /sys/class/net/*/speed; a link without carrier reads EINVAL or -1: None."""
    out: dict[str, int | None] = {}
    for line in stdout.splitlines():
        name, _, value = line.strip().partition(" ")
        if name:
            out[name] = int(value) if value.lstrip("-").isdigit() and int(value) > 0 else None
    return out


# The rated speed of every link: the fastest mode ethtool lists under "Supported link modes" (a DAC or port
# negotiated below it still reads its lower speed in /sys/class/net/*/speed). Without ethtool: one line saying so.
_RATED = r'''command -v ethtool >/dev/null 2>&1 || { echo "no ethtool"; exit 0; }
for d in /sys/class/net/*; do
  n=${d##*/}
  echo "== $n"
  ethtool "$n" 2>/dev/null | sed -n '/Supported link modes:/,/Supported pause frame use:/p'
done'''


def parse_rated(stdout: str) -> dict[str, int | None] | None:
    """ethtool's supported link modes per link -> the fastest in Mb/s (`200000baseCR4/Full` -> 200000); a link
    that reports none (a veth, "Not reported") -> None; no ethtool on the node at all -> None."""
    if stdout.strip() == "no ethtool":
        return None
    out: dict[str, int | None] = {}
    name = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            out[name] = None
            continue
        if name is None or "Supported pause" in line:
            continue
        modes = [int(m) for m in re.findall(r"\b(\d+)base", line)]
        if modes:
            out[name] = max([out[name] or 0, *modes])
    return out


# Per HCA port: an ibdev2netdev line (the port's netdev from its GIDs' ndevs, its state), then every used
# GID as `gid HCA PORT INDEX GID TYPE NDEV` (tab separated; the type holds a space: "RoCE v2").
_ROCE = r'''d=/sys/class/infiniband
[ -d "$d" ] || { echo absent; exit 0; }
for h in "$d"/*; do
  for p in "$h"/ports/*; do
    hca=${h##*/}; port=${p##*/}; ndev=
    for t in "$p"/gid_attrs/types/*; do
      i=${t##*/}
      type=$(cat "$t" 2>/dev/null) || continue
      gid=$(cat "$p/gids/$i" 2>/dev/null) || continue
      n=$(cat "$p/gid_attrs/ndevs/$i" 2>/dev/null) || n=
      [ -n "$n" ] && ndev=$n
      printf 'gid\t%s\t%s\t%s\t%s\t%s\t%s\n' "$hca" "$port" "$i" "$gid" "$type" "$n"
    done
    state=$(cat "$p/state" 2>/dev/null); state=${state#*: }
    case $state in ACTIVE) s=Up ;; *) s=Down ;; esac
    printf '%s port %s ==> %s (%s)\n' "$hca" "$port" "${ndev:-?}" "$s"
  done
done'''


@dataclass(frozen=True)
class HcaPort:
    hca: str
    port: str
    netdev: str
    up: bool


@dataclass(frozen=True)
class Gid:
    hca: str
    port: str
    index: int
    gid: str
    type: str
    netdev: str


@dataclass(frozen=True)
class Roce:
    present: bool
    ports: tuple[HcaPort, ...] = ()
    gids: tuple[Gid, ...] = ()


def parse_ibdev2netdev(stdout: str) -> list[HcaPort]:
    """`ibdev2netdev` lines (`rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)`) -> HCA ports and their netdevs."""
    out = []
    for line in stdout.splitlines():
        words = line.split()
        if len(words) >= 5 and words[1] == "port" and words[3] == "==>":
            state = words[5].strip("()") if len(words) > 5 else ""
            out.append(HcaPort(words[0], words[2], words[4], state == "Up"))
    return out


def parse_roce(stdout: str) -> Roce:
    """The `_ROCE` script -> the HCA ports (ibdev2netdev's format) and their used GIDs."""
    if stdout.strip() == "absent":
        return Roce(False)
    gids = []
    for line in stdout.splitlines():
        if line.startswith("gid\t"):
            _, hca, port, index, gid, kind, ndev = (line.split("\t") + [""] * 7)[:7]
            gids.append(Gid(hca, port, int(index), gid.strip(), kind.strip(), ndev.strip()))
    return Roce(True, tuple(parse_ibdev2netdev(stdout)), tuple(gids))


@dataclass(frozen=True)
class Docker:
    permitted: bool
    version: str = ""
    driver: str = ""
    runtimes: tuple[str, ...] = ()
    default_runtime: str = ""
    error: str = ""  # why the user cannot use the engine, as docker said it
    hook: str = ""  # nvidia-container-runtime-hook's path: what `--gpus` runs (docker >= 19.03)

    @property
    def nvidia(self) -> str:
        """How `--gpus` reaches the GPU here ("" when it cannot)."""
        if "nvidia" in self.runtimes:
            return "nvidia runtime"
        return f"nvidia hook {self.hook}" if self.hook else ""


_DOCKER = r'''out=$(docker info --format '{{json .}}' 2>&1); rc=$?
echo "rc $rc"
echo "hook $(command -v nvidia-container-runtime-hook)"
printf '%s\n' "$out"'''


def parse_docker(stdout: str) -> Docker:
    """`docker info --format '{{json .}}'` run as the login user (its exit code and the NVIDIA hook's path
    first) -> the engine, or why the user may not use it (permission denied on the socket: not in the
    docker group)."""
    head, _, rest = stdout.partition("\n")
    if not head.startswith("rc "):
        raise ValueError(f"no exit code line: {head[:80]!r}")
    rc = int(head[3:])
    hook = ""
    if rest.startswith("hook"):
        hook_line, _, rest = rest.partition("\n")
        hook = hook_line[4:].strip()
    body = rest.strip()
    start = body.find("{")
    if rc != 0 or start < 0:
        said = [line for line in body.splitlines() if line.strip()]
        return Docker(False, error=(said[-1] if said else f"docker info exited {rc}")[:300], hook=hook)
    data = json.loads(body[start:])
    if data.get("ServerErrors") or not data.get("ServerVersion"):
        return Docker(False, error="; ".join(data.get("ServerErrors") or ["no server version"])[:300], hook=hook)
    return Docker(True, data["ServerVersion"], data.get("Driver", ""), tuple(sorted(data.get("Runtimes") or {})),
                  data.get("DefaultRuntime", ""), hook=hook)


def parse_user(stdout: str) -> tuple[str, tuple[str, ...]]:
    """`id -un; id -Gn` -> (user, groups)."""
    lines = [line.strip() for line in stdout.splitlines()]
    if len(lines) < 2 or not lines[0]:
        raise ValueError("id printed no user")
    return lines[0], tuple(lines[1].split())


@dataclass(frozen=True)
class HfCache:
    path: str
    source: str  # HF_HOME, default, found
    models: int


# HF_HOME, then the default (~/.cache/huggingface), then any dir holding hub/models--* a few levels under
# the usual data roots. Prints `SOURCE<TAB>PATH<TAB>MODELS` per candidate (MODELS: dirs under PATH/hub).
_HF = r'''count() { ls -d -- "$1"/hub/models--* 2>/dev/null | wc -l; }
[ -n "$HF_HOME" ] && printf 'HF_HOME\t%s\t%s\n' "$HF_HOME" "$(count "$HF_HOME")"
printf 'default\t%s\t%s\n' "$HOME/.cache/huggingface" "$(count "$HOME/.cache/huggingface")"
for root in /srv /data /mnt /opt /home /var/lib; do
  [ -d "$root" ] || continue
  find "$root" -xdev -maxdepth 4 -type d -name 'models--*' -path '*/hub/*' 2>/dev/null
done | sed 's#/hub/models--[^/]*$##' | sort -u | while read -r c; do
  printf 'found\t%s\t%s\n' "$c" "$(count "$c")"
done'''


def parse_hf(stdout: str) -> list[HfCache]:
    out: list[HfCache] = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip().isdigit():
            out.append(HfCache(parts[1], parts[0], int(parts[2])))
    if not out:
        raise ValueError("no HF cache candidate printed")
    return out


@dataclass(frozen=True)
class JitCandidate:
    path: str
    exists: bool
    writable: bool  # the dir, or (absent) the nearest existing parent, is writable by the user
    fstype: str


# "$@" candidate paths. Per path: `PATH<TAB>exists|absent<TAB>writable|readonly<TAB>FSTYPE` (of the path or
# its nearest existing parent: what the directory will be on).
_JIT = r'''for c in "$@"; do
  c=${c/#\~/$HOME}; p=$c; e=exists
  while [ ! -e "$p" ]; do p=$(dirname -- "$p"); e=absent; done
  if [ -w "$p" ] && [ -d "$p" ]; then w=writable; else w=readonly; fi
  printf '%s\t%s\t%s\t%s\n' "$c" "$e" "$w" "$(stat -f -c %T -- "$p")"
done'''

JIT_CANDIDATES = ("/var/cache/vllm-jit", "~/.cache/vllm-jit")


def parse_jit(stdout: str) -> list[JitCandidate]:
    out = []
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            out.append(JitCandidate(parts[0], parts[1] == "exists", parts[2] == "writable", parts[3].strip()))
    return out


def parse_gpus(stdout: str) -> int:
    """`nvidia-smi -L` -> how many GPUs it lists."""
    count = sum(1 for line in stdout.splitlines() if line.startswith("GPU "))
    if count == 0:
        raise ValueError("nvidia-smi -L listed no GPU")
    return count


def parse_hostname(stdout: str) -> str:
    value = stdout.strip()
    if not value:
        raise ValueError("hostname printed nothing")
    return value


STATE_DIR = Node.model_fields["state_dir"].default  # what the inventory leaves it at


def parse_state_dir(stdout: str) -> tuple[bool, str, str]:
    """checks/writable.py's probe of the default state dir -> (usable, what was seen, the login user)."""
    if not stdout.startswith("user "):
        raise ValueError(f"unexpected probe output {stdout[:80]!r}")
    return writable.parse(stdout, STATE_DIR)


def _fact(name: str, script: str, parse: Callable[[str], Any], args: Callable[[Any], list[str]] | None = None,
          ok_codes: tuple[int, ...] = (0,)) -> Fact:
    return Fact(name, script, parse, args or (lambda _i: []), ok_codes)


FACTS: dict[str, Fact] = {f.name: f for f in (
    _fact("hostname", "hostname -s", parse_hostname),
    _fact("links", "ip -j addr", parse_links),
    _fact("default_route", "ip -j -4 route show default", parse_default_route),
    _fact("speeds", _SPEEDS, parse_speeds),
    _fact("rated", _RATED, parse_rated),
    _fact("roce", _ROCE, parse_roce),
    _fact("docker", _DOCKER, parse_docker),
    _fact("user", "id -un; id -Gn", parse_user),
    _fact("hf_cache", _HF, parse_hf),
    _fact("jit_cache", _JIT, parse_jit, args=lambda _i: list(JIT_CANDIDATES)),
    _fact("earlyoom", "pgrep -a -x earlyoom", parse_earlyoom, ok_codes=(0, 1)),
    _fact("meminfo", "cat /proc/meminfo", parse_meminfo),
    _fact("gpus", "nvidia-smi -L", parse_gpus),
    _fact("state_dir", writable.PROBE, parse_state_dir, args=lambda _i: [STATE_DIR]),
)}


def run_facts(conn: NodeConnection, facts: list[Fact], given: Any = None, timeout: float = 60) -> dict[str, Observed]:
    """Every fact on one node in one round trip (preflight's driver); a fact that printed nothing says so."""
    argv: list[str] = []
    for f in facts:
        args = [str(a) for a in f.args(given)]
        argv += [f.name, f.script, str(len(args)), *args]
    result = conn.run_script(DRIVER, *argv, timeout=timeout, check=True)
    seen = parse_framed(result.stdout, {f.name: f for f in facts})
    for f in facts:
        seen.setdefault(f.name, Observed(error="the fact printed nothing (the driver stopped early)"))
    return seen


def gather(conn: NodeConnection) -> dict[str, Observed]:
    return run_facts(conn, list(FACTS.values()))
