"""Which interfaces form the fabric: proven by probes between the nodes, never guessed from names.

Candidates on each node are its up links with an IPv4 address other than the management link (the one
the default route takes), loopback and container bridges. Every node then probes every other node's
candidate addresses: the kernel's route to the address (`ip route get`) must leave by one of the prober's
own candidates, and a TCP connect to the node's sshd port must be answered. The fabric is one interface
per node on which every ordered pair of nodes reached each other that way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..facts.core import Fact
from .facts import Link

VIRTUAL_PREFIXES = ("docker", "br-", "veth", "virbr", "cni", "flannel", "tailscale", "zt", "wg")

# "$@" = PORT ADDR...: per address, the route's device and a TCP connect (3 s), in parallel.
# Prints `ADDR<TAB>DEV<TAB>RC<TAB>LAST STDERR LINE`.
_PROBE = r'''port=$1; shift
probe() {
  dev=$(ip -j route get "$1" 2>/dev/null | sed -n 's/.*"dev":"\([^"]*\)".*/\1/p')
  err=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$port" 2>&1 >/dev/null); rc=$?
  printf '%s\t%s\t%s\t%s\n' "$1" "${dev:-?}" "$rc" "$(printf '%s' "$err" | tail -n 1)"
}
for a in "$@"; do probe "$a" & done
wait'''


@dataclass(frozen=True)
class Probe:
    addr: str
    dev: str  # the prober's link the kernel routes the address over ("?": no route)
    reached: bool
    detail: str


def parse_probe(stdout: str) -> dict[str, Probe]:
    """`_PROBE`'s lines -> per address. A refused connection is an answer (the path works); a timeout (124)
    or a route error is not."""
    out: dict[str, Probe] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        addr, dev, code, err = (line.split("\t", 3) + ["", "", ""])[:4]
        rc = int(code) if code.lstrip("-").isdigit() else -1
        if rc == 0:
            out[addr] = Probe(addr, dev, True, "TCP connect ok")
        elif "refused" in err.lower():
            out[addr] = Probe(addr, dev, True, "answered (connection refused)")
        elif rc == 124:
            out[addr] = Probe(addr, dev, False, "no answer within 3 s")
        else:
            out[addr] = Probe(addr, dev, False, err.split(": ")[-1] if err else f"exit {rc}")
    return out


PROBE_FACT = Fact("probe", _PROBE, parse_probe, lambda given: [str(a) for a in given])


@dataclass(frozen=True)
class Candidate:
    node: str
    link: str
    addr: str
    mtu: int


def candidates(node: str, links: dict[str, Link], management: str | None) -> list[Candidate]:
    """The links that could be the fabric: up, holding IPv4, not management, loopback or a bridge."""
    out = []
    for link in links.values():
        if link.loopback or link.name == management or link.name.startswith(VIRTUAL_PREFIXES) or not link.up:
            continue
        out += [Candidate(node, link.name, addr, link.mtu) for addr, _ in link.ipv4]
    return out


@dataclass
class Fabric:
    chosen: dict[str, Candidate] = field(default_factory=dict)  # node -> its fabric link and address
    tried: list[str] = field(default_factory=list)  # what was probed and how it went, for a failure message

    @property
    def found(self) -> bool:
        return bool(self.chosen)


def _direct(prober: str, cand: Candidate, probes: dict[str, dict[str, Probe]], mine: set[str]) -> Probe | None:
    probe = probes.get(prober, {}).get(cand.addr)
    return probe if probe is not None and probe.reached and probe.dev in mine else None


def choose(cands: dict[str, list[Candidate]], probes: dict[str, dict[str, Probe]],
           speeds: dict[str, dict[str, int | None]] | None = None, names: dict[str, str] | None = None) -> Fabric:
    """Pure: one candidate per node such that every node reached every other's address over the very
    link chosen on its own side. Among several such sets, the fastest link on the first node wins."""
    nodes = list(cands)
    fabric = Fabric()
    if len(nodes) < 2:
        fabric.tried.append("one node: there is no fabric to find")
        return fabric
    speeds = speeds or {}
    first, rest = nodes[0], nodes[1:]
    options = sorted(cands[first], key=lambda c: -(speeds.get(first, {}).get(c.link) or 0))
    for start in options:
        chosen = {first: start}
        for other in rest:
            match = None
            for cand in cands[other]:
                picked = list(chosen.values()) + [cand]
                if all(_direct(a.node, b, probes, {a.link}) for a in picked for b in picked if a is not b):
                    match = cand
                    break
            if match is None:
                break
            chosen[other] = match
        if len(chosen) == len(nodes):
            fabric.chosen = chosen
            return fabric
    names = names or {}
    for node in nodes:
        name = names.get(node, node)
        shown = [f"{c.link} {c.addr}" for c in cands[node]] or ["no candidate (only management, loopback or "
                                                                  "bridges hold IPv4)"]
        fabric.tried.append(f"{name}: {', '.join(shown)}")
        for addr, probe in sorted(probes.get(node, {}).items()):
            via = f"via {probe.dev}" if probe.dev != "?" else "no route"
            fabric.tried.append(f"  {name} -> {addr} {via}: {probe.detail}")
    return fabric


def probe_targets(cands: dict[str, list[Candidate]], node: str) -> list[str]:
    """The other nodes' candidate addresses this node probes."""
    return sorted({c.addr for other, cs in cands.items() if other != node for c in cs})


def management_of(default_route: str | None, links: dict[str, Link], address: str) -> str | None:
    """The management link: the one the default route leaves by; else the one holding the address the
    controller reached the node on."""
    if default_route:
        return default_route
    return next((l.name for l in links.values() if any(a == address for a, _ in l.ipv4)), None)

