"""A simulated node's condition, as a fact: one shell probe (run in the node) and a pure parser.

The shared test clusters are reset between tests by comparing each node's condition with the one it had
when it was made (its baseline) and undoing every difference (sim/reset.py). Everything a test or a fault
can change is an `Aspect` here, so "is this node clean?" has one answer: `differences(baseline, now)`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .state import NODE_JIT_CACHE, NODE_STATE_DIR, SHARED_MOUNT

# Kept in step with the faults that make them (faults.py, faults_host.py); imported there from here would
# be circular, so the tests of the reset assert the two agree.
GPU_FILE = "/etc/sim-gpu.json"
MEMINFO_SPEC = "/etc/sim-meminfo.json"
FILL_SPEC = "/etc/sim-fill-disk"
UNAME_WRAPPER = "/usr/local/bin/uname"
DOCKER_TMP = "/var/lib/docker/tmp"
MODEL_DIR = "/srv/hf-cache/hub"
UNIT_DIR = "/etc/systemd/system"
COPY_MARKERS = ("docker save", "docker load", "sdsend", "sdrecv", "dd bs=1M", "http.server", "earlyoom")


class Aspect(str, enum.Enum):
    """One thing about a node that a test can change. `residue` ones are what tests make by doing their
    job (containers, releases, images) and are cleared silently; the others are faults or damage."""
    DOCKERD = "dockerd"
    SSHD = "sshd"
    HOST_KEY = "host-key"
    SSH_TRUST = "ssh-trust"
    SYSTEM = "system"
    INTERFACES = "interfaces"
    CONTAINERS = "containers"
    IMAGES = "images"
    STATE = "state"
    UNITS = "units"
    PROCESSES = "processes"
    ROUTES = "routes"
    QDISC = "qdisc"
    IPTABLES = "iptables"
    MTU = "mtu"
    GPU = "gpu"
    MEMINFO = "meminfo"
    FILL_DISK = "fill-disk"
    KERNEL = "kernel"
    PORTS = "ports"
    JIT = "jit"
    SHARED = "shared"
    MODEL = "model"
    SUDOERS = "sudoers"

    @property
    def residue(self) -> bool:
        return self in _RESIDUE


# ssh-trust: node-to-node ssh (a direct image copy) lets OpenSSH add the peer's other host keys to
# known_hosts (UpdateHostKeys), as it does on real nodes; system: a unit a test stopped stays "failed"
_RESIDUE = {Aspect.CONTAINERS, Aspect.IMAGES, Aspect.STATE, Aspect.UNITS, Aspect.JIT, Aspect.SHARED,
            Aspect.SSH_TRUST, Aspect.SYSTEM}

# One POSIX sh script: each line "ASPECT<TAB>value". Read only; every command bounded by what it reads.
# dockerd counts as down only after five failed `docker info` a second apart (a loaded host can fail one).
# It first waits (bounded, 15 s) for a node's last image command: an interrupted `up` can leave the undo's
# `docker image rm` or a torn-down `docker load` running a moment after the controller's side has ended,
# and what the probe sees must not change under it (nor a reset load an image such a command then removes).
# meminfo is the idle spec and whether /proc/meminfo is sim-memory's (MemTotal), not MemAvailable: what
# running vLLMs claim goes with their containers (residue), however long the daemon takes to see them end.
# iptables leaves out the engine's embedded-DNS rules (127.0.0.11, a new port at every node start).
PROBE_SH = r"""
for _ in $(seq 1 150); do pgrep -f "^docker (load|save|image|rmi|tag|pull|import)" >/dev/null || break; sleep 0.1; done
p() { printf '%s\t%s\n' "$1" "$2"; }
up=; for _ in 1 2 3 4 5; do docker info --format '{{.ServerVersion}}' >/dev/null 2>&1 && { up=1; break; }; sleep 1; done
if [ -n "$up" ]; then p dockerd up
  docker ps -a --no-trunc --format '{{.ID}} {{.Names}} {{.Image}}' 2>/dev/null | while read -r l; do p containers "$l"; done
  docker image ls -aq --no-trunc 2>/dev/null | sort -u | while read -r l; do p images "$l"; done
