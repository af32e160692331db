"""Put a simulated node back as it was made: undo every difference from its baseline condition.

Each `Aspect` has one undo, mostly the fault kind that reverses it (faults.py), so the reset and
`spark-deploy sim fault` cannot disagree about how a fault is removed. An aspect with no undo (a vanished
interface, changed iptables) is reported, never papered over: the cluster has to be made anew.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable
from dataclasses import dataclass

from . import faults, provision
from .node_probe import CLEARED
from .condition import PROBE_ARGV, Aspect, Condition, Difference, differences, parse
from .state import NODE_USER, SHARED_MOUNT, NodeInfo, SimError


SSH_SAVED = "/etc/sim-baseline-ssh.tar"  # the node's SSH trust and host keys as made (save_baseline)
_SAVE_SSH = ('cd / && tar -cf "$1" $(ls -d root/.ssh home/*/.ssh etc/ssh/ssh_host_* 2>/dev/null)')
_RESTORE_SSH = ('cd / && [ -s "$1" ] || { echo "no $1: save_baseline was not run" >&2; exit 1; }; '
                'for d in root/.ssh home/*/.ssh; do [ -d "$d" ] && find "$d" -mindepth 1 -delete; done; '
                'rm -f etc/ssh/ssh_host_*; tar -xpf "$1"')


def sshd_answers(ip: str) -> bool:
    return faults._port_open(ip, 22)


def save_baseline(cluster, nodes: list[NodeInfo]) -> dict[str, Condition]:
    """Keep on each node what a probe can only hash (its SSH trust, its host keys), then probe it."""
    for node in nodes:
        _sh(cluster, node, _SAVE_SSH, SSH_SAVED)
    return probe_all(cluster, nodes)


def probe(cluster, node: NodeInfo) -> Condition:
    """One `docker exec` of the probe; sshd is also asked from outside (its port answers)."""
    return _run_probe(cluster, node, PROBE_ARGV)[0]


def probe_and_clear(cluster, node: NodeInfo, baseline: Condition) -> tuple[Condition, Condition, list[str]]:
    """One `docker exec`: the condition as found, the residue that differs from the baseline cleared
    (node_probe.clear), the condition as left, and the errors of clearing."""
    want = {"user": NODE_USER, **{a.value: list(baseline.get(a)) for a in _RESIDUE_CLEARED}}
    return _run_probe(cluster, node, [*PROBE_ARGV, json.dumps(want)])


def _run_probe(cluster, node: NodeInfo, argv: list[str]) -> tuple[Condition, Condition, list[str]]:
    res = cluster.exec(node.index, argv, check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: the condition probe exited {res.code}: {res.stderr.strip()[-500:]}")
    found, sep, rest = res.stdout.partition(CLEARED + "\n")
    errors = [line.partition("\t")[2] for line in rest.splitlines() if line.startswith("!\t")]
    before = _answered(node, parse(node.name, found))
    after = _answered(node, parse(node.name, "".join(
        line + "\n" for line in rest.splitlines() if not line.startswith("!\t")))) if sep else before
    return before, after, [f"{node.name}: {e}" for e in errors]


def _answered(node: NodeInfo, cond: Condition) -> Condition:
    if cond.get(Aspect.SSHD) == ("up",) and not sshd_answers(node.ip):
        cond.seen[Aspect.SSHD] = ("up, but port 22 does not answer",)
    return cond


def probe_all(cluster, nodes: list[NodeInfo]) -> dict[str, Condition]:
    with concurrent.futures.ThreadPoolExecutor(max(1, len(nodes))) as pool:
        return dict(zip((n.name for n in nodes), pool.map(lambda n: probe(cluster, n), nodes)))


def _sh(cluster, node: NodeInfo, script: str, *args: str) -> None:
    res = cluster.exec(node.index, ["sh", "-c", script, "sh", *args], check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: {script[:60]!r} exited {res.code}: {res.stderr.strip()[-300:]}")


def _cleared(cluster, node, diff, want) -> None:
    """Residue (containers, the state dir, the JIT cache) is undone by the probe itself (node_probe.clear),
    in the same exec that looks: each docker exec costs the host engine, containerd and runc more than
    the command it runs, and a reset used to run three to five per node per test."""


def _images(cluster, node, diff: Difference, want: ImageWant) -> None:
    """Images the baseline lacks went with the probe's clear; one it had and lost is loaded again."""
    missing = [i for i in diff.was if i not in diff.now]
    if missing and want.load is not None:
        want.load(node)


