"""Each release's recoveries, from the one place that holds them: the `recover` audit lines the group
supervisor writes on every node (render/supervisor_rules.audit_entry; outcome ok, failed or crash-loop).

Pure: the merged audit lines in, a summary per release out (`history` shows it); no second store.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

RECOVER = "recover"  # operation.AuditAction.RECOVER's word (this layer sits below operation/)


@dataclass
class Recoveries:
    """One release's recoveries: how many served again, how many attempts failed, the newest one, a crash loop."""

    release: int
    recovered: int = 0  # attempts after which the group served again
    failed: int = 0  # attempts that failed (every rank stopped again)
    last_at: float | None = None  # the newest attempt (ok or failed)
    last_outcome: str = ""
    last_rank: int | None = None
    last_exit_code: int | None = None
    last_cause: str = ""  # the node's cause when it knew one (OOM kill, earlyoom, the probe's failure)
    last_down_seconds: float | None = None
    crash_loop: str = ""  # the supervisor's words when it stopped the release as crash-looped
    crash_loop_at: float | None = None

    def text(self) -> str:
        """"1 recovery, last: rank 1 exit 137 (earlyoom ...), down 14 s, 2026-12-07 15:01:02; crash loop: ..."."""
        said = f"{self.recovered} recover{'y' if self.recovered == 1 else 'ies'}"
        if self.failed:
            said += f", {self.failed} failed"
        if self.last_at is not None:
            said += f", last: rank {self.last_rank} exit {self.last_exit_code}"
            said += f" ({self.last_cause})" if self.last_cause else ""
            said += "" if self.last_outcome == "ok" else f" [{self.last_outcome}]"
            said += f", down {self.last_down_seconds:.0f} s" if self.last_down_seconds is not None else ""
            said += ", " + time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.last_at))
        if self.crash_loop:
            said += f"; crash loop: {self.crash_loop}"
        return said

    def as_dict(self) -> dict:
        return asdict(self)


def _number(value, kind):
    try:
        return kind(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def of_audit(lines: list[dict]) -> dict[int, Recoveries]:
    """Pure: merged audit lines (oldest first) -> {release id: its Recoveries}; releases without one are absent."""
    out: dict[int, Recoveries] = {}
    for line in lines:
        if line.get("action") != RECOVER:
            continue
        release = _number(line.get("release"), int)
        if release is None:
            continue
        r = out.setdefault(release, Recoveries(release))
        at = _number(line.get("at"), float)
        outcome = str(line.get("outcome", ""))
        if outcome == "crash-loop":
            r.crash_loop, r.crash_loop_at = str(line.get("detail", "")), at
            continue
        if outcome == "ok":
            r.recovered += 1
        else:
            r.failed += 1
        if r.last_at is None or (at or 0) >= r.last_at:
            r.last_at, r.last_outcome = at or 0.0, outcome
            r.last_rank, r.last_exit_code = _number(line.get("rank"), int), _number(line.get("exit_code"), int)
            r.last_down_seconds = _number(line.get("down_seconds"), float)
            r.last_cause = str(line.get("cause") or "")
    return out
