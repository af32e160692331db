"""The crash-loop fault: a rank that serves its first starts, then dies at every start after them.

SIM_FAULT_CRASH_AFTER_STARTS=N: the first N starts of a container run as usual; from start N+1 on, the rank
exits 1 at once with a CUDA error, as an engine on a GPU gone bad does at every restart. The count lives in
a file in the container's own filesystem (SIM_FAULT_START_STATE), so `docker start` of the same container
goes on counting and a new container (`up --redeploy`, a rollback's) starts afresh. SIM_FAULT_CRASH_RANK
limits it to one rank. A deploy serves (start 1); a restart of it fails every time — what `restart` and a
supervisor's bound must stop, never leaving half a group.
"""

from __future__ import annotations

from .base import SimError, env_float, read_count, write_count

DEFAULT_START_STATE = "/tmp/sim-starts.count"
CRASH = "RuntimeError: CUDA error: unspecified launch failure"


def count_start(env, rank: int) -> None:
    """Count this start; raise the fault's SimError (exit 1) once the starts are past the bound."""
    if not env.get("SIM_FAULT_CRASH_AFTER_STARTS"):
        return
    bound = int(env_float(env, "SIM_FAULT_CRASH_AFTER_STARTS", 0))
    if bound < 0:
        raise SimError(f"ValueError: SIM_FAULT_CRASH_AFTER_STARTS must be >= 0, got {bound}")
    if env.get("SIM_FAULT_CRASH_RANK", "") not in ("", str(rank)):
        return
    state = env.get("SIM_FAULT_START_STATE", DEFAULT_START_STATE)
    starts = read_count(state) + 1
    write_count(state, starts, "SIM_FAULT_CRASH_AFTER_STARTS")
    if starts > bound:
        raise SimError(CRASH)  # what vLLM prints; the count is the fault's, never in the log
