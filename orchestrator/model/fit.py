"""`fit`: does the recipe's model fit the nodes, before a byte of weights is downloaded?

The model is sized from its safetensors headers and config.json: the head's cache when it holds the
snapshot (the model_headers fact preflight's model-fit reads), else the Hub by range requests
(checks/hub_headers.py). Memory per node is each node's MemTotal (the meminfo fact, read over SSH) or one
given figure (`--memory`). The arithmetic and the verdict are preflight's model-fit's own
(checks/model_fit.py: `fit`, `Fit.state`, `fixes`), so `fit`, `model pull` and `preflight` agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from ..checks.hub_headers import read_from_hub
from ..checks.model_fit import Fit, FitError, FitState, Settings, fit, fixes
from ..checks.safetensors_headers import Headers
from ..config.load import Deployment
from ..config.recipe import Recipe
from ..facts.core import gather
from ..facts.fit import FACT, head_headers, recipe_settings
from ..render.plan import build_plan
from ..transport.group import Cluster
from ..transport.node import NodeConnection

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(GiB|GB|G|TiB|TB|T)?\s*$", re.IGNORECASE)
_UNIT = {"gib": 1 << 30, "gb": 10**9, "g": 1 << 30, "tib": 1 << 40, "tb": 10**12, "t": 1 << 40}


class FitUnknown(Exception):
    """The model could not be sized (no headers from the head's cache or the Hub, a node's memory not read)."""


def parse_memory(text: str) -> int:
    """'128GB' (10^9), '119.7GiB' or '128G' (2^30), a bare number in GiB -> bytes; ValueError says the forms."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"--memory {text!r}: write a size such as 128GB (10^9 bytes) or 119.7GiB (2^30 bytes)")
    value = float(m.group(1)) * _UNIT[(m.group(2) or "GiB").lower()]
    if value <= 0:
        raise ValueError(f"--memory {text!r}: must be more than 0")
    return int(value)


@dataclass(frozen=True)
class NodeFit:
    node: str
    mem_total: int
    fit: Fit | None  # None: the model could not be sized (error says why)
    error: str = ""

    @property
    def state(self) -> FitState | None:
        return self.fit.state if self.fit else None

    def as_dict(self) -> dict:
        if self.fit is None:
            return {"mem_total": self.mem_total, "state": "not-sized", "error": self.error}
        f = self.fit
        out = {"state": str(f.state), "mem_total": f.mem_total, "utilization": f.utilization, "budget": f.budget,
               "weights_per_rank": f.weights, "activation": f.activation, "non_torch": f.non_torch,
               "cuda_graphs": f.cuda_graphs, "kv_memory": f.kv_memory, "max_model_len": f.max_model_len,
               "block_size": f.block_size, "max_num_seqs": f.max_num_seqs}
        if f.kv is None:
            return {**out, "kv_bytes_per_token": None, "tokens": None, "concurrency": None,
                    "kv_unknown": f.kv_unknown}
        return {**out, "kv_kind": str(f.kv.kind), "kv_bytes_per_token": f.kv.bytes_per_token,
                "kv_formula": f.kv.formula(), "tokens": f.tokens if f.weights_fit else 0,
                "concurrency": round(f.concurrency, 2) if f.weights_fit else 0.0}


@dataclass
class FitAnswer:
    repo: str
    revision: str  # the commit the Hub named, or the revision the head's cache resolved
    source: str  # where the headers came from, said in full
    memory_from: str  # where MemTotal came from
    tp: int
    nodes: list[NodeFit] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(n.fit is not None and not n.state.fails for n in self.nodes)

    def fixes(self) -> list[str]:
        def named(state: FitState) -> list[str]:
            return [n.node for n in self.nodes if n.state is state]
        unsized = [f"{n.node}: cannot size the model: {n.error}" for n in self.nodes if n.fit is None]
        refused = next((n.fit.kv_unknown for n in self.nodes if n.state is FitState.KV_REFUSED), "")
        return unsized + fixes(named(FitState.WEIGHTS_SHORT), named(FitState.KV_SHORT),
                               named(FitState.KV_UNJUDGED), self.tp, (named(FitState.KV_REFUSED), refused))

    def summary(self) -> str:
        """One line naming the figures of the first node that does not fit (what `model pull` refuses with)."""
        bad = next((n for n in self.nodes if n.fit is None or n.state.fails), None)
        if bad is None:
            return "fits on every node"
        if bad.fit is None:
            return f"{bad.node}: cannot size the model: {bad.error}"
        f = bad.fit
        if f.state is FitState.WEIGHTS_SHORT:
            return (f"{bad.node}: weights {f.weights / (1 << 30):.1f} GiB/rank + {(f.activation + f.non_torch + f.cuda_graphs) / (1 << 30):.1f} GiB "
                    f"runtime do not fit {f.utilization:g} x MemTotal {f.mem_total / (1 << 30):.1f} GiB = "
                    f"{f.budget / (1 << 30):.1f} GiB ({-f.kv_memory / (1 << 30):.1f} GiB short)")
        if f.state is FitState.KV_REFUSED:
            return f"{bad.node}: {f.kv_unknown}"
        return (f"{bad.node}: {f.tokens:,} KV tokens fit ({f.kv.bytes_per_token:,} B/token in "
                f"{f.kv_memory / (1 << 30):.1f} GiB), fewer than max_model_len {f.max_model_len:,}")

    def as_dict(self) -> dict:
        return {"ok": self.ok, "repo": self.repo, "revision": self.revision, "source": self.source,
                "memory_from": self.memory_from, "tensor_parallel_size": self.tp,
                "nodes": {n.node: n.as_dict() for n in self.nodes}, "fixes": self.fixes()}


