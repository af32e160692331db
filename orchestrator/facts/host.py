"""Host facts: the Docker engine, the GPU (name, driver, SM clock, CUDA), kernel and OS, the node's clock.

The judges are preflight's checks_host.py; maintenance records the same facts in its baseline."""

from __future__ import annotations

import json
import re

from . import boot_cache, engine
from .core import fact


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
