"""`sim fault NODE roce ...`: the node's RoCE HCA (node_roce.py), as it is and as it goes wrong on a Spark.

- `roce` (no option): the HCA a Spark shows, `rocep1s0f0` port 1 ACTIVE with its four GIDs;
- `hca=NAME`: the same HCA under another name (a driver or firmware that names it `mlx5_0`);
- `port=down`: the port's state DOWN (cable out, peer down);
- `ipv4=no`: no IPv4 address on the fabric port, so only the link-local GIDs (index 0/1) exist and
  index 3 reads zeros (what NCCL then fails on);
- `device=no`: the sysfs tree without /dev/infiniband (the container gets no uverbs device);
- `remove=true`: no HCA at all (a node of profile tcp);
- `reset=true`: as `sim up` made it (`--roce`: the Spark HCA; otherwise none).
The spec is written to /etc/sim-roce.json (so a reboot keeps it, like the hardware) and applied by the
node's `sim-roce`; containers started afterwards see it (the nvidia hook carries it in at start).
"""

from __future__ import annotations

from . import node_roce
from .faults_host import _bool, put_file
from .state import NodeInfo, SimError, SimInputError

USAGE = ("fault roce takes [hca=NAME] [port=up|down] [ipv4=yes|no] [device=yes|no], or remove=true, "
         "or reset=true")
_KEYS = {"hca", "port", "ipv4", "device", "remove", "reset"}


def spec_for(node: NodeInfo, opts: dict) -> node_roce.RoceSpec | None:
    """The spec the options describe for this node (None: no HCA)."""
    hca = str(opts.get("hca", node_roce.SPARK_HCA))
    if not hca or not all(c.isalnum() or c in "_-" for c in hca) or len(hca) > 32:
        raise SimInputError(f"fault roce: hca={hca!r} must be 1-32 of A-Z a-z 0-9 _ -")
    spec = node_roce.spark(node.fabric_ip or node.ip, hca)
    port = str(opts.get("port", "up")).lower()
    if port not in ("up", "down"):
        raise SimInputError(f"fault roce: port={port!r} is not up or down")
    if port == "down":
        spec.hcas[hca]["1"].state = node_roce.DOWN
    if not _bool("roce", opts.get("ipv4", "yes"), "ipv4"):
        spec.hcas[hca]["1"].gids = spec.hcas[hca]["1"].gids[:2]
    spec.device = _bool("roce", opts.get("device", "yes"), "device")
    return spec


def roce(cluster, node: NodeInfo, opts: dict) -> str:
    unknown = set(opts) - _KEYS
    if unknown:
        raise SimInputError(USAGE)
    if "reset" in opts or "remove" in opts:
        if len(opts) > 1:
            raise SimInputError(USAGE)
        key = "reset" if "reset" in opts else "remove"
        if not _bool("roce", opts[key], key):
            raise SimInputError(f"fault roce: {key}=false does nothing")
        made_with = bool((cluster.info() or {}).get("roce")) if key == "reset" else False
        spec = spec_for(node, {}) if made_with else None
    else:
        spec = spec_for(node, opts)
    apply(cluster, node, spec)
    if spec is None:
        return f"{node.name}: no RoCE HCA"
    (hca, ports), = spec.hcas.items()
    port = ports["1"]
    return (f"{node.name}: RoCE HCA {hca} port 1 {port.state.split()[-1]}, {len(port.gids)} GIDs"
            + ("" if spec.device else ", no /dev/infiniband"))


def apply(cluster, node: NodeInfo, spec: node_roce.RoceSpec | None) -> None:
    """Write (or remove) the node's spec and let its sim-roce lay out the tree."""
    if spec is None:
        cluster.exec(node.index, ["rm", "-f", node_roce.ROCE_SPEC])
    else:
        put_file(cluster, node, node_roce.ROCE_SPEC, spec.to_json().encode(), 0o644)
    r = cluster.exec(node.index, ["/usr/local/sbin/sim-roce"], check=False)
    if r.code != 0:
        raise SimError(f"{node.name}: sim-roce failed: {r.stderr.strip() or r.stdout.strip()}")
