"""The running batch: every decoding request advances in one shared verification step at a time.

A scheduler thread (vLLM's engine core loop) runs steps back to back while any request is decoding;
a step of n requests lasts Truth.step_seconds(n) / the slowest member's profile speed x the sitting's pace x its own jitter (speed.py),
scheduled against absolute deadlines so the rate does not drift with thread wake-up latency; a request
joining mid-step waits for the next step, as in vLLM.
Each request gets its own group of 1 + accepted tokens per step; the HTTP thread serving it picks the
groups up in order (one SSE chunk per step).
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque

from .base import Life, Stopped
from .metrics import Metrics
from .speed import Truth

MAX_CATCH_UP = 0.25  # seconds


class Member:
    """One decoding request in the batch: its remaining tokens and the groups not yet picked up."""

    def __init__(self, req: dict, tokens: list[str], pos: int):
        self.req, self.tokens, self.pos = req, tokens, pos
        self.groups: deque[list[str]] = deque()
        self.stopped = False

    @property
    def left(self) -> int:
        return len(self.tokens) - self.pos


class Batch:
    def __init__(self, truth: Truth, metrics: Metrics, life: Life, stalled: threading.Event, fast: float = 1.0):
        self.fast = fast  # SIM_FAULT_FIRST_RUN_FAST: a step with a member marked "fast" runs this many times faster
        self.truth, self.metrics, self.life, self.stalled = truth, metrics, life, stalled
        self.cond = threading.Condition()
        self.members: list[Member] = []
        self.thread: threading.Thread | None = None
        self.rng = random.Random(truth.seed * 7919 + 17)  # the engine's timing noise, seeded
        self.pace = 1.0

    def join(self, member: Member) -> None:
        with self.cond:
            if member.left > 0:
                self.members.append(member)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="engine-core", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def leave(self, member: Member) -> None:
        with self.cond:
            if member in self.members:
                self.members.remove(member)

    def done(self, member: Member) -> bool:
        """No step left to run and every group picked up: the group in hand is the last."""
        with self.cond:
            return member.left <= 0 and not member.groups

    def next_group(self, member: Member) -> list[str]:
        """The member's next step's tokens, once that step has run (Stopped when the process ends)."""
        with self.cond:
            while not member.groups:
                if member.stopped or self.life.stop.is_set():
                    raise Stopped()
                self.cond.wait(0.5)
            return member.groups.popleft()

    def _run(self) -> None:
        try:
            self._loop()
        except Stopped:
            pass
        finally:
            with self.cond:
                for m in self.members:
                    m.stopped = True
                self.cond.notify_all()

    def _loop(self) -> None:
        deadline: float | None = None
        while True:
            with self.cond:
                while not self.members:
                    deadline = None  # idle: the next step starts when someone joins, in a new sitting
                    if self.life.stop.is_set():
                        raise Stopped()
                    self.cond.wait(0.5)
                batch = list(self.members)
            if self.stalled.is_set():  # a peer died / scheduler stuck: no step ever ends
                self.life.stop.wait()
                raise Stopped()
            now = time.monotonic()
            if deadline is None:
                self.pace = self.truth.pace(self.rng)
            # behind by a little (thread wake-up): catch up so the rate stays exact; by a lot (the
            # process was paused): carry on from now, as an engine would, instead of a burst of steps
            start = now if deadline is None or now - deadline > MAX_CATCH_UP else deadline
            fast = self.fast if any(m.req.get("fast") for m in batch) else 1.0
            step = self.truth.step_seconds(len(batch)) / (self.truth.speed(m.req["profile"] for m in batch) * fast)
            deadline = start + step * self.pace * self.truth.jitter(self.rng)
            self.life.sleep(deadline - time.monotonic())
            self._step(batch)

    def _step(self, batch: list[Member]) -> None:
        k = self.truth.spec_k
        results = []
        for m in batch:
            accepted = self.truth.draw(m.req["profile"], m.req["level"], m.req["rng"], k) if k else None
            n = min(1 + (accepted or 0), m.left)
            results.append((m, n, (n - 1) if k else None))
        self.metrics.batch_step([(n, acc) for _, n, acc in results])
        with self.cond:
            for m, n, _ in results:
                m.groups.append(m.tokens[m.pos:m.pos + n])
                m.pos += n
                if m.left <= 0 and m in self.members:
                    self.members.remove(m)
            self.cond.notify_all()
