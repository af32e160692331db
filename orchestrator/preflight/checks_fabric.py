"""Fabric facts and checks (field note 12): the fabric IP on an up interface, the socket interface NCCL and
Gloo are told to use, equal MTUs, every node reaching every other, and with RoCE the HCA and its GID.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass

from ..config.inventory import Node
from ..config.load import Deployment
from ..facts.core import FactInput, Observed, fact, in_rank_order
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing, parity

Seen = dict[str, dict[str, Observed]]


@dataclass(frozen=True)
class Interface:
    name: str
    operstate: str
    mtu: int
    flags: tuple[str, ...]
    addresses: tuple[str, ...]  # without prefix length

    @property
    def up(self) -> bool:
        """UP, or UNKNOWN with a carrier (loopback, some virtual drivers never report operstate)."""
        return self.operstate == "UP" or (self.operstate == "UNKNOWN" and "LOWER_UP" in self.flags)

    def shown(self) -> str:
        return f"{self.name} {self.operstate} mtu {self.mtu}"


@fact("ip_addr", "ip -j addr")
def parse_ip_addr(stdout: str) -> dict[str, Interface]:
    """`ip -j addr` -> interfaces by name (some iproute2 versions print `{}` for vanished links: skipped)."""
    out: dict[str, Interface] = {}
    for entry in json.loads(stdout):
        if not entry.get("ifname"):
            continue
        addrs = tuple(str(ipaddress.ip_address(a["local"])) for a in entry.get("addr_info", []) if a.get("local"))
        out[entry["ifname"]] = Interface(entry["ifname"], entry.get("operstate", "UNKNOWN"), int(entry["mtu"]),
                                         tuple(entry.get("flags", [])), addrs)
    return out


def _peer_args(given: FactInput) -> list[str]:
    """(fabric IP, sshd port) of every other node: the port answers (or refuses, which also proves the path)."""
    inv = given.dep.inventory
    args: list[str] = []
    for peer in inv.ranked:
        if peer.name != given.node.name:
            args += [peer.fabric_ip, str((peer.ssh and peer.ssh.port) or inv.ssh.port)]
    return args


# One TCP connect per peer, in parallel, 3 s each; bash's /dev/tcp needs no ping/nc on the node.
_REACH = r'''probe() {
  err=$(timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' probe "$1" "$2" 2>&1 >/dev/null); rc=$?
  printf '%s\t%s\t%s\n' "$1" "$rc" "$(printf '%s' "$err" | tail -n 1)"
}
while [ $# -ge 2 ]; do probe "$1" "$2" & shift 2; done
wait'''


@dataclass(frozen=True)
class Probe:
    reached: bool
    detail: str


@fact("fabric_reach", _REACH, args=_peer_args)
def parse_reach(stdout: str) -> dict[str, Probe]:
    """Lines `IP<TAB>exit code<TAB>last stderr line` -> per IP whether its host answered. A refused
    connection is an answer (the path works, nothing listens); a timeout (124) or a route error is not."""
    out: dict[str, Probe] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        ip, code, err = (line.split("\t", 2) + ["", ""])[:3]
        rc = int(code)
        if rc == 0:
            out[ip] = Probe(True, "TCP connect ok")
        elif "refused" in err.lower():
            out[ip] = Probe(True, "answered (connection refused)")
        elif rc == 124:
            out[ip] = Probe(False, "no answer within 3 s")
        else:
            out[ip] = Probe(False, f"connect: {err.split(': ')[-1]}" if err else f"exit {rc}")
    return out


def _ib_args(given: FactInput) -> list[str]:
    """The HCA (first of NCCL_IB_HCA, `=`/`:port` stripped) and GID index this node's container gets."""
    env = dict(given.plan.on(given.node.name).spec.env)
    hca = env.get("NCCL_IB_HCA", "")
    first = hca.split(",")[0].lstrip("=")
    name, _, port = first.partition(":")
    return [] if env.get("NCCL_IB_DISABLE") == "1" or hca.startswith("^") else \
        [name, port or "1", env.get("NCCL_IB_GID_INDEX", "")]