def judge(repo: str, revision: str, source: str, memory_from: str, headers: Headers, memory: dict[str, int],
          s: Settings) -> FitAnswer:
    """Pure: each node's Fit with its MemTotal (the weights judged even when the KV layout is not known)."""
    answer = FitAnswer(repo, revision, source, memory_from, s.tp)
    for node, total in memory.items():
        try:
            answer.nodes.append(NodeFit(node, total, fit(headers.headers, headers.config, total, s, kv_optional=True)))
        except FitError as exc:
            answer.nodes.append(NodeFit(node, total, None, str(exc)))
    return answer


def from_hub(repo: str, revision: str) -> tuple[Headers, str, str]:
    """(headers, commit, where) from the Hub; HubError says why not."""
    got = read_from_hub(repo, revision)
    return got.headers, got.commit, f"the Hub at {got.endpoint} ({repo}@{got.commit}, header ranges only)"


def fit_given(recipe: Recipe, mem_total: int, nodes: int, said: str) -> FitAnswer:
    """`fit --memory SIZE --nodes N`: no inventory; the Hub's headers, every node with the given memory."""
    headers, commit, source = from_hub(recipe.model.repo, recipe.model.revision)
    memory = {f"node-{i}": mem_total for i in range(1, nodes + 1)}
    return judge(recipe.model.repo, commit, source, f"--memory {said} on each of {nodes} node(s)", headers, memory,
                 recipe_settings(recipe))


def fit_on(cluster: Cluster, conns: list[NodeConnection], dep: Deployment, revision: str | None = None,
           hub: bool = True) -> FitAnswer:
    """Each node's MemTotal read over SSH, the headers from the head's cache (when it holds
    repo@revision) or else the Hub (unless `hub` is false: FitUnknown). Every node must answer (FitUnknown
    names the ones that did not)."""
    if revision:
        dep = replace(dep, recipe=dep.recipe.model_copy(
            update={"model": dep.recipe.model.model_copy(update={"revision": revision})}))
    model = dep.recipe.model
    gathered = gather(cluster, conns, dep, build_plan(dep), ["meminfo", FACT])
    memory, unread = {}, dict(gathered.unreachable)
    for node in dep.inventory.ranked:
        seen = gathered.per_node.get(node.name, {}).get("meminfo")
        if seen is not None and seen.ok:
            memory[node.name] = seen.value.total
        else:
            unread.setdefault(node.name, seen.error if seen is not None else "not reached")
    if unread:
        raise FitUnknown("; ".join(f"{n}: MemTotal not read ({why})" for n, why in unread.items()))
    headers, why = head_headers(gathered.per_node, dep)
    if headers is not None and headers.config:
        source, commit = f"{dep.inventory.head}'s cache ({headers.snapshot})", headers.snapshot.rstrip("/").rsplit("/", 1)[-1]
    elif not hub:
        raise FitUnknown(f"not from {dep.inventory.head}'s cache ({why or 'no config.json there'}), and the Hub is "
                         "not asked (--offline)")
    else:
        headers, commit, source = from_hub(model.repo, model.revision)
        source += f"; not from {dep.inventory.head}'s cache: {why or 'no config.json there'}"
    return judge(model.repo, commit, source, "MemTotal read from each node (/proc/meminfo)", headers, memory,
                 recipe_settings(dep.recipe))


def fit_inventory(dep: Deployment) -> FitAnswer:
    """`fit RECIPE -i INVENTORY`: its own connections, closed after."""
    cluster = Cluster(dep.inventory)
    try:
        conns, failures = cluster.open_reachable()
        if failures:
            raise FitUnknown("; ".join(f"{n}: not reached ({exc})" for n, exc in failures.items()))
        return fit_on(cluster, conns, dep)
    finally:
        cluster.close()
