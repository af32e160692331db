"""Memory facts and the headroom check (field note 8).

On a GB10 the GPU's memory IS the system's memory: vLLM reserves gpu_memory_utilization x the whole
(MemTotal), so what is left for the OS, Docker and everything else is MemAvailable minus that. 0.95 rebooted
a Spark; 0.835 left ~2 GiB and earlyoom killed the service. Judged before a 20-70 minute load.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.load import Deployment
from .facts import Observed, fact
from .registry import Cell, Scope, Status, Verdict, check, missing

Seen = dict[str, dict[str, Observed]]


def in_rank_order(seen: Seen, dep: Deployment) -> list[tuple[str, dict[str, Observed]]]:
    """Nodes head first, as the inventory ranks them (so fixes list them in a stable order)."""
    order = [n.name for n in dep.inventory.ranked]
    return sorted(seen.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))

GIB = 1 << 30
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's own default when the recipe sets none
EARLYOOM_DEFAULT_PERCENT = 10.0  # earlyoom(1): "-m PERCENT ... (default 10 %)"


@dataclass(frozen=True)
class MemInfo:
    total: int  # bytes
    available: int  # bytes


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
    return MemInfo(values["MemTotal"], values["MemAvailable"])


@dataclass(frozen=True)
class EarlyOom:
    running: bool
    percent: float | None = None  # -m: SIGTERM below this % of memory
    kib: int | None = None  # -M: SIGTERM below this many KiB
    cmdline: str = ""

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
    i = 1
    while i < len(argv):
        arg = argv[i]
        for opt in ("-m", "-M"):
            if arg == opt or (arg.startswith(opt) and len(arg) > 2 and arg[2] in "0123456789."):
                value = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
                if arg == opt:
                    i += 1
                if opt == "-m":
                    percent = _first_number(value, "-m")
                else:
                    kib = int(_first_number(value, "-M"))
        i += 1
    return EarlyOom(True, percent, kib, cmdline)


def utilization(dep: Deployment) -> float:
    return dep.recipe.vllm.gpu_memory_utilization or VLLM_DEFAULT_UTILIZATION


def reserve(dep: Deployment) -> int:
    """Bytes left free after vLLM's share: the recipe's preflight.memory_reserve_gib (default 4)."""
    return int(dep.recipe.preflight.memory_reserve_gib * GIB)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


@check("memory-headroom", ("meminfo", "earlyoom"), Scope.NODE, field_note=8)
def memory_headroom(seen: Seen, dep: Deployment) -> Verdict:
    util, keep = utilization(dep), reserve(dep)
    cells = missing(seen, ("meminfo",))
    short, tripped = [], []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        mem: MemInfo = facts["meminfo"].value
        vllm = int(util * mem.total)
        headroom = mem.available - vllm
        value = (f"MemAvailable {gib(mem.available)} - vLLM {util:g} x MemTotal {gib(mem.total)} = {gib(vllm)} "
                 f"leaves {gib(headroom)}")
        if headroom < keep:
            cells[node] = Cell(Status.FAIL, f"{value}, under the {gib(keep)} reserve")
            short.append(node)
            continue
        oom = facts.get("earlyoom")
        if oom is None or not oom.ok:
            cells[node] = Cell(Status.OK, f"{value}; earlyoom unknown ({oom.error if oom else 'not gathered'})")
            continue
        limit = oom.value.threshold(mem.total)
        if limit is not None and headroom < limit:
            cells[node] = Cell(Status.WARN, f"{value}, under earlyoom's {gib(limit)} threshold "
                                            f"({oom.value.cmdline})")
            tripped.append(node)
        else:
            cells[node] = Cell(Status.OK, value + (f"; earlyoom kills below {gib(limit)}" if limit is not None
                                                   else "; earlyoom not running"))
    fixes = []
    if short:
        fixes.append(f"{', '.join(short)}: starting would leave less than {gib(keep)} for the OS "
                     f"(0.95 rebooted a Spark, field note 8): lower vllm.gpu_memory_utilization, free memory, "
                     f"or (knowingly) lower preflight.memory_reserve_gib")
    if tripped:
        fixes.append(f"{', '.join(tripped)}: earlyoom would kill the service once vLLM has its share (0.835 did, "
                     "field note 8): lower vllm.gpu_memory_utilization or earlyoom's -m/-M")
    return Verdict("memory-headroom", Scope.NODE, cells, "; ".join(fixes), 8)
