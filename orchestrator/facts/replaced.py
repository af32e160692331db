"""What `up` of this recipe would replace on a node: its running containers, their ports and memory share.

A preflight of the recipe that serves (before a maintenance window, before an `up` of a changed plan)
must judge the node as it will be once those are stopped: their ports are not "taken by another
process", and on a GB10 the memory they hold comes back (field note 8: a serving vLLM holds most of the
unified memory). `up` stops the containers of this recipe (same cluster and recipe labels) and nothing
else, so exactly those count.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ..config.load import Deployment
from ..render.labels import Label, MANAGED_FILTER
from . import engine
from .core import fact

UTILIZATION_FLAGS = ("--gpu-memory-utilization", "--device-memory-utilization")
VLLM_DEFAULT_UTILIZATION = 0.92  # vLLM 0.33's default (tests/data/vllm: "default: 0.92")

_SCRIPT = (f"docker ps -q --no-trunc --filter {shlex.quote(MANAGED_FILTER)} "
           f'--filter "label={Label.CLUSTER}=$1" --filter "label={Label.RECIPE}=$2" --filter status=running '
           "| xargs -r docker inspect --format '{{json .Name}}\t{{json .Config.Labels}}\t{{json .Args}}'")


@dataclass(frozen=True)
class Replaced:
    """One running container of this recipe on the node."""
    name: str
    serve_port: int | None
    master_port: int | None
    utilization: float  # from its argv (vLLM's default when the flag is absent)


def utilization_in(args: list[str]) -> float:
    """The --gpu-memory-utilization a vLLM argv asks for (last one wins, as argparse does)."""
    value = None
    for i, arg in enumerate(args):
        flag, eq, inline = arg.partition("=")
        if flag in UTILIZATION_FLAGS:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else None)
    try:
        return float(value) if value is not None else VLLM_DEFAULT_UTILIZATION
    except ValueError:
        return VLLM_DEFAULT_UTILIZATION


def _port(labels: dict, key: Label) -> int | None:
    value = str(labels.get(str(key), ""))
    return int(value) if value.isdigit() else None


def _filters(cluster: str, recipe: str) -> list[str]:
    """_SCRIPT's `docker ps` filters, for the Engine API op that answers it (engine_probe.op_inspect_lines)."""
    return [MANAGED_FILTER, f"label={Label.CLUSTER}={cluster}", f"label={Label.RECIPE}={recipe}", "status=running"]


@fact("replaced", _SCRIPT, args=lambda i: [i.plan.cluster, i.dep.recipe.name], api=engine.Op.INSPECT_LINES,
      api_args=lambda i: _filters(i.plan.cluster, i.dep.recipe.name))
def parse_replaced(stdout: str) -> list[Replaced]:
    """`docker inspect` lines (name, labels, args as JSON, tab-separated) -> the containers up replaces."""
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        name, labels, args = (json.loads(part) for part in line.split("\t"))
        out.append(Replaced(name.lstrip("/"), _port(labels or {}, Label.SERVE_PORT),
                            _port(labels or {}, Label.MASTER_PORT), utilization_in(args or [])))
    return out


def utilization(dep: Deployment) -> float:
    """The share of memory a vLLM of this recipe takes (the recipe's, else vLLM's default)."""
    return dep.recipe.vllm.gpu_memory_utilization or VLLM_DEFAULT_UTILIZATION
