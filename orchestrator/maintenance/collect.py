"""The facts a baseline holds, gathered with the node facts of facts/ (one SSH command per node),
and turned into NodeFacts by a pure function.

The boot facts (`boot_units`, `restart_policies`) and the judgement of what comes back on boot are
facts/boot.py's, judged here against the release that served when the window began.
"""

from __future__ import annotations

import json

from ..config.load import Deployment
from ..facts import boot as boot_facts
from ..facts import host, memory  # noqa: F401  (register docker_info, gpu, kernel, os_release, meminfo)
from ..facts.model import FACT as MODEL_FACT
from ..facts.core import Observed, fact, gather
from ..render.plan import Plan
from ..transport.group import Cluster
from ..transport.node import NodeConnection
from ..window.baseline import BootEntry, GpuSeen, ImageSeen, ModelSeen, NodeFacts

IMAGE_FACT = "maintenance_image"
BOOT_FACTS = ("boot_units", "restart_policies")
BASE_FACTS = ("docker_info", "gpu", "kernel", "os_release", "meminfo", MODEL_FACT, IMAGE_FACT)

# "$1" the image ID the release runs. Prints its layer DiffIDs as JSON, or "absent"; a dead engine fails.
_IMAGE = r'''[ -n "$1" ] || { echo unpinned; exit 0; }
if out=$(docker image inspect --format '{{json .RootFS.Layers}}' "$1" 2>&1); then printf '%s\n' "$out"
else case $out in *"o such image"*) echo absent ;; *) printf '%s\n' "$out" >&2; exit 1 ;; esac; fi'''


@fact(IMAGE_FACT, _IMAGE, args=lambda i: [i.plan.image_id or ""])
def parse_image(stdout: str) -> dict:
    """-> {"present": bool, "diff_ids": [...]} ("unpinned": the recipe names no image ID)."""
    text = stdout.strip()
    if text in ("absent", "unpinned"):
        return {"present": False, "diff_ids": [], "unpinned": text == "unpinned"}
    layers = json.loads(text)
    if not isinstance(layers, list):
        raise TypeError(f"not a list of DiffIDs: {text[:80]}")
    return {"present": True, "diff_ids": [str(d) for d in layers]}


def fact_names() -> list[str]:
    return [*BASE_FACTS, *BOOT_FACTS]


def _restart_line(p) -> str:
    """A container's restart policy, keyed by labels for our own containers (recipe, rank, plan: an older
    spark-deploy renamed the ones `--stop` kept) and anyone else's by name."""
    labels = p.container.ours
    who = f"spark-deploy {labels.recipe} rank {labels.rank} plan {labels.plan_hash}" if labels else p.container.name
    return f"{who}: {p.policy_text()}"


def boot_fields(facts: NodeFacts, seen: dict[str, Observed], serving_plan: str | None) -> None:
    """Pure: the boot facts (when gathered) -> units enabled, restart policies, and what comes back on boot,
    judged against `serving_plan` (the release that served at begin)."""
    units = seen.get("boot_units")
    if units is not None and units.ok:
        facts.systemd = "" if units.value.systemd else units.value.why or "not systemd"
        facts.units_enabled = sorted(units.value.enabled) if units.value.systemd else None
    policies = seen.get("restart_policies")
    if policies is not None and policies.ok:
        facts.restart_policies = sorted(_restart_line(p) for p in policies.value if p.policy != "no")
        facts.on_boot = [BootEntry(kind=str(i.kind), name=i.name, starts=i.starts, plan_hash=i.plan_hash,
                                   match=str(i.match)) for i in boot_facts.boot_items(seen, serving_plan)]


def node_facts(node: str, seen: dict[str, Observed], image_id: str | None, serving_plan: str | None = None) -> NodeFacts:
    """Pure: one node's Observed facts -> NodeFacts; each unreadable fact is named in `errors`."""
    facts = NodeFacts(node=node)
    for name, obs in seen.items():
        if not obs.ok:
            facts.errors[name] = obs.error or "unreadable"
    ok = {n: o.value for n, o in seen.items() if o.ok}
    if "gpu" in ok:
        g = ok["gpu"]
        facts.gpu = GpuSeen(name=g["name"], driver=g["driver"], cuda=g["cuda"], clock=g["clock"],
                            max_clock=g["max_clock"], idle=g["idle"], clocks_locked=g["locked"])
    facts.kernel = ok.get("kernel")
    facts.os_release = ok.get("os_release")
    if "docker_info" in ok:
        facts.docker_version, facts.docker_driver = ok["docker_info"]["version"], ok["docker_info"]["driver"]
    if "meminfo" in ok:
        facts.mem_total, facts.mem_available = ok["meminfo"].total, ok["meminfo"].available
    if IMAGE_FACT in ok and image_id and not ok[IMAGE_FACT].get("unpinned"):
        facts.image = ImageSeen(id=image_id, present=ok[IMAGE_FACT]["present"], diff_ids=ok[IMAGE_FACT]["diff_ids"])
    if MODEL_FACT in ok:
        snap = ok[MODEL_FACT]
        facts.model = ModelSeen(commit=snap.commit, absent=snap.absent,
                                files={p: f"{f.blob or 'file'} {f.size if f.size is not None else 'missing'}"
                                       for p, f in snap.files.items()})
    boot_fields(facts, seen, serving_plan)
    return facts


def collect(cluster: Cluster, conns: list[NodeConnection], unreachable: dict[str, BaseException],
            dep: Deployment, plan: Plan, serving_plan: str | None, names: list[str] | None = None
            ) -> dict[str, NodeFacts]:
    """Every node's facts now (one SSH command per node); an unreachable node is recorded as such."""
    gathered = gather(cluster, conns, dep, plan, names or fact_names()) if conns else None
    out: dict[str, NodeFacts] = {}
    why = {**{n: str(e) for n, e in unreachable.items()}, **(gathered.unreachable if gathered else {})}
    for node in (n.name for n in dep.inventory.ranked):
        if node in why:
            out[node] = NodeFacts(node=node, unreachable=why[node])
        else:
            out[node] = node_facts(node, gathered.per_node.get(node, {}), plan.image_id, serving_plan)
    return out
