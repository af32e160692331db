"""PID 1 of the container: runs the server as its child, forwards signals, and plays the OOM killer."""
from __future__ import annotations

import os
import signal
import sys
import time

from .base import Life, Stopped, env_float


def oom_fault_applies(env, rank: int) -> bool:
    """SIM_FAULT_OOM=1 hits every rank, or only SIM_FAULT_OOM_RANK when that is set."""
    only = env.get("SIM_FAULT_OOM_RANK", "")
    return env.get("SIM_FAULT_OOM") == "1" and only in ("", str(rank))


def oom_limit_bytes(env) -> int:
    return int(env_float(env, "SIM_FAULT_OOM_MIB", 128.0) * 2**20)


def exhaust_memory(env, life: "Life") -> None:
    """Really allocate (and touch) memory in steps, as a KV-cache allocation past what is free would.

    In a container with a memory limit the kernel's OOM killer ends this (Docker: OOMKilled=true);
    otherwise the supervisor does when the RSS passes SIM_FAULT_OOM_MIB. The hard cap is a guard.
    """
    held, cap, step = [], oom_limit_bytes(env) + 256 * 2**20, 8 * 2**20
    while len(held) * step < cap:
        held.append(b"\x01" * step)
        life.sleep(0.005)
    life.stop.wait()
    raise Stopped()


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _die_with_parent() -> None:
    """The server must not outlive its supervisor (outside a container nothing else would kill it)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def supervise(serve, watch_oom: bool, limit: int) -> int:
    """PID 1 of the container: run the server as a child, forward SIGTERM/SIGINT, return its status.

    A process cannot SIGKILL itself as PID 1 of its namespace (the kernel ignores it), and a real OOM
    kill comes from outside the process anyway; with `watch_oom`, this parent plays the OOM killer:
    it SIGKILLs the child once its RSS passes `limit`. A child killed by signal N gives 128 + N
    (137 for SIGKILL), what Docker shows for a vLLM killed by the kernel.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _die_with_parent()
        serve()  # never returns: os._exit
        os._exit(1)

    def forward(signum, frame) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGUSR1, forward)  # the `stall` fault (`docker kill --signal USR1`): the server's to act on
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG if watch_oom else 0)  # -1: PID 1 reaps orphans too
        if pid == child:
            break
        if watch_oom and pid == 0:
            if _rss_bytes(child) > limit:
                os.kill(child, signal.SIGKILL)
            time.sleep(0.01)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


