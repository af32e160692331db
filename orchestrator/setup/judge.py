"""From what each node showed to the inventory's values, each with where it came from, and the problems a
person must fix (named by node, fact and fix, as preflight names them). Pure: tested on captured facts.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass, field

from ..checks.writable import owner_fix
from ..facts.core import Observed
from .facts import NETWORK_FS, STATE_DIR, Docker, EarlyOom, HfCache, JitCandidate, Link, MemInfo, Roce
from .fabric import Candidate, Fabric

GIB = 1 << 30
EARLYOOM_SAFE = 4 * GIB  # preflight's default reserve: earlyoom must not kill while that much is free
REQUIRED = ("hostname", "links", "user", "docker", "hf_cache", "jit_cache", "meminfo", "gpus", "roce", "state_dir")


@dataclass(frozen=True)
class Problem:
    node: str
    fact: str
    seen: str
    fix: str

    def __str__(self) -> str:
        return f"{self.node}: {self.fact}: {self.seen}; fix: {self.fix}"


@dataclass(frozen=True)
class Value:
    value: object
    source: str  # the comment written beside it


@dataclass
class NodeValues:
    host: str  # as given on the command line: the address the controller reaches
    name: Value
    fabric_ip: Value
    gpus: Value
    jit_cache: Value
    hf_cache: Value
    env: dict[str, Value] = field(default_factory=dict)


@dataclass
class Decision:
    nodes: list[NodeValues] = field(default_factory=list)
    interconnect: dict[str, Value] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)  # said, not blocking: the inventory is still written
    rows: dict[str, dict[str, str]] = field(default_factory=dict)  # fact -> node -> what it showed

    def show(self, row: str, node: str, text: str) -> None:
        self.rows.setdefault(row, {})[node] = text


def mapped_gid(ip: str) -> str:
    """The GID a RoCE v2 port lists for an IPv4 address (::ffff:a.b.c.d, sysfs's 8 x 4 hex digits)."""
    v6 = ipaddress.IPv6Address(f"::ffff:{ip}")
    return ":".join(v6.exploded.split(":"))


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _seen(f: dict[str, Observed], fact: str, link: str):
    """One link's value in a per-link fact; None when the fact did not run or says nothing of the link."""
    observed = f.get(fact)
    return (observed.value or {}).get(link) if observed is not None and observed.ok else None


def _mbit(speed: int | None) -> str:
    return f"{speed} Mb/s" if speed else "speed not reported"


def _rated(d: Decision, name: str, cand: Candidate, speed: int | None, f: dict[str, Observed]) -> None:
    """A link that negotiated below its rated speed (a DAC or port at a lower mode) is said, not refused:
    it still carries NCCL, only slower (`fabric test` measures how much)."""
    observed = f.get("rated")
    if observed is None or not observed.ok or observed.value is None:
        d.show("fabric rated", name, "not known: " + ("ethtool is not on the node" if observed is not None
                                                       and observed.ok else "the probe did not run"))
        return
    rated = observed.value.get(cand.link)
    d.show("fabric rated", name, f"{rated} Mb/s" if rated else f"{cand.link} lists no supported link modes")
    if rated and speed and speed < rated:
        d.warnings.append(Problem(name, "fabric speed", f"{cand.link} runs at {speed} Mb/s, rated {rated} Mb/s",
                                  f"reseat or replace the cable on {cand.link} (`ethtool {cand.link}` shows the "
                                  "negotiated mode); `spark-deploy fabric test` measures what it carries"))


def _mtu(d: Decision, fabric: Fabric, names: dict[str, str]) -> None:
    mtus = {host: c.mtu for host, c in fabric.chosen.items()}
    if len(set(mtus.values())) <= 1:
        return
    counts = Counter(mtus.values()).most_common()
    head = next(iter(mtus))
    want = counts[0][0] if counts[0][1] > (counts[1][1] if len(counts) > 1 else 0) else mtus[head]
    others = ", ".join(f"{names[h]} {m}" for h, m in mtus.items() if m == want)
    for host, mtu in mtus.items():
        if mtu != want:
            link = fabric.chosen[host].link
            d.problems.append(Problem(names[host], "fabric MTU", f"{link} mtu {mtu}, not {want} as on {others}",
                                      f"`sudo ip link set dev {link} mtu {want}` on {names[host]} and keep it in "
                                      "netplan (`mtu:`); every node (and a switch between) must agree, or large "
                                      "frames are dropped one way (field note 12)"))


def _roce(d: Decision, seen: dict[str, dict[str, Observed]], fabric: Fabric, names: dict[str, str]) -> None:
    """profile roce when an HCA port sits behind every node's fabric link with a RoCE v2 GID for its IP."""
    found: dict[str, tuple[str, int]] = {}
    for host, cand in fabric.chosen.items():
        roce: Roce = seen[host]["roce"].value
        port = next((p for p in roce.ports if p.netdev == cand.link), None) if roce.present else None
        if port is None:
            has = ", ".join(f"{p.hca}->{p.netdev}" for p in roce.ports) if roce.present else "no /sys/class/infiniband"
            d.show("RoCE", names[host], f"no HCA behind {cand.link} ({has})")
            continue
        want = mapped_gid(cand.addr)
        gid = next((g for g in roce.gids if g.hca == port.hca and g.port == port.port and g.type == "RoCE v2"
                    and g.gid == want), None)
        if gid is None:
            listed = "; ".join(f"{g.index} {g.type} {g.gid}" for g in roce.gids if g.hca == port.hca) or "none"
            d.problems.append(Problem(names[host], "RoCE GID", f"{port.hca} port {port.port} behind {cand.link} "
                                      f"lists no RoCE v2 GID for {cand.addr} (GIDs: {listed})",
                                      f"give {cand.link} its IPv4 address {cand.addr} (the GID table follows it) "
                                      f"and check `show_gids` on {names[host]}"))
            continue
        if not port.up:
            d.problems.append(Problem(names[host], "RoCE port", f"{port.hca} port {port.port} is down",
                                      "the port is down while its link answers: reseat the cable, check `ibstat`"))
        found[host] = (port.hca, gid.index)
        d.show("RoCE", names[host], f"{port.hca} port {port.port} ({cand.link}), GID {gid.index} RoCE v2 {gid.gid}")
    hosts = list(fabric.chosen)
    if not hosts or len(found) != len(hosts):
        d.interconnect["profile"] = Value("tcp", "no RoCE HCA behind the fabric link on every node: NCCL over "
                                                 "TCP sockets" if hosts else "a single node: no fabric")
        return
    head_hca, head_index = found[hosts[0]]
    d.interconnect["profile"] = Value("roce", "an HCA with a RoCE v2 GID for the fabric IP on every node")
    d.interconnect["hca"] = Value(head_hca, f"/sys/class/infiniband: the HCA whose GIDs name {fabric.chosen[hosts[0]].link}")
    d.interconnect["gid_index"] = Value(head_index, f"/sys/class/infiniband/{head_hca}: the RoCE v2 GID of "
                                                    f"{fabric.chosen[hosts[0]].addr}")
    for node in d.nodes:
        hca, index = found[node.host]
        if hca != head_hca:
            node.env["NCCL_IB_HCA"] = Value(hca, "this node's HCA differs from the head's")
        if index != head_index:
            node.env["NCCL_IB_GID_INDEX"] = Value(str(index), "this node's RoCE v2 GID index differs (field note 12)")


def _jit(host: str, name: str, cands: list[JitCandidate], user: str, d: Decision) -> Value | None:
    local = [c for c in cands if c.fstype.lower() not in NETWORK_FS]
    pick = next((c for c in local if c.exists and c.writable), None) or \
        next((c for c in local if not c.exists and c.writable), None)
    shown = "; ".join(f"{c.path} {'exists' if c.exists else 'absent'} {c.fstype}"
                      f"{'' if c.writable else ' not writable'}" for c in cands)
    if pick is None:
        nfs = [c.path for c in cands if c.fstype.lower() in NETWORK_FS]
        fix = ("keep the JIT cache off network storage: each node needs its own local directory (field note 2)"
               if nfs and len(nfs) == len(cands) else
               f"`sudo install -d -o {user} -g {user} {cands[0].path if cands else '/var/cache/vllm-jit'}` on {name}")
        d.problems.append(Problem(name, "JIT cache", f"no local directory {user} can write ({shown})", fix))
        d.show("JIT cache", name, shown)
        return None
    d.show("JIT cache", name, f"{pick.path} ({pick.fstype}, {'exists' if pick.exists else 'to be created'})")
    return Value(pick.path, f"local {pick.fstype}, {'exists' if pick.exists else 'absent, its parent'} writable by "
                            f"{user} (never NFS: field note 2)")


def _hf(name: str, cands: list[HfCache], d: Decision) -> Value:
    pick = max(cands, key=lambda c: c.models)  # max keeps the first on a tie: HF_HOME, then the default
    d.show("HF cache", name, "; ".join(f"{c.path} ({c.models} models)" for c in cands))
    why = {"HF_HOME": "the login's HF_HOME", "default": "huggingface_hub's default for the login",
           "found": "a hub cache found on the node"}[pick.source]
    return Value(pick.path, f"{why}, holding {pick.models} model(s)")


def _earlyoom(name: str, oom: EarlyOom, mem: MemInfo, d: Decision) -> None:
    limit = oom.threshold(mem.total)
    if limit is None:
        d.show("earlyoom", name, "not running")
        return
    d.show("earlyoom", name, f"kills below {_gib(limit)} available ({oom.cmdline})")
    if limit > EARLYOOM_SAFE:
        d.problems.append(Problem(name, "earlyoom", f"earlyoom kills below {_gib(limit)} available of "
                                  f"{_gib(mem.total)} ({oom.cmdline})",
                                  "a serving vLLM leaves a few GiB free, and earlyoom killed it at 0.835 (field "
                                  "note 8): set EARLYOOM_ARGS=\"-M 2097152\" (2 GiB) in /etc/default/earlyoom and "
                                  "restart it, or stop it"))


def decide(hosts: list[str], seen: dict[str, dict[str, Observed]], cands: dict[str, list[Candidate]],
           fabric: Fabric, management: dict[str, str | None]) -> Decision:
    """Every value of the inventory and every problem, from the facts and the chosen fabric."""
    d = Decision()
    names = {h: (seen[h]["hostname"].value if seen[h].get("hostname") and seen[h]["hostname"].ok else h)
             for h in hosts}
    broken = False
    for host in hosts:
        for fact in REQUIRED:
            obs = seen[host].get(fact)
            if obs is None or not obs.ok:
                d.problems.append(Problem(names[host], fact, f"could not be read: {obs.error if obs else 'absent'}",
                                          "see the message; the node must answer this read-only command"))
                broken = True
    dup = [n for n, c in Counter(names.values()).items() if c > 1]
    if dup:
        d.problems.append(Problem(", ".join(dup), "hostname", "two nodes report the same hostname",
                                  "give each node its own (`sudo hostnamectl set-hostname NAME`)"))
    if broken:
        return d
    for host in hosts:
        f, name = seen[host], names[host]
        links: dict[str, Link] = f["links"].value
        mgmt = management.get(host)
        d.show("management", name, f"{host} on {mgmt or '?'}" + (f" mtu {links[mgmt].mtu}" if mgmt in links else ""))
        d.show("fabric candidates", name, ", ".join(f"{c.link} {c.addr} mtu {c.mtu}" for c in cands[host]) or "none")
        user, groups = f["user"].value
        docker: Docker = f["docker"].value
        if docker.permitted:
            d.show("docker", name, f"{docker.version} {docker.driver}, {docker.nvidia or 'no NVIDIA runtime'}")
            if not docker.nvidia:
                d.problems.append(Problem(name, "NVIDIA runtime", "neither an nvidia runtime nor "
                                          "nvidia-container-runtime-hook", "install nvidia-container-toolkit "
                                          "(DGX OS ships it) and restart docker"))
        else:
            d.show("docker", name, f"{user} may not use it: {docker.error}")
            d.problems.append(Problem(name, "docker permission", f"{user} cannot use the engine ({docker.error})",
                                      f"`sudo usermod -aG docker {user}` on {name}, then log in again"))
        d.show("login", name, f"{user} ({' '.join(groups)})")
        usable, state, _ = f["state_dir"].value
        d.show("state dir", name, state)
        if not usable:
            d.problems.append(Problem(name, "state dir", state, owner_fix(user, STATE_DIR, [name])))
        jit = _jit(host, name, f["jit_cache"].value, user, d)
        hf = _hf(name, f["hf_cache"].value, d)
        _earlyoom(name, f["earlyoom"].value, f["meminfo"].value, d)
        mem: MemInfo = f["meminfo"].value
        d.show("memory", name, f"MemTotal {_gib(mem.total)}")
        gpus = f["gpus"].value
        d.show("GPUs", name, str(gpus))
        cand = fabric.chosen.get(host)
        if cand is not None:
            speed = _seen(f, "speeds", cand.link)
            d.show("fabric", name, f"{cand.link} {cand.addr} mtu {cand.mtu}" + (f" {speed} Mb/s" if speed else ""))
            _rated(d, name, cand, speed, f)
            fabric_ip = Value(cand.addr, f"{cand.link} ({_mbit(speed)}, mtu {cand.mtu}): every other node reached "
                                         "it over its own fabric link")
        else:
            fabric_ip = Value(host, "a single node: its management address")
        d.nodes.append(NodeValues(host, Value(name, "the node's hostname"), fabric_ip,
                                  Value(gpus, "nvidia-smi -L"), jit or Value("", ""), hf))
    if len(hosts) > 1 and not fabric.found:
        d.problems.append(Problem("all nodes", "fabric", "no interface pair on which every node reaches every "
                                  "other directly:\n    " + "\n    ".join(fabric.tried),
                                  "cable the QSFP ports and give each node's fabric port an IPv4 address in one "
                                  "subnet, apart from the management network (netplan; field note 12)"))
        return d
    _mtu(d, fabric, names)
    links_used = {h: c.link for h, c in fabric.chosen.items()}
    if links_used:
        head_link = links_used[hosts[0]]
        d.interconnect["socket_ifname"] = Value(head_link, "the fabric link: proven by probes between the nodes")
        for node in d.nodes:
            if links_used[node.host] != head_link:
                for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
                    node.env[var] = Value(links_used[node.host], "this node's fabric link has another name")
    else:
        mgmt = management.get(hosts[0]) or "lo"
        d.interconnect["socket_ifname"] = Value(mgmt, "a single node: its management link")
    _roce(d, seen, fabric, names)
    return d
