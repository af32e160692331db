"""Host checks: Docker engine, GPU (parity, SM clock), kernel and OS, clocks between nodes (the facts:
facts/host.py)."""

from __future__ import annotations

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..config.load import Deployment
from ..facts.core import Observed
from ..facts import host  # noqa: F401  (registers the facts judged here)
from .registry import check, missing, parity

Seen = dict[str, dict[str, Observed]]


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
