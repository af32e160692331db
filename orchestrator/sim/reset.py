"""Put a simulated node back as it was made: undo every difference from its baseline condition.

Each `Aspect` has one undo, mostly the fault kind that reverses it (faults.py), so the reset and
`spark-deploy sim fault` cannot disagree about how a fault is removed. An aspect with no undo (a vanished
interface, changed iptables) is reported, never papered over: the cluster has to be made anew.
"""

from __future__ import annotations

import concurrent.futures
import shlex
from collections.abc import Callable
from dataclasses import dataclass

from . import faults, provision
from .condition import PROBE_ARGV, Aspect, Condition, Difference, differences, parse
from .state import NODE_JIT_CACHE, NODE_STATE_DIR, NODE_USER, SHARED_MOUNT, NodeInfo, SimError


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
    res = cluster.exec(node.index, PROBE_ARGV, check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: the condition probe exited {res.code}: {res.stderr.strip()[-500:]}")
    cond = parse(node.name, res.stdout)
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


# The residue every test leaves (containers, images, the state dir, the JIT cache) is cleared in ONE exec
# per node: each docker exec costs the host engine, containerd and runc more than the command it runs,
# and a reset ran five of them per node per test before. Each aspect is a shell function of that script.
_CLEAR_SH = r"""
containers() { ids=$(docker ps -aq) && { [ -z "$ids" ] || docker rm -f $ids >/dev/null; }; }
images() { docker image rm -f "$@" >/dev/null 2>&1; docker image prune -f >/dev/null; true; }
state() { rm -rf -- "$1"/* "$1"/.[!.]* 2>/dev/null; mkdir -p -- "$1" && chown -R "$2:$2" "$1"; }
jit() { if [ -L "$1" ]; then rm -f -- "$1"; fi; mkdir -p -- "$1" && find "$1" -mindepth 1 -delete && chown -R "$2:$2" "$1"; }
"""


_CLEARED = {Aspect.CONTAINERS, Aspect.IMAGES, Aspect.STATE, Aspect.JIT}


def _clear_call(diff: Difference) -> list[str] | None:
    """The _CLEAR_SH call (function, args...) that undoes this residue, or None: not one of those."""
    if diff.aspect is Aspect.CONTAINERS:
        return ["containers"]
    if diff.aspect is Aspect.IMAGES:
        extra = [i for i in diff.now if i not in diff.was]
        return ["images", *extra] if extra else None
    if diff.aspect is Aspect.STATE:
        return ["state", NODE_STATE_DIR, NODE_USER]
    if diff.aspect is Aspect.JIT:
        return ["jit", NODE_JIT_CACHE, NODE_USER]
    return None


def _clear(cluster, node: NodeInfo, calls: list[list[str]]) -> None:
    """Run the calls in one exec; each failure is named, and all run whatever failed before."""
    lines = [f'{shlex.join(c)} || {{ echo {shlex.quote("clearing " + c[0] + " failed")} >&2; rc=1; }}'
             for c in calls]
    _sh(cluster, node, _CLEAR_SH + "rc=0\n" + "\n".join(lines) + "\nexit $rc")


def _containers(cluster, node, diff, want) -> None:
    _clear(cluster, node, [_clear_call(diff)])


def _images(cluster, node, diff: Difference, want: ImageWant) -> None:
    call = _clear_call(diff)
    if call:
        _clear(cluster, node, [call])
    _load_missing(node, diff, want)


def _load_missing(node: NodeInfo, diff: Difference, want: ImageWant) -> None:
    missing = [i for i in diff.was if i not in diff.now]
    if missing and want.load is not None:
        want.load(node)


def _state(cluster, node, diff, want) -> None:
    """Emptied and the login user's again (as provision.own_dirs leaves it)."""
    _clear(cluster, node, [_clear_call(diff)])


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


def _jit(cluster, node, diff, want) -> None:
    """A local, empty directory of the login user's again (what the local-jit fault also makes)."""
    _clear(cluster, node, [_clear_call(diff)])


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


UNDO: dict[Aspect, Callable | None] = {
    Aspect.DOCKERD: _fault("start-dockerd"),
    Aspect.SSHD: _fault("start-sshd"),
    Aspect.HOST_KEY: _host_key,
    Aspect.SSH_TRUST: _ssh_trust,
    Aspect.SYSTEM: _system,
    Aspect.INTERFACES: None,
    Aspect.IPTABLES: None,
    Aspect.CONTAINERS: _containers,
    Aspect.IMAGES: _images,
    Aspect.STATE: _state,
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
    Aspect.JIT: _jit,
    Aspect.SHARED: _shared,
    Aspect.MODEL: _fault("model-reset"),
    Aspect.SUDOERS: _sudoers,
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
    found = _all_differences(cluster, nodes, baselines)
    errors: list[str] = []
    todo = found

    def undo(node: NodeInfo) -> None:
        mine = [d for d in todo if d.node == node.name]  # in Aspect order: dockerd is up before residue goes
        batch = [c for d in mine if (c := _clear_call(d)) is not None]
        for diff in mine:
            try:
                if diff.aspect in _CLEARED:
                    if batch:  # at the first residue, all of it in one exec
                        calls, batch = batch, []
                        _clear(cluster, node, calls)
                    if diff.aspect is Aspect.IMAGES:
                        _load_missing(node, diff, want)
                elif UNDO[diff.aspect] is not None:
                    UNDO[diff.aspect](cluster, node, diff, want)
            except Exception as exc:  # noqa: BLE001 - reported with the difference, then looked at again
                errors.append(f"{node.name}: undoing {diff.aspect.value}: {exc}")

    left: list[Difference] = []
    for _ in range(2):  # a second pass for what a dying process (an interrupted copy) changed meanwhile
        if not todo:
            break
        with concurrent.futures.ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(undo, nodes))
        todo = left = _all_differences(cluster, nodes, baselines)
    return Outcome(found, left, errors)


def _all_differences(cluster, nodes: list[NodeInfo], baselines: dict[str, Condition]) -> list[Difference]:
    seen = probe_all(cluster, nodes)
    return [d for n in nodes for d in differences(baselines[n.name], seen[n.name])]


def image_loader(image_id: str, tags: list[str]) -> ImageWant:
    """Load the cluster's stand-in image into a node again, as `up` does (host engine -> node engine)."""
    return ImageWant(load=lambda node: provision.load_image(node.container, image_id, tags))
