"""Fabric checks (field note 12): the fabric IP on an up interface, the socket interface NCCL and Gloo are
told to use, equal MTUs, every node reaching every other, and with RoCE the HCA and its GID (the facts:
facts/fabric.py).
"""

from __future__ import annotations

import ipaddress

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..config.inventory import Node
from ..config.load import Deployment
from ..facts.core import Observed, in_rank_order
from ..facts.fabric import IbState, Interface, Probe, interface_of
from .registry import check, missing, parity

Seen = dict[str, dict[str, Observed]]


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