def _units(cluster, node, diff, want) -> None:
    """Units a test installed: stopped, disabled and removed (their .wants links too)."""
    _sh(cluster, node, 'for u in "$@"; do case $u in *.service|*.timer|*.socket) systemctl disable --now '
                       '"${u##*/}" >/dev/null 2>&1;; esac; rm -rf -- "$u"; done; '
                       'systemctl daemon-reload 2>/dev/null; systemctl reset-failed 2>/dev/null; true',
        *[u for u in diff.now if u not in diff.was])


def _system(cluster, node, diff, want) -> None:
    _sh(cluster, node, "systemctl reset-failed 2>/dev/null; true")


def restore_ssh(cluster, node: NodeInfo, *, restart_sshd: bool = True) -> None:
    """The node's SSH trust and host keys as save_baseline kept them; sshd restarted to serve the keys."""
    _sh(cluster, node, _RESTORE_SSH, SSH_SAVED)
    if restart_sshd:
        cluster.fault(node.index, "stop-sshd")
        cluster.fault(node.index, "start-sshd")


def _ssh_trust(cluster, node, diff, want) -> None:
    restore_ssh(cluster, node, restart_sshd=False)


def _host_key(cluster, node, diff, want) -> None:
    restore_ssh(cluster, node)


def _processes(cluster, node, diff, want) -> None:
    pids = [line.split()[0] for line in diff.now if line not in diff.was and line.split()[0].isdigit()]
    _sh(cluster, node, 'kill -9 "$@" 2>/dev/null; rm -f /run/sim-earlyoom.pid; true', *pids)


def _shared(cluster, node, diff, want) -> None:
    _sh(cluster, node, 'for p in "$@"; do rm -rf -- "$p"; done', *[p for p in diff.now if p not in diff.was
                                                                   and p.startswith(SHARED_MOUNT + "/")])


def _fault(kind: str, **opts) -> Callable:
    return lambda cluster, node, diff, want: cluster.fault(node.index, kind, **opts)


def _routes(cluster, node, diff, want) -> None:
    """Blackholes off (heal), then the links and the default route as the node's boot sets them."""
    cluster.fault(node.index, "heal")
    _sh(cluster, node, "sim-boot net")


def _ports(cluster, node, diff, want) -> None:
    for entry in diff.now:
        cluster.fault(node.index, "free-port", port=entry.removesuffix(".pid"))


def _mtu(cluster, node, diff, want) -> None:
    for entry in diff.now:
        if entry.startswith("saved "):
            cluster.fault(node.index, "mtu", reset="true", dev=entry.removeprefix("saved "))


def _sudoers(cluster, node, diff, want) -> None:
    """A sudoers drop-in a test added (passwordless sudo for the login user): removed."""
    _sh(cluster, node, 'for f in "$@"; do rm -f -- "$f"; done', *[e.split()[0] for e in diff.now if e not in diff.was])


@dataclass
class ImageWant:
    """How to give a node back an image its baseline had (a test removed it): None = report it."""
    load: Callable[[NodeInfo], None] | None = None


_RESIDUE_CLEARED = (Aspect.CONTAINERS, Aspect.IMAGES, Aspect.STATE, Aspect.JIT)  # node_probe.clear's

