"""The quick preflight `up` runs before touching anything: small named checks, run on all nodes at once.

Each check returns a Verdict (checks/verdict.py, the type every judge answers in) with what it saw per
node and a fix hint; it never starts or changes anything, except the JIT probe, which removes its own
token files again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Callable

from ..config.inventory import Node
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection, NodeError, NodeTimeout, NodeUnreachable
from .verdict import Cell, Scope, Status, Verdict


def per_node(cluster: Cluster, probe: Callable[[NodeConnection], tuple[bool, str]]) -> tuple[dict, list]:
    """Run a probe everywhere. A command that failed is that node failing the check, with the error as
    evidence; a transport error (connection lost, deadline, cancel) is not a verdict: it is raised, naming
    the node, so a dropped channel is never reported as "start Docker" or "GPU missing"."""
    try:
        results = cluster.each(probe)
    except GroupError as exc:
        transport = {n: e for n, e in exc.failures.items() if not _ran_and_failed(e)}
        if transport:
            raise GroupError(transport, exc.results) from None
        results = dict(exc.results)
        results.update({node: (False, str(err)) for node, err in exc.failures.items()})
    evidence = {name: text for name, (_, text) in results.items()}
    bad = [name for name, (good, _) in results.items() if not good]
    return evidence, bad


def _ran_and_failed(exc: BaseException) -> bool:
    """A command that ran and failed (a verdict on the node), as opposed to one that could not run."""
    return isinstance(exc, NodeError) and not isinstance(exc, (NodeUnreachable, NodeTimeout))


@dataclass(frozen=True)
class Listener:
    port: int
    local: str  # address:port as ss prints it
    process: str  # ss -p's users:(...) column, or "" (ss shows only the login user's own processes)
    uid: int | None = None  # the socket's owner (ss -e: `uid:N`, left out for root), None if not asked

    def holder(self) -> str:
        """Who holds it, as precisely as the login user may know: the process, else the socket's owner."""
        if self.process or self.uid is None:
            return self.process
        who = "root" if self.uid == 0 else f"uid {self.uid}"
        return (f"a process of {who} (ss shows other users' processes only to root: `sudo ss -ltnp "
                f"'sport = :{self.port}'` names it)")


_EXTENDED = ("ino:", "sk:", "cgroup:", "uid:", "v6only:", "<->", "->", "<-")


def parse_listeners(stdout: str) -> list[Listener]:
    """`ss -Hltnp` or `ss -Hltnpe` lines (State Recv-Q Send-Q Local Peer [Process] [extended]) -> listening
    sockets; with -e, `uid:N` is the owner (ss leaves it out for root's sockets)."""
    found = []
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        local = parts[3]
        port = local.rsplit(":", 1)[-1]
        if not port.isdigit():
            continue
        rest = parts[5:]
        extended = any(w.startswith(("ino:", "sk:")) for w in rest)
        uid = next((int(w[4:]) for w in rest if w.startswith("uid:") and w[4:].isdigit()), 0 if extended else None)
        process = " ".join(w for w in rest if not w.startswith(_EXTENDED))
        found.append(Listener(int(port), local, process, uid))
    return found


LISTENERS = ("ss", "-Hltnpe")  # every listening TCP socket, with its process (ours) and owner (-e)


def listening(head: NodeConnection) -> list[Listener]:
    """The head's listening TCP sockets, as `ss -Hltnpe` shows them to the login user."""
    return parse_listeners(head.run(list(LISTENERS), timeout=20, check=True).stdout)


def ports_free(cluster: Cluster, ports: list[int]) -> Verdict:
    """The serve and master ports on the head must be free (run after this recipe's old containers are gone)."""
    return ports_judged(cluster.head.name, listening(cluster.head), ports)


def ports_judged(head: str, listeners: list[Listener], ports: list[int], ours: dict[int, str] | None = None) -> Verdict:
    """Pure: the ports check over the head's listening sockets. A port one of `ours` holds (port -> this
    recipe's serving container, which `up` stops first) is not taken."""
    shown, taken = [], []
    for port in ports:
        holders = [item for item in listeners if item.port == port]
        if not holders:
            shown.append(f"{port} free")
        elif port in (ours or {}):
            shown.append(f"{port} held by {ours[port]} of this recipe, which up replaces")
        else:
            shown.append(f"{port} {holders[0].local} {holders[0].holder()}".strip())
            taken.append(port)
    cell = Cell(Status.FAIL if taken else Status.OK, "; ".join(shown))
    return Verdict("ports", Scope.HEAD, {head: cell},
                   f"port(s) {', '.join(map(str, taken))} on {head} are taken by another process: stop it or "
                   "change serve.port / vllm.master_port" if taken else "")


def jit_cache_local(cluster: Cluster, nodes: dict[str, Node]) -> Verdict:
    """Each node's JIT directory exists and is not the same directory as another node's (field note 2).

    Writes a random token on every node, then looks for the other nodes' tokens; removes them after."""
    token = {conn.name: f".spark-deploy-probe-{secrets.token_hex(8)}" for conn in cluster.nodes}

    def write(conn: NodeConnection):
        path = nodes[conn.name].jit_cache
        r = conn.run_script('test -d "$1" && test -w "$1" && : > "$1/$2" || { id -un; exit 1; }', path,
                            token[conn.name], timeout=20)
        return r.ok, (f"{path} writable" if r.ok else f"{path} missing or not writable by {r.stdout.strip()}")

    evidence, bad = per_node(cluster, write)
    if bad:
        per_node(cluster, lambda conn: (conn.run(["rm", "-f", f"{nodes[conn.name].jit_cache}/{token[conn.name]}"],
                                                  timeout=20).ok, ""))
        return Verdict.per_node("jit-cache", Scope.NODE, evidence, bad,
                                f"create a local JIT directory on {', '.join(bad)} that the login user owns: "
                                "`sudo install -d -o USER <jit_cache>` (local disk, not NFS)", 2)

    def look_and_clean(conn: NodeConnection):
        """Every node wrote before any node looks. Of nodes sharing a directory, the first to look still sees
        the others' tokens (each removes its own only after looking), so sharing is always caught once."""
        path = nodes[conn.name].jit_cache
        others = [t for name, t in token.items() if name != conn.name]
        r = conn.run_script('cd "$1" || exit 1; for t in "${@:3}"; do test -e "$t" && echo "$t"; done; rm -f "$2"',
                            path, token[conn.name], *others, timeout=20, check=True)
        seen = [name for name, t in token.items() if t in r.stdout.split()]
        return not seen, (f"{path}: shared with {', '.join(seen)}" if seen else f"{path}: local")

    evidence, bad = per_node(cluster, look_and_clean)
    return Verdict.per_node("jit-cache", Scope.NODE, evidence, bad,
                            "each node needs its own local JIT directory: two ranks compiling into one directory "
                            "kill the peer (field note 2)", 2)