_IB = r'''d=/sys/class/infiniband
[ -d "$d" ] || { echo absent; exit 0; }
echo "hcas $(ls "$d" | tr '\n' ' ')"
[ $# -eq 3 ] || exit 0
echo "want $1 $2 $3"
p="$d/$1/ports/$2"
[ -d "$p" ] || exit 0
echo "state $(cat "$p/state" 2>/dev/null)"
echo "gid $(cat "$p/gids/$3" 2>/dev/null)"
echo "type $(cat "$p/gid_attrs/types/$3" 2>/dev/null)"'''


@dataclass(frozen=True)
class IbState:
    present: bool  # /sys/class/infiniband exists
    hcas: tuple[str, ...] = ()
    hca: str = ""
    port: str = ""
    index: str = ""
    gid: str | None = None  # None: the HCA's port does not exist
    gid_type: str = ""
    state: str = ""  # the port's state file ("4: ACTIVE"), "" when unread


@fact("infiniband", _IB, args=_ib_args)
def parse_infiniband(stdout: str) -> IbState:
    """The sysfs view of the RoCE HCA: `absent`, or the HCAs, and at the rendered index its GID and type."""
    lines = dict(line.partition(" ")[::2] for line in stdout.splitlines() if line.strip())
    if "absent" in lines:
        return IbState(False)
    want = lines.get("want", "").split()
    hca, port, index = (want + ["", "", ""])[:3]
    return IbState(True, tuple(lines.get("hcas", "").split()), hca, port, index,
                   lines["gid"].strip() if "gid" in lines else None, lines.get("type", "").strip(),
                   lines.get("state", "").strip())


def interface_of(ifaces: dict[str, Interface], ip: str) -> Interface | None:
    want = str(ipaddress.ip_address(ip))
    return next((i for i in ifaces.values() if want in i.addresses), None)


def _fabric_iface(seen: Seen, dep: Deployment) -> dict[str, dict[str, Observed]]:
    """Per node, the interface holding its fabric_ip as an Observed (or why there is none)."""
    out = {}
    for node, facts in in_rank_order(seen, dep):
        obs = facts.get("ip_addr")
        if obs is None or not obs.ok:
            out[node] = {"iface": Observed(error=obs.error if obs else "not gathered")}
            continue
        ip = dep.inventory.node(node).fabric_ip
        iface = interface_of(obs.value, ip)
        out[node] = {"iface": Observed(value=iface) if iface else Observed(error=f"{ip} is on no interface")}
    return out


@check("fabric-ip", ("ip_addr",), Scope.NODE, field_note=12)
def fabric_ip(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("ip_addr",))
    bad = []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        ip = dep.inventory.node(node).fabric_ip
        iface = interface_of(facts["ip_addr"].value, ip)
        if iface is None:
            names = ", ".join(f"{i.name} {'/'.join(i.addresses) or '-'}" for i in facts["ip_addr"].value.values())
            cells[node] = Cell(Status.FAIL, f"{ip} is on no interface ({names})")
            bad.append(node)
        elif not iface.up:
            cells[node] = Cell(Status.FAIL, f"{ip} on {iface.shown()}")
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, f"{ip} on {iface.shown()}")
    fix = (f"{', '.join(bad)}: the inventory's fabric_ip must be an address of an up interface "
           "(`ip -br addr`; bring the link up or correct fabric_ip)") if bad else ""
    return Verdict("fabric-ip", Scope.NODE, cells, fix, 12)


