"""Host facts and checks: Docker engine, GPU (parity, SM clock), kernel and OS, clocks between nodes."""

from __future__ import annotations

import json
import re

from ..config.load import Deployment
from ..facts import boot_cache, engine
from ..facts.core import Observed, fact
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing, parity

Seen = dict[str, dict[str, Observed]]


@fact("docker_info", "docker info --format '{{json .}}'", api=engine.Op.INFO)
def parse_docker_info(stdout: str) -> dict:
    """`docker info --format '{{json .}}'` -> engine version and storage (containerd's image store gives
    the same image another ID than overlay2: identity is compared by DiffIDs)."""
    data = json.loads(stdout)
    status = {k: v for k, v in (data.get("DriverStatus") or [])}
    return {"version": data.get("ServerVersion", ""), "driver": data.get("Driver", ""),
            "containerd_store": "io.containerd.snapshotter" in json.dumps(status) or
            data.get("Driver", "").startswith("overlayfs")}


GPU_QUERY = ("name,driver_version,clocks.sm,clocks.max.sm,clocks_event_reasons.gpu_idle,"
             "clocks_event_reasons.applications_clocks_setting")


# The query is live (clocks); the CUDA line comes from the full report, which only a reboot changes: on
# the boot `up` remembered it on, "$2" is printed instead (boot_cache.py).
GPU_SCRIPT = (f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits || exit\n"
              + boot_cache.SAME_BOOT_SH + "nvidia-smi | grep -oE 'CUDA (UMD )?Version: [0-9.]+'")


@fact("gpu", GPU_SCRIPT, args=lambda i: boot_cache.remembered(i, "gpu_cuda"))
def parse_gpu(stdout: str) -> dict:
    """The first GPU's name, driver, SM clock and its max (MHz, None where nvidia-smi says [N/A]), why the
    clock is held down (idle, or an application-clock lock), and the CUDA version the driver offers."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    parts = [p.strip() for p in lines[0].split(",")]
    if len(parts) != 6:
        raise ValueError(f"expected 6 fields ({GPU_QUERY}), got {len(parts)}: {lines[0]!r}")
    name, driver, clock, max_clock, idle, locked = parts
    cuda = next((cuda_version(line) for line in lines[1:] if line.startswith("CUDA")), "")
    return {"name": name, "driver": driver, "clock": _mhz(clock), "max_clock": _mhz(max_clock),
            "idle": idle == "Active", "locked": locked == "Active", "cuda": cuda}


def cuda_version(banner: str) -> str:
    """The CUDA version nvidia-smi's banner offers: `CUDA Version: 13.0` (R580), `CUDA UMD Version: 13.3`
    (R610 and later); "" when neither is there."""
    found = re.search(r"CUDA (?:UMD )?Version: ([0-9.]+)", banner)
    return found.group(1) if found else ""


def _mhz(text: str) -> int | None:
    return None if text.startswith("[") else int(float(text))  # "[N/A]", "[Not Supported]"


@fact("kernel", "uname -r")
def parse_kernel(stdout: str) -> str:
    value = stdout.strip()
    if not value:
        raise ValueError("empty")
    return value


@fact("os_release", "cat /etc/os-release")
def parse_os_release(stdout: str) -> str:
    fields = dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)
    return fields.get("PRETTY_NAME", fields.get("ID", "")).strip('"')


@fact("clock", "date +%s.%N")
def parse_clock(stdout: str) -> float:
    return float(stdout.strip())


@check("docker-engine", ("docker_info",), Scope.PARITY)
def docker_engine(seen: Seen, dep: Deployment) -> Verdict:
    return parity("docker-engine", seen, "docker_info", lambda v: f"{v['version']} / {v['driver']}",
                  "the Docker engine version or storage driver differs: images may get different IDs (compared "
                  "by layer DiffIDs), and behaviour may differ", status=Status.WARN)


@check("gpu-parity", ("gpu",), Scope.PARITY, field_note=10)
def gpu_parity(seen: Seen, dep: Deployment) -> Verdict:
    return parity("gpu-parity", seen, "gpu", lambda v: f"{v['name']}, driver {v['driver']}, CUDA {v['cuda']}",
                  "GPU, driver or CUDA version differ between nodes: a build difference changed throughput by "
                  "22-24% (field note 10); install the same driver on every node", field_note=10)


@check("sm-clock", ("gpu",), Scope.NODE, field_note=10)
def sm_clock(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("gpu",))
    low = []
    for node, facts in seen.items():
        if node in cells:
            continue
        g = facts["gpu"].value
        shown = f"{g['clock']} of {g['max_clock']} MHz"
        if g["locked"]:
            cells[node] = Cell(Status.WARN, f"{shown}, locked (applications clocks setting active)")
            low.append(node)
        elif g["clock"] is None or g["max_clock"] is None:
            cells[node] = Cell(Status.SKIP, f"nvidia-smi reports no SM clock here ({shown})")
        elif g["idle"]:
            cells[node] = Cell(Status.OK, f"{shown}, idle")  # an idle GPU clocks down: that is no fault
        elif g["clock"] < 0.95 * g["max_clock"]:
            cells[node] = Cell(Status.WARN, shown)
            low.append(node)
        else:
            cells[node] = Cell(Status.OK, shown)
    fix = (f"the SM clock on {', '.join(low)} is below its maximum (locked after a power fault?): "
           "`nvidia-smi -rgc` resets it, or power-cycle the node") if low else ""
    return Verdict("sm-clock", Scope.NODE, cells, fix, 10)


@check("kernel", ("kernel", "os_release"), Scope.PARITY)
def kernel(seen: Seen, dep: Deployment) -> Verdict:
    merged = {n: {"kernel": Observed(value=f"{f['kernel'].value} ({f['os_release'].value})")
                  if f.get("kernel") and f["kernel"].ok and f.get("os_release") and f["os_release"].ok
                  else (f.get("kernel") or Observed(error="not gathered"))} for n, f in seen.items()}
    return parity("kernel", merged, "kernel", str, "the kernel or OS release differs between nodes: run the same "
                  "DGX OS update on every node")


@check("time-offset", ("clock",), Scope.PARITY)
def time_offset(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("clock",))
    stamps = {n: f["clock"].value for n, f in seen.items() if n not in cells}
    if not stamps:
        return Verdict("time-offset", Scope.PARITY, cells)
    ref = min(stamps.values())
    off = {n: t - ref for n, t in stamps.items()}
    bad = [n for n, o in off.items() if o > 2.0]
    for node, o in off.items():
        cells[node] = Cell(Status.WARN if node in bad else Status.OK, f"+{o:.2f} s")
    fix = (f"the clocks of {', '.join(bad)} are ahead by more than 2 s (read in parallel): logs are merged by time; "
           "enable NTP (timedatectl set-ntp true)") if bad else ""
    return Verdict("time-offset", Scope.PARITY, cells, fix)
