"""Memory facts: /proc/meminfo and earlyoom's thresholds (field note 8: on a GB10 the GPU's memory IS the
system's memory, and earlyoom kills the largest process, a vLLM, when memory and swap run low)."""

from __future__ import annotations

from dataclasses import dataclass

from .core import fact

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


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"
