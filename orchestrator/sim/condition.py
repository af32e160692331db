"""A simulated node's condition, as a fact: one probe (run in the node, node_probe.py) and a pure parser.

The shared test clusters are reset between tests by comparing each node's condition with the one it had
when it was made (its baseline) and undoing every difference (sim/reset.py). Everything a test or a fault
can change is an `Aspect` here, so "is this node clean?" has one answer: `differences(baseline, now)`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

from .node_roce import ROCE_SPEC
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
    ROCE = "roce"

    @property
    def residue(self) -> bool:
        return self in _RESIDUE


# ssh-trust: node-to-node ssh (a direct image copy) lets OpenSSH add the peer's other host keys to
# known_hosts (UpdateHostKeys), as it does on real nodes; system: a unit a test stopped stays "failed"
_RESIDUE = {Aspect.CONTAINERS, Aspect.IMAGES, Aspect.STATE, Aspect.UNITS, Aspect.JIT, Aspect.SHARED,
            Aspect.SSH_TRUST, Aspect.SYSTEM}

# The probe runs in the node as one python3 process (node_probe.py, stdlib only): each line
# "ASPECT<TAB>value". Read only; every wait bounded. dockerd counts as down only after five failed pings
# a second apart (a loaded host can fail one). It first waits (bounded, 15 s) for a node's last image
# command: an interrupted `up` can leave the undo's `docker image rm` or a torn-down `docker load` running
# a moment after the controller's side has ended, and what the probe sees must not change under it (nor a
# reset load an image such a command then removes). meminfo is the idle spec and whether /proc/meminfo is
# sim-memory's (MemTotal), not MemAvailable: what running vLLMs claim goes with their containers (residue),
# however long the daemon takes to see them end. iptables leaves out the engine's embedded-DNS rules
# (127.0.0.11, a new port at every node start).
PROBE_PATHS = {"GPU_FILE": GPU_FILE, "MEMINFO_SPEC": MEMINFO_SPEC, "FILL_SPEC": FILL_SPEC,
               "UNAME_WRAPPER": UNAME_WRAPPER, "DOCKER_TMP": DOCKER_TMP, "NODE_JIT_CACHE": NODE_JIT_CACHE,
               "SHARED_MOUNT": SHARED_MOUNT, "MODEL_DIR": MODEL_DIR, "NODE_STATE_DIR": NODE_STATE_DIR,
               "UNIT_DIR": UNIT_DIR, "ROCE_SPEC": ROCE_SPEC}
PROBE_ARGV = ["python3", "-c", (Path(__file__).parent / "node_probe.py").read_text(), json.dumps(PROBE_PATHS)]


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
