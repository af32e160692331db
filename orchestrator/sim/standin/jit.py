"""The JIT cache claim that reproduces two ranks compiling DeepGEMM into one shared directory."""
from __future__ import annotations

import glob
import json
import os
import threading
import time

from .base import JIT_FRESH_SECONDS, Life


class JitLock:
    """Our claim on $VLLM_CACHE_ROOT/deep_gemm: reproduces two ranks JIT-compiling into one dir.

    Every rank writes rank-<r>.lock and touches it each second.  When the rank compiles, a fresh
    lock of another rank that claimed the dir EARLIER means it lost the race: like DeepGEMM on
    shared NFS, it reads a half-written runtime and asserts (field note 2; the winner stays up).
    """

    def __init__(self, root: str, rank: int, master: str, life: "Life"):
        self.dir = os.path.join(root, "deep_gemm")
        self.path = os.path.join(self.dir, f"rank-{rank}.lock")
        self.rank, self.life = rank, life
        self.created = time.time()
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path, "w") as fh:
            json.dump({"rank": rank, "pid": os.getpid(), "master": master, "created": self.created}, fh)
        threading.Thread(target=self._beat, name="jit-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while not self.life.stop.wait(1.0):
            try:
                os.utime(self.path)
            except OSError:
                return

    def lost_race(self) -> bool:
        now = time.time()
        for path in glob.glob(os.path.join(self.dir, "rank-*.lock")):
            if path == self.path:
                continue
            try:
                if now - os.path.getmtime(path) > JIT_FRESH_SECONDS:
                    continue  # stale: left by a killed process
                with open(path) as fh:
                    other = json.load(fh)
                if (other.get("created", 0), other.get("rank", 0)) < (self.created, self.rank):
                    return True
            except (OSError, ValueError):
                continue
        return False

    def release(self) -> None:
        try:
            with open(self.path) as fh:
                if json.load(fh).get("pid") == os.getpid():
                    os.remove(self.path)
        except (OSError, ValueError):
            pass


