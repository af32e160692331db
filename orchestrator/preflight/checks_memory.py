"""The memory headroom check (field note 8); its facts are facts/memory.py and facts/replaced.py.

On a GB10 the GPU's memory IS the system's memory: vLLM starts only if gpu_memory_utilization x the
whole (MemTotal) is free, takes that, and its runtime (Python, CUDA context, NCCL, the API server) holds
more beside it. 0.95 rebooted a Spark; 0.835 let earlyoom kill the service; 0.78 left ~2 GiB. Judged
before a 20-70 minute load, for the node as it will be once this recipe's serving containers (which
`up` stops first) have given their memory back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.load import Deployment
from ..facts.core import Observed, in_rank_order
from ..facts.memory import GIB, MemInfo, gib
from ..facts.replaced import Replaced, utilization
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]


def reserve(dep: Deployment) -> int:
    """Bytes left free after vLLM's share: the recipe's preflight.memory_reserve_gib (default 4)."""
    return int(dep.recipe.preflight.memory_reserve_gib * GIB)


def runtime(dep: Deployment) -> int:
    """Bytes a running vLLM holds beside its share: the recipe's preflight.runtime_overhead_gib."""
    return int(dep.recipe.preflight.runtime_overhead_gib * GIB)


def held(replaced: list[Replaced], total: int, dep: Deployment) -> int:
    """What this recipe's serving containers on a node hold, given back when `up` stops them: each one's
    share plus the runtime beside it (an estimate: `up` measures again after the stop)."""
    return sum(int(r.utilization * total) + runtime(dep) for r in replaced)


@dataclass(frozen=True)
class Outlook:
    """One node's memory as this recipe will find and leave it."""
    mem: MemInfo
    given_back: int  # what the replaced containers hold now
    need: int  # vLLM's share: it starts only if this much is free
    runtime: int

    @property
    def free_at_start(self) -> int:
        return self.mem.available + self.given_back

    @property
    def headroom(self) -> int:
        return self.free_at_start - self.need

    @property
    def after_ready(self) -> int:
        """MemAvailable once it serves; negative: that much pages out to swap."""
        return self.headroom - self.runtime

    @property
    def swap_free_after(self) -> int:
        return self.mem.swap_free - max(0, -self.after_ready)


@check("memory-headroom", ("meminfo", "earlyoom", "replaced"), Scope.NODE, field_note=8)
def memory_headroom(seen: Seen, dep: Deployment) -> Verdict:
    util, keep = utilization(dep), reserve(dep)
    cells = missing(seen, ("meminfo", "replaced"))
    refused, short, tripped, exhausted = [], [], [], []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        mem: MemInfo = facts["meminfo"].value
        back = held(facts["replaced"].value, mem.total, dep)
        look = Outlook(mem, back, int(util * mem.total), runtime(dep))
        free = f"MemAvailable {gib(mem.available)}" + (f" + {gib(back)} held by this recipe's serving "
                                                        f"containers (up stops them first)" if back else "")
        value = (f"{free} - vLLM {util:g} x MemTotal {gib(mem.total)} = {gib(look.need)} "
                 f"leaves {gib(look.headroom)}")
        if look.headroom < 0:
            cells[node] = Cell(Status.FAIL, f"{value}: vLLM refuses to start with less free than its share")
            refused.append(node)
            continue
        if look.headroom < keep:
            cells[node] = Cell(Status.FAIL, f"{value}, under the {gib(keep)} reserve")
            short.append(node)
            continue
        ready = f"; once it serves ~{gib(look.after_ready)} (runtime ~{gib(look.runtime)})"
        if look.swap_free_after < 0:
            cells[node] = Cell(Status.FAIL, f"{value}{ready}: that exhausts memory and swap "
                                            f"({gib(mem.swap_free)} free): the kernel's OOM killer ends it")
            exhausted.append(node)
            continue
        oom = facts.get("earlyoom")
        if oom is None or not oom.ok:
            cells[node] = Cell(Status.OK, f"{value}{ready}; earlyoom unknown "
                                          f"({oom.error if oom else 'not gathered'})")
            continue
        limit = oom.value.threshold(mem.total)
        if oom.value.kills(mem.total, look.after_ready, mem.swap_total, look.swap_free_after):
            cells[node] = Cell(Status.WARN, f"{value}{ready}, under earlyoom's {gib(limit)} threshold with swap "
                                            f"{gib(max(look.swap_free_after, 0))} free ({oom.value.cmdline})")
            tripped.append(node)
        else:
            cells[node] = Cell(Status.OK, value + ready + (f"; earlyoom kills below {gib(limit)} with swap "
                                                           "nearly full" if limit is not None
                                                           else "; earlyoom not running"))
    fixes = []
    if refused:
        fixes.append(f"{', '.join(refused)}: less is free than vLLM's share, even with this recipe's own "
                     "containers stopped (vLLM exits: 'Free memory on device ... is less than desired GPU memory "
                     "utilization'): lower vllm.gpu_memory_utilization or stop what holds the memory")
    if short:
        fixes.append(f"{', '.join(short)}: starting would leave less than {gib(keep)} for the OS "
                     f"(0.95 rebooted a Spark, field note 8): lower vllm.gpu_memory_utilization, free memory, "
                     f"or (knowingly) lower preflight.memory_reserve_gib")
    if exhausted:
        fixes.append(f"{', '.join(exhausted)}: its share and runtime do not fit in memory and swap: lower "
                     "vllm.gpu_memory_utilization")
    if tripped:
        fixes.append(f"{', '.join(tripped)}: earlyoom would kill the service once vLLM has its share (0.835 did, "
                     "field note 8): lower vllm.gpu_memory_utilization or earlyoom's -m/-M")
    return Verdict("memory-headroom", Scope.NODE, cells, "; ".join(fixes), 8)
