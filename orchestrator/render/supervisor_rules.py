"""The group supervisor's decisions, pure: which rank took the group down and why, the bound and backoff, the
audit line and the lock in the tool's formats. Installed beside supervisor_node.py on the head (stdlib only)
and unit-tested on the controller.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

EARLYOOM = "earlyoom"
OOM_KILLER = "the kernel's OOM killer (Docker: OOMKilled)"
NO_TIME = "0001-01-01T00:00:00Z"


@dataclass
class RankState:
    """One rank's container as Docker says (`missing`: no such container, or its node did not answer)."""

    rank: int
    node: str
    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    finished_at: float | None = None
    missing: str = ""


def docker_time(text: str | None) -> float | None:
    """Docker's RFC 3339 time (nanoseconds, Z) as epoch seconds; None for its zero time or garbage."""
    if not text or text.startswith("0001-"):
        return None
    try:
        main, _, frac = text.rstrip("Z").partition(".")
        stamp = time.mktime(time.strptime(main, "%Y-%m-%dT%H:%M:%S")) - time.timezone
        return stamp + (float("0." + frac[:6]) if frac else 0.0)
    except ValueError:
        return None


def parse_state(rank: int, node: str, text: str, exit_code: int) -> RankState:
    """`docker container inspect --format '{{json .State}}' NAME` -> RankState (a failed inspect: missing)."""
    if exit_code != 0 or not text.strip():
        return RankState(rank, node, False, missing=text.strip() or f"docker inspect exited {exit_code}")
    try:
        state = json.loads(text)
    except ValueError:
        return RankState(rank, node, False, missing=f"unreadable state: {text.strip()[:200]}")
    return RankState(rank, node, bool(state.get("Running")), state.get("ExitCode"), bool(state.get("OOMKilled")),
                     docker_time(state.get("FinishedAt")))


def first_down(states: list[RankState]) -> RankState | None:
    """The rank whose stop took the group down, or None: a killed one (SIGKILL, OOMKilled) before one that
    exited (a rank whose peer vanished exits 1 at once, and earlyoom's SIGTERM before its SIGKILL lets it go
    first), then the earliest stop (unknown stops after known ones), then by rank."""
    down = [s for s in states if not s.running]
    if not down:
        return None
    return min(down, key=lambda s: (not (s.oom_killed or s.exit_code == 137), s.finished_at is None,
                                    s.finished_at or 0.0, s.rank))


def cause_of(state: RankState, earlyoom_running: bool, earlyoom_said: str = "") -> str:
    """What the node knows of why a rank stopped: Docker's OOMKilled, else earlyoom for a kill by signal on a
    node where it runs (its last log line when there is one), else ""."""
    if state.oom_killed:
        return OOM_KILLER
    if state.exit_code in (137, 143) and earlyoom_running:
        return f"{EARLYOOM}" + (f" ({earlyoom_said.strip()[:300]})" if earlyoom_said.strip() else "")
    return ""


def in_window(attempts: list[float], now: float, window: float) -> list[float]:
    """The attempts that still count: those within the last `window` seconds."""
    return [t for t in attempts if now - t < window]


def may_attempt(attempts: list[float], now: float, bound: int, window: float) -> bool:
    return len(in_window(attempts, now, window)) < bound


def backoff(attempt: int, base: float, cap: float) -> float:
    """Seconds before attempt `attempt + 1`: doubling from `base`, at most `cap`."""
    return min(cap, base * (2 ** max(0, attempt - 1)))


def words(state: RankState, cause: str) -> str:
    if state.missing:
        return f"rank {state.rank} on {state.node} has no container ({state.missing})"
    return (f"rank {state.rank} on {state.node} exited (exit {state.exit_code})" + (f": {cause}" if cause else ""))


def audit_entry(cfg: dict, outcome: str, detail: str, now: float, **extra) -> dict:
    """One line in the tool's audit format (releases/audit.entry), action "recover"."""
    line = {"id": secrets.token_hex(6), "at": round(now, 3), "by": f"{cfg['user']}@{cfg['head_host']}",
            "command": ["spark-deploy-supervisor", cfg["cluster"], f"release {cfg['release']}"],
            "action": "recover", "outcome": outcome, "release": cfg["release"], "detail": detail}
    return {**line, **extra}


def lock_text(cfg: dict, token: str, now: float, ttl: float, pid: int) -> str:
    """The deploy lock as releases/lock.LockDetails writes it (the tool reads and describes it)."""
    return json.dumps({"owner": f"{cfg['user']}@{cfg['head_host']} (supervisor)", "host": cfg["head_host"],
                       "pid": pid, "pid_start": "", "command": ["spark-deploy-supervisor", "recover",
                                                                 f"release {cfg['release']}"],
                       "started_at": now, "expires_at": now + ttl, "token": token, "run_id": None,
                       "release": cfg["release"]}, sort_keys=True)
