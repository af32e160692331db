"""CPU seconds a simulated node's container has used (its cgroup), for benchmarks on a shared machine.

On a 2-core machine that other sessions load, wall-clock rates swing 2x between runs; the CPU a transfer
costs on both nodes does not, so the benchmarks report it beside the rates: on a CPU-bound path, a cost
ratio is the rate ratio an unloaded machine would show.
"""

from __future__ import annotations

from pathlib import Path

_PATHS = ("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage",  # cgroup v1 (cgroupfs driver): nanoseconds
          "/sys/fs/cgroup/system.slice/docker-{id}.scope/cpu.stat",  # v2 (systemd driver): usage_usec
          "/sys/fs/cgroup/docker/{id}/cpu.stat")  # v2 (cgroupfs driver)


def cpu_seconds(container_id: str) -> float | None:
    """The container's CPU time so far, None when no cgroup file of a known layout is readable."""
    for pattern in _PATHS:
        path = Path(pattern.format(id=container_id))
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpuacct.usage":
            return int(text) / 1e9
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    return None


def nodes_cpu(container_ids: list[str]) -> float | None:
    """The summed CPU seconds of these containers so far (None when one cannot be read)."""
    values = [cpu_seconds(i) for i in container_ids]
    return None if any(v is None for v in values) else sum(values)
