"""The group supervisor as its head node tells it: systemd's word for its unit and the state file it keeps.

A constant script (the unit name and the state file's path are its arguments) and a pure parser; `status` and
`supervise status` show what it says (watching, recovering, waiting for the lock, crash-looped; its recoveries).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

# "$1" unit name, "$2" state file. Two sections, each under its marker.
SCRIPT = r'''echo "@active"; systemctl is-active "$1" 2>/dev/null || true
echo "@state"; cat -- "$2" 2>/dev/null || true'''


class Watch(StrEnum):
    WATCHING = "watching"
    RECOVERING = "recovering"
    WAITING_LOCK = "waiting-lock"
    CRASH_LOOPED = "crash-looped"
    IDLE = "idle"  # its release no longer serves (replaced, rolled back, stopped)
    NONE = "none"  # no supervisor was ever enabled here (or it was disabled)
    UNKNOWN = "unknown"  # a state file this parser cannot read


@dataclass
class SupervisorState:
    active: str  # systemd's ActiveState word ("active", "inactive", "failed", or "" without systemd)
    watch: Watch
    release: int | None = None
    detail: str = ""
    recoveries: int = 0
    last: dict = field(default_factory=dict)

    @property
    def crash_looped(self) -> bool:
        return self.watch is Watch.CRASH_LOOPED

    def line(self) -> str:
        """"supervisor (active): watching release 2; 1 recovery, last: rank 1 exit 137, down 12 s"."""
        if self.watch is Watch.NONE:
            return "supervisor: not enabled (`spark-deploy supervise enable`)"
        said = f"supervisor ({self.active or 'unknown'}): {self.watch} release {self.release}: {self.detail}"
        if self.recoveries:
            last = self.last
            said += (f"; {self.recoveries} recover{'y' if self.recoveries == 1 else 'ies'}, last: rank "
                     f"{last.get('rank')} exit {last.get('exit_code')}"
                     + (f" ({last['cause']})" if last.get("cause") else "")
                     + (f", down {last['down_seconds']:.0f} s" if isinstance(last.get("down_seconds"), (int, float))
                        else ""))
        return said


def parse(stdout: str) -> SupervisorState:
    """Pure: SCRIPT's output -> SupervisorState."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        if line in ("@active", "@state"):
            current = line[1:]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    active = " ".join(sections.get("active", [])).strip()
    text = "\n".join(sections.get("state", [])).strip()
    if not text:
        return SupervisorState(active, Watch.NONE)
    try:
        data = json.loads(text)
        watch = Watch(data.get("status"))
    except (ValueError, TypeError):
        return SupervisorState(active, Watch.UNKNOWN, detail=f"unreadable state file: {text[:200]}")
    return SupervisorState(active, watch, data.get("release"), str(data.get("detail", "")),
                           int(data.get("recoveries") or 0), data.get("last") or {})