else p dockerd down; fi
if pgrep -x sshd >/dev/null 2>&1; then p sshd up; else p sshd down; fi
p host-key "$(cat /etc/ssh/ssh_host_ed25519_key.pub 2>/dev/null | cut -d' ' -f2)"
for d in /sys/class/net/*; do n=${d##*/}; case $n in lo|docker0|veth*|br-*) ;; *) p interfaces "$n"; p mtu "$n $(cat "$d/mtu")";; esac; done
for d in /sys/class/net/*; do n=${d##*/}; [ "$n" = lo ] || tc qdisc show dev "$n" 2>/dev/null | grep -E 'qdisc (netem|tbf|htb|prio) ' | while read -r l; do p qdisc "$n: $l"; done; done
ip -4 route show type blackhole 2>/dev/null | while read -r l; do p routes "$l"; done
ip -4 route show type unreachable 2>/dev/null | while read -r l; do p routes "$l"; done
p routes "default: $(ip -4 route show default 2>/dev/null | tr -s ' ')"
p iptables "$( (iptables-save 2>/dev/null; ip6tables-save 2>/dev/null) | grep -v -e '^#' -e '127\.0\.0\.11' | sed 's/\[[0-9]*:[0-9]*\]//' | sort | sha256sum | cut -c1-16)"
p gpu "$(sha256sum < GPU_FILE 2>/dev/null | cut -c1-16)"
p meminfo "$(cat MEMINFO_SPEC 2>/dev/null) $(grep -E '^MemTotal:' /proc/meminfo | tr -s ' ')"
[ -e FILL_SPEC ] && p fill-disk "spec $(cat FILL_SPEC)"
mountpoint -q DOCKER_TMP 2>/dev/null && p fill-disk "tmpfs over DOCKER_TMP"
[ -e UNAME_WRAPPER ] && p kernel "UNAME_WRAPPER fakes uname -r"
for f in /run/sim-port-*.pid; do [ -e "$f" ] && p ports "${f#/run/sim-port-}"; done
for f in /run/sim-mtu-*; do [ -e "$f" ] && p mtu "saved ${f#/run/sim-mtu-}"; done
if [ -L NODE_JIT_CACHE ]; then p jit "symlink to $(readlink NODE_JIT_CACHE)"
else find NODE_JIT_CACHE -mindepth 1 -maxdepth 2 2>/dev/null | sort | head -n 20 | while read -r l; do p jit "$l"; done; fi
find SHARED_MOUNT -mindepth 1 -maxdepth 1 2>/dev/null | sort | while read -r l; do p shared "$l"; done
p model "$(cd MODEL_DIR 2>/dev/null && find . -printf '%y %p %l %s %m\n' | sort | sha256sum | cut -c1-16)-$(cd MODEL_DIR 2>/dev/null && find . -type f -exec sha256sum {} + | sort | sha256sum | cut -c1-16)"
find NODE_STATE_DIR -mindepth 1 -maxdepth 2 2>/dev/null | sort | while read -r l; do p state "$l"; done
p state "owner $(stat -c '%U:%G %a' NODE_STATE_DIR 2>/dev/null)"
p jit "owner $(stat -L -c '%U:%G %a' NODE_JIT_CACHE 2>/dev/null)"
find UNIT_DIR -mindepth 1 -maxdepth 2 2>/dev/null | sort | while read -r l; do p units "$l"; done
for f in /etc/sudoers.d/*; do [ -e "$f" ] && p sudoers "$f $(sha256sum < "$f" | cut -c1-16)"; done
if command -v systemctl >/dev/null 2>&1; then p system "$(systemctl is-system-running 2>/dev/null)"; fi
for f in /root/.ssh/* /home/*/.ssh/*; do [ -e "$f" ] && p ssh-trust "$f $(sha256sum < "$f" | cut -c1-16)"; done
ps -eo pid=,args= | grep -v -e 'grep' -e ' sh -c ' | grep -F -e 'docker save' -e 'docker load' -e sdsend -e sdrecv -e 'dd bs=1M' -e http.server -e earlyoom -e 'ssh ' | while read -r l; do p processes "$l"; done
true
"""
for _name, _value in {"GPU_FILE": GPU_FILE, "MEMINFO_SPEC": MEMINFO_SPEC, "FILL_SPEC": FILL_SPEC,
                      "UNAME_WRAPPER": UNAME_WRAPPER, "DOCKER_TMP": DOCKER_TMP, "NODE_JIT_CACHE": NODE_JIT_CACHE,
                      "SHARED_MOUNT": SHARED_MOUNT, "MODEL_DIR": MODEL_DIR, "NODE_STATE_DIR": NODE_STATE_DIR,
                      "UNIT_DIR": UNIT_DIR}.items():
    PROBE_SH = PROBE_SH.replace(_name, _value)


@dataclass(frozen=True)
class Condition:
    """What the probe saw on one node: aspect -> the sorted values it printed for it."""
    node: str
    seen: dict[Aspect, tuple[str, ...]] = field(default_factory=dict)

    def get(self, aspect: Aspect) -> tuple[str, ...]:
        return self.seen.get(aspect, ())


@dataclass(frozen=True)
class Difference:
    """One aspect of one node that is not as it was: what the baseline had and what is there now."""
    node: str
    aspect: Aspect
    was: tuple[str, ...]
    now: tuple[str, ...]

    def describe(self) -> str:
        added = [v for v in self.now if v not in self.was]
        gone = [v for v in self.was if v not in self.now]
        parts = []
        if added:
            parts.append("now " + "; ".join(_short(v) for v in added[:4]) + (" ..." if len(added) > 4 else ""))
        if gone:
            parts.append("was " + "; ".join(_short(v) for v in gone[:4]) + (" ..." if len(gone) > 4 else ""))
        return f"{self.node}: {self.aspect.value}: {', '.join(parts) or 'changed'}"


def _short(value: str, width: int = 110) -> str:
    return value if len(value) <= width else value[: width - 3] + "..."


def parse(node: str, output: str) -> Condition:
    """The probe's lines into a Condition (unknown aspects are an error: the probe and this parser agree)."""
    seen: dict[Aspect, list[str]] = {}
    for line in output.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("\t")
        if not sep:
            raise ValueError(f"{node}: probe line without a tab: {line!r}")
        seen.setdefault(Aspect(key), []).append(value.strip())
    return Condition(node, {a: tuple(sorted(v)) for a, v in seen.items()})


def differences(baseline: Condition, now: Condition) -> list[Difference]:
    """Every aspect that differs, in the order `Aspect` lists them (the order the reset undoes them)."""
    out = []
    for aspect in Aspect:
        was, cur = baseline.get(aspect), now.get(aspect)
        if was != cur:
            out.append(Difference(now.node, aspect, was, cur))
    return out
