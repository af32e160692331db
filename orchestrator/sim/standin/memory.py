"""A rank's share of its node's unified memory, claimed from the node's sim-memory daemon.

On a GB10 vLLM's gpu_memory_utilization is a fraction of the whole machine's memory, and the runtime
(Python, CUDA context, NCCL, the API server) takes more beside it. The claim is taken when the weights
start to load and held on an open connection, so it ends when this process does, however it ends. Where
no daemon answers (the stand-in run outside a simulated node, as its own tests do) nothing is claimed.
"""
from __future__ import annotations

import json
import socket

from .base import SimError, env_float

SOCKET = "\0spark-sim-memory"
GIB_KB = 1 << 20
# What the runtime holds beyond gpu_memory_utilization x MemTotal. Field note 8: at 0.78 a Spark had about
# 2 GiB left of its ~116 idle, i.e. 116 - 0.78 x 119.7 - 2 = ~20 GiB beside vLLM's own share.
RUNTIME_OVERHEAD_GIB = 20.0


def _connect() -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(10.0)
        sock.connect(SOCKET)
    except OSError:
        sock.close()
        return None
    return sock


def _ask(sock: socket.socket, reader, doc: dict) -> dict:
    sock.sendall((json.dumps(doc) + "\n").encode())
    line = reader.readline()
    if not line:
        raise SimError("RuntimeError: the node's memory daemon closed the connection")
    return json.loads(line)


class Held:
    """The open connection that holds the share, and whether it went past memory and swap (then the
    process thrashes: it makes no progress until the OOM killer or earlyoom ends it)."""

    def __init__(self, sock: socket.socket, thrashing: bool, total_kb: int = 0):
        self.sock, self.thrashing, self.total_kb = sock, thrashing, total_kb


def claim(utilization: float, env, what: str) -> "Held | None":
    """Check vLLM's start-up condition (free memory >= utilization x total) and take the share; returns
    what holds it (keep it), None outside a simulated node. Raises vLLM's own ValueError when the share
    does not fit in what is free now."""
    sock = _connect()
    if sock is None:
        return None
    reader = sock.makefile("r")
    total_kb = _ask(sock, reader, {"op": "show"})["MemTotal"]
    need = int(utilization * total_kb)
    overhead = int(env_float(env, "SIM_RUNTIME_OVERHEAD_GIB", RUNTIME_OVERHEAD_GIB) * GIB_KB)
    # Before the claim: once it is granted the node is short of memory, and an earlyoom that polled in between
    # would pick the node's largest real process (its dockerd) instead of this one.
    _prefer_me_for_oom()
    reply = _ask(sock, reader, {"op": "claim", "kb": need + overhead, "need_free_kb": need, "what": what})
    if not reply.get("ok"):
        sock.close()
        free = reply.get("MemAvailable", 0)
        raise SimError(f"ValueError: Free memory on device cuda:0 ({free / GIB_KB:.2f}/{total_kb / GIB_KB:.2f} GiB) "
                       f"on startup is less than desired GPU memory utilization ({utilization}, "
                       f"{need / GIB_KB:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used "
                       "by other processes.")
    sock.settimeout(None)
    return Held(sock, reply.get("over_kb", 0) > 0, total_kb)


def _prefer_me_for_oom() -> None:
    """The process holding the memory is what earlyoom and the kernel pick (real vLLM's RSS makes it so;
    the stand-in's own RSS is small, so it says so)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
