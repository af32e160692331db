"""Who may have killed a rank: a SIGKILL or SIGTERM nobody of ours sent, on a node where earlyoom runs.

On a GB10 earlyoom kills the largest process (a vLLM) when memory and swap run low (field note 8: 0.835
was killed for 17 minutes). The container's own state says only "exit 137"; the node says whether
earlyoom runs there, with which thresholds, and how much memory is available now.
"""

from __future__ import annotations

from ..facts.memory import gib, parse_earlyoom, parse_meminfo
from ..transport.node import NodeConnection

BY_SIGNAL = {137: "SIGKILL", 143: "SIGTERM"}


def earlyoom_note(conn: NodeConnection, exit_code: int | None) -> str:
    """"earlyoom runs on NODE (cmdline); MemAvailable now X": for an exit by signal; "" otherwise, and
    when the node cannot be asked (this is an explanation, never a reason to fail)."""
    if exit_code not in BY_SIGNAL:
        return ""
    try:
        found = conn.run(["pgrep", "-a", "-x", "earlyoom"], timeout=10)
        oom = parse_earlyoom(found.stdout if found.exit_code in (0, 1) else "")
        if not oom.running:
            return ""
        mem = conn.run(["cat", "/proc/meminfo"], timeout=10)
        now = f"; MemAvailable now {gib(parse_meminfo(mem.stdout).available)}" if mem.ok else ""
    except Exception:  # noqa: BLE001 - unreachable or unparsable: no note rather than a wrong one
        return ""
    return (f"earlyoom runs on {conn.name} ({oom.cmdline}){now}: it {BY_SIGNAL[exit_code]}s the largest process "
            "when memory and swap run low (field note 8)")
