"""Memory facts and the headroom check (field note 8).

On a GB10 the GPU's memory IS the system's memory: vLLM starts only if gpu_memory_utilization x the
whole (MemTotal) is free, takes that, and its runtime (Python, CUDA context, NCCL, the API server) holds
more beside it. 0.95 rebooted a Spark; 0.835 let earlyoom kill the service; 0.78 left ~2 GiB. Judged
before a 20-70 minute load, for the node as it will be once this recipe's serving containers (which
`up` stops first) have given their memory back.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.load import Deployment
from ..facts.core import Observed, fact
from .registry import Cell, Scope, Status, Verdict, check, missing
from .replaced import VLLM_DEFAULT_UTILIZATION, Replaced

Seen = dict[str, dict[str, Observed]]


def in_rank_order(seen: Seen, dep: Deployment) -> list[tuple[str, dict[str, Observed]]]:
    """Nodes head first, as the inventory ranks them (so fixes list them in a stable order)."""
    order = [n.name for n in dep.inventory.ranked]
    return sorted(seen.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))

GIB = 1 << 30
EARLYOOM_DEFAULT_PERCENT = 10.0  # earlyoom(1): "-m PERCENT ... (default 10 %)"
EARLYOOM_DEFAULT_SWAP_PERCENT = 10.0  # "-s PERCENT": it kills only when swap is that low too


@dataclass(frozen=True)
class MemInfo:
    total: int  # bytes
    available: int  # bytes
    swap_total: int = 0  # bytes
    swap_free: int = 0  # bytes


@fact("meminfo", "cat /proc/meminfo")
def parse_meminfo(stdout: str) -> MemInfo:
    """`/proc/meminfo` -> MemTotal and MemAvailable in bytes (the kernel prints kB = KiB)."""
    values: dict[str, int] = {}
    for line in stdout.splitlines():
        key, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    absent = [k for k in ("MemTotal", "MemAvailable") if k not in values]
    if absent:
        raise ValueError(f"no {' or '.join(absent)} in /proc/meminfo")
    return MemInfo(values["MemTotal"], values["MemAvailable"], values.get("SwapTotal", 0), values.get("SwapFree", 0))


@dataclass(frozen=True)
class EarlyOom:
    running: bool
    percent: float | None = None  # -m: SIGTERM below this % of memory
    kib: int | None = None  # -M: SIGTERM below this many KiB
    cmdline: str = ""
    swap_percent: float | None = None  # -s: ... and swap below this % free

    def kills(self, total: int, available: int, swap_total: int, swap_free: int) -> bool:
        """earlyoom's own rule: memory under its threshold AND free swap under -s (no swap counts as 0 %)."""
        limit = self.threshold(total)
        if limit is None or available > limit:
            return False
        swap_pct = 100.0 * swap_free / swap_total if swap_total > 0 else 0.0
        return swap_pct <= (self.swap_percent if self.swap_percent is not None else EARLYOOM_DEFAULT_SWAP_PERCENT)

    def threshold(self, total: int) -> int | None:
        """Bytes of available memory below which earlyoom starts killing (the lower of -m and -M, as
        earlyoom uses; -m alone defaults to 10 %). Since earlyoom 1.8 the percentage is of MemAvailable +
        AnonPages rather than MemTotal: close to MemTotal on an idle node, which is when preflight runs."""
        if not self.running:
            return None
        candidates = []
        if self.kib is not None:
            candidates.append(self.kib * 1024)
        if self.percent is not None or self.kib is None:
            candidates.append(int(total * (self.percent if self.percent is not None else EARLYOOM_DEFAULT_PERCENT) / 100))
        return min(candidates)


def _first_number(value: str, what: str) -> float:
    head = value.split(",", 1)[0]
    try:
        return float(head)
    except ValueError:
        raise ValueError(f"earlyoom {what} {value!r} is not a number") from None


@fact("earlyoom", "pgrep -a -x earlyoom", ok_codes=(0, 1))
def parse_earlyoom(stdout: str) -> EarlyOom:
    """`pgrep -a -x earlyoom` ("PID cmdline" per process; nothing and exit 1 when none runs) -> whether it
    runs and its memory thresholds (-m PERCENT[,KILL], -M KiB[,KILL], also written -m10)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        return EarlyOom(False)
    pid, _, cmdline = lines[0].partition(" ")
    if not pid.isdigit():
        raise ValueError(f"not a pgrep -a line: {lines[0]!r}")
    argv = cmdline.split()
    percent: float | None = None
    kib: int | None = None
    swap: float | None = None
    i = 1
    while i < len(argv):
        arg = argv[i]
        for opt in ("-m", "-M", "-s"):
            if arg == opt or (arg.startswith(opt) and len(arg) > 2 and arg[2] in "0123456789."):
                value = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
                if arg == opt:
                    i += 1
                if opt == "-m":
                    percent = _first_number(value, "-m")
                elif opt == "-s":
                    swap = _first_number(value, "-s")
                else:
                    kib = int(_first_number(value, "-M"))
        i += 1
    return EarlyOom(True, percent, kib, cmdline, swap)


def utilization(dep: Deployment) -> float:
    return dep.recipe.vllm.gpu_memory_utilization or VLLM_DEFAULT_UTILIZATION


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


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


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