def socket_ifnames(dep: Deployment, node: Node) -> dict[str, str]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME as rendered for `node` (same order as render.spec: the
    interconnect, then the recipe's env, then the node's env)."""
    base = dep.inventory.interconnect.socket_ifname
    return {var: node.env.get(var, dep.recipe.env.get(var, base)) for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")}


def match_ifname(spec: str, names: list[str], exact: bool) -> list[str]:
    """Interfaces `spec` selects: NCCL takes prefixes, `=` for exact names, `^` to exclude; Gloo exact names."""
    if not exact and spec.startswith("^"):
        excluded = [e for e in spec[1:].split(",") if e]
        return [n for n in names if n != "lo" and not any(n.startswith(e) for e in excluded)]
    strict = exact or spec.startswith("=")
    wanted = [e for e in spec.lstrip("=").split(",") if e]
    return [n for n in names if any(n == w if strict else n.startswith(w) for w in wanted)]


@check("socket-ifname", ("ip_addr",), Scope.NODE, field_note=12)
def socket_ifname(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("ip_addr",))
    bad = []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        ifaces: dict[str, Interface] = facts["ip_addr"].value
        wanted = socket_ifnames(dep, dep.inventory.node(node))
        if not any(wanted.values()):
            cells[node] = Cell(Status.SKIP, "no socket interface named (NCCL/Gloo pick one themselves)")
            continue
        problems, shown = [], []
        ip = dep.inventory.node(node).fabric_ip
        fabric = interface_of(ifaces, ip)  # None: fabric-ip says why
        for var, spec in wanted.items():
            if not spec:
                continue
            hits = match_ifname(spec, list(ifaces), exact=var.startswith("GLOO"))
            up = [h for h in hits if ifaces[h].up]
            if not hits:
                problems.append(f"{var}={spec} matches no interface (has {', '.join(ifaces)})")
            elif not up:
                problems.append(f"{var}={spec}: {', '.join(ifaces[h].shown() for h in hits)}")
            elif fabric is not None and fabric.name not in up:
                # it works, over the wrong link: the management port carries the collectives at its speed
                chosen = ", ".join(f"{h} ({'/'.join(ifaces[h].addresses) or 'no address'})" for h in up)
                problems.append(f"{var}={spec} selects {chosen}, not the fabric interface {fabric.name} "
                                f"holding fabric_ip {ip}")
            else:
                shown.append(f"{var}={spec}: {', '.join(up)}")
        if problems:
            cells[node] = Cell(Status.FAIL, "; ".join(problems))
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, "; ".join(shown))
    fix = (f"{', '.join(bad)}: set interconnect.socket_ifname (or the node's NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME "
           "env) to the interface holding the fabric IP") if bad else ""
    return Verdict("socket-ifname", Scope.NODE, cells, fix, 12)


@check("mtu-parity", ("ip_addr",), Scope.PARITY, field_note=12)
def mtu_parity(seen: Seen, dep: Deployment) -> Verdict:
    merged = {n: {"mtu": Observed(value=f["iface"].value.mtu) if f["iface"].ok else f["iface"]}
              for n, f in _fabric_iface(seen, dep).items()}
    return parity("mtu-parity", merged, "mtu", lambda m: f"mtu {m}",
                  "the MTU of the fabric interface differs between nodes: large frames are dropped one way "
                  "(`ip link set dev IFACE mtu N` on every node, and on the switch)", field_note=12)


@check("fabric-reach", ("fabric_reach",), Scope.NODE, field_note=12)
def fabric_reach(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("fabric_reach",))
    broken = []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        probes: dict[str, Probe] = facts["fabric_reach"].value
        peers = [p for p in dep.inventory.ranked if p.name != node]
        failed, reached = [], []
        for peer in peers:
            probe = probes.get(str(ipaddress.ip_address(peer.fabric_ip)))
            label = f"{peer.name} ({peer.fabric_ip})"
            if probe is None:
                failed.append(f"{label}: not probed")
            elif probe.reached:
                reached.append(label)
            else:
                failed.append(f"{label}: {probe.detail}")
        broken += [f"{node} -> {f.split(':')[0]}" for f in failed]
        if failed:
            cells[node] = Cell(Status.FAIL, "cannot reach " + "; ".join(failed))
        else:
            cells[node] = Cell(Status.OK, "reaches " + (", ".join(reached) or "no peers"))
    fix = (f"{', '.join(broken)}: the fabric path is cut (cable, route, firewall): "
           "`ip route get PEER_IP` on the node shows which way it goes") if broken else ""
    return Verdict("fabric-reach", Scope.NODE, cells, fix, 12)


def _ib_cells(seen: Seen, dep: Deployment) -> tuple[dict[str, Cell], dict[str, IbState]]:
    cells = missing(seen, ("infiniband",))
    states: dict[str, IbState] = {}
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        state: IbState = facts["infiniband"].value
        if dep.inventory.interconnect.profile != "roce":
            cells[node] = Cell(Status.SKIP, "profile tcp: NCCL_IB_DISABLE=1, no RoCE to check")
        elif not state.present:
            cells[node] = Cell(Status.SKIP, "no /sys/class/infiniband on this node")
        elif not state.hca:
            cells[node] = Cell(Status.SKIP, "NCCL_IB_HCA is an exclusion list or unset: no single HCA to check")
        else:
            states[node] = state
    return cells, states


@check("roce-hca", ("infiniband",), Scope.NODE, field_note=12)
def roce_hca(seen: Seen, dep: Deployment) -> Verdict:
    cells, states = _ib_cells(seen, dep)
    bad = []
    for node, s in states.items():
        if s.hca not in s.hcas or s.gid is None:
            cells[node] = Cell(Status.FAIL, f"{s.hca} port {s.port} absent (has {', '.join(s.hcas) or 'none'})")
            bad.append(node)
        elif s.state and not s.state.endswith("ACTIVE"):  # NCCL skips the port and falls back to sockets
            cells[node] = Cell(Status.FAIL, f"{s.hca} port {s.port} is {s.state.split()[-1]}, not ACTIVE")
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, f"{s.hca} port {s.port}" + (f" {s.state.split()[-1]}" if s.state else ""))
    fix = (f"{', '.join(bad)}: interconnect.hca (NCCL_IB_HCA) must name an HCA port of the node that is ACTIVE "
           "(`ls /sys/class/infiniband`, `ibv_devinfo`: a DOWN port is a cable or the peer)") if bad else ""
    return Verdict("roce-hca", Scope.NODE, cells, fix, 12)


def _mapped(ip: str) -> str:
    """The GID a RoCE v2 port shows for an IPv4 address (::ffff:a.b.c.d), in sysfs's 8 x 4-hex-digit form."""
    addr = ipaddress.ip_address(ip)
    v6 = ipaddress.IPv6Address(f"::ffff:{addr}") if addr.version == 4 else addr
    return ":".join(v6.exploded.split(":"))