UNDO: dict[Aspect, Callable | None] = {
    Aspect.DOCKERD: _fault("start-dockerd"),
    Aspect.SSHD: _fault("start-sshd"),
    Aspect.HOST_KEY: _host_key,
    Aspect.SSH_TRUST: _ssh_trust,
    Aspect.SYSTEM: _system,
    Aspect.INTERFACES: None,
    Aspect.IPTABLES: None,
    Aspect.CONTAINERS: _cleared,
    Aspect.IMAGES: _images,
    Aspect.STATE: _cleared,
    Aspect.UNITS: _units,
    Aspect.PROCESSES: _processes,
    Aspect.ROUTES: _routes,
    Aspect.QDISC: _fault("heal"),
    Aspect.MTU: _mtu,
    Aspect.GPU: _fault("gpu", reset="true"),
    Aspect.MEMINFO: _fault("meminfo", reset="true"),
    Aspect.FILL_DISK: _fault("free-disk"),
    Aspect.KERNEL: _fault("kernel", reset="true"),
    Aspect.PORTS: _ports,
    Aspect.JIT: _cleared,
    Aspect.SHARED: _shared,
    Aspect.MODEL: _fault("model-reset"),
    Aspect.SUDOERS: _sudoers,
    Aspect.ROCE: _fault("roce", reset="true"),
}


@dataclass
class Outcome:
    """What one reset found and did: the differences it saw, and those still there after undoing."""
    found: list[Difference]
    left: list[Difference]
    errors: list[str]

    @property
    def faults(self) -> list[Difference]:
        """What was not a test's ordinary residue (containers, releases, images): injected or damaged."""
        return [d for d in self.found if not d.aspect.residue]

    def describe(self, what: list[Difference]) -> str:
        return "\n  ".join(d.describe() for d in what)


def reset(cluster, baselines: dict[str, Condition], want: ImageWant | None = None) -> Outcome:
    """Undo every difference from the baselines, node by node in parallel, then look again."""
    want = want or ImageWant()
    nodes = [n for n in cluster.nodes() if n.name in baselines]
    missing = sorted(set(baselines) - {n.name for n in nodes})
    if missing:
        gone = [Difference(m, Aspect.DOCKERD, ("node container",), ("gone",)) for m in missing]
        return Outcome(gone, gone, [f"{m}: the node container is gone" for m in missing])

    def clear_all() -> tuple[list[Difference], list[Difference], list[str]]:
        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
            seen = list(pool.map(lambda n: probe_and_clear(cluster, n, baselines[n.name]), nodes))
        before = [d for n, (b, _, _) in zip(nodes, seen) for d in differences(baselines[n.name], b)]
        after = [d for n, (_, a, _) in zip(nodes, seen) for d in differences(baselines[n.name], a)]
        return before, after, [e for _, _, errs in seen for e in errs]

    found, todo, errors = clear_all()

    def undo(node: NodeInfo) -> None:
        # in Aspect order (dockerd is up first), but stray processes killed before anything else: a cancelled
        # copy's remover would delete the image this reset loads back
        for diff in sorted([d for d in todo if d.node == node.name], key=lambda d: d.aspect is not Aspect.PROCESSES):
            action = UNDO[diff.aspect]
            if action is None:
                continue
            try:
                action(cluster, node, diff, want)
            except Exception as exc:  # noqa: BLE001 - reported with the difference, then looked at again
                undo_errors.append(f"{node.name}: undoing {diff.aspect.value}: {exc}")

    undo_errors: list[str] = []
    for _ in range(2):  # a second pass for what a dying process (an interrupted copy) changed meanwhile
        if not todo:
            break
        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(undo, nodes))
        _, todo, errors = clear_all()  # residue again (a fault may have kept it: dockerd was down)
    return Outcome(found, todo, errors + undo_errors)


def image_loader(image_id: str, tags: list[str]) -> ImageWant:
    """Load the cluster's stand-in image into a node again, as `up` does (host engine -> node engine)."""
    return ImageWant(load=lambda node: provision.load_image(node.container, image_id, tags))
