"""A recovery that happened during the watch: the head's supervisor counted one more since the previous sample.

Pure: the supervisor's state then and now in, the recovery (its rank, exit code, cause, time down, how many)
out. The state file is the supervisor's own (facts/supervisor.py); its count only grows while it supervises
one release, so a count that rose is a recovery, and one from another release (re-enabled) is not compared.
"""
from __future__ import annotations

from ..facts.supervisor import SupervisorState


def since(before: SupervisorState | None, now: SupervisorState | None) -> dict | None:
    """The recovery made between two samples, or None (no supervisor, nothing new, or a first sample)."""
    if before is None or now is None or now.release != before.release or now.recoveries <= before.recoveries:
        return None
    return {**now.last, "release": now.release, "count": now.recoveries - before.recoveries}


def text(recovered: dict) -> str:
    """"the supervisor recovered release 1 during the watch: rank 1 exit 137 (earlyoom ...), down 14 s"."""
    count = recovered.get("count", 1)
    said = (f"the supervisor recovered release {recovered.get('release')} during the watch"
            + (f" ({count} times)" if count > 1 else "")
            + f": rank {recovered.get('rank')} exit {recovered.get('exit_code')}")
    said += f" ({recovered['cause']})" if recovered.get("cause") else ""
    down = recovered.get("down_seconds")
    said += f", down {down:.0f} s" if isinstance(down, (int, float)) else ""
    return said