@check("roce-gid", ("infiniband",), Scope.NODE, field_note=12)
def roce_gid(seen: Seen, dep: Deployment) -> Verdict:
    cells, states = _ib_cells(seen, dep)
    bad = []
    for node, s in states.items():
        where = f"{s.hca} GID index {s.index}"
        if s.gid is None:
            cells[node] = Cell(Status.SKIP, f"{s.hca} port {s.port} absent (see roce-hca)")
        elif not s.gid or set(s.gid) <= {"0", ":"}:
            cells[node] = Cell(Status.FAIL, f"{where} is empty")
            bad.append(node)
        elif s.gid_type != "RoCE v2":
            cells[node] = Cell(Status.FAIL, f"{where} is {s.gid_type or 'of unknown type'}, not RoCE v2 ({s.gid}"
                                            f"{', link-local' if s.gid.startswith('fe80') else ''})")
            bad.append(node)
        elif s.gid.startswith("fe80"):  # v2 but link-local: no IPv4 route; NCCL's QPs to the peer do not connect
            cells[node] = Cell(Status.FAIL, f"{where} is RoCE v2 link-local {s.gid}, not the fabric IP "
                                            f"{dep.inventory.node(node).fabric_ip}")
            bad.append(node)
        elif s.gid != _mapped(dep.inventory.node(node).fabric_ip):
            cells[node] = Cell(Status.WARN, f"{where} is RoCE v2 {s.gid}, not the fabric IP "
                                            f"{dep.inventory.node(node).fabric_ip}")
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, f"{where} RoCE v2 {s.gid}")
    fix = (f"{', '.join(bad)}: NCCL_IB_GID_INDEX must point at the RoCE v2 GID of the fabric IP on each node "
           "(`show_gids`); a wrong per-node index gives 'unhandled system error'") if bad else ""
    return Verdict("roce-gid", Scope.NODE, cells, fix, 12)
