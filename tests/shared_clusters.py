"""Simulated clusters shared by many tests, with a reset that proves itself (issue 17).

A `SharedCluster` is made once per test session (per xdist worker) and lent to one test, or one module, at
a time. Around each loan it resets every node to the condition it had when it was made (sim/reset.py:
containers, images, release records, lock, audit, maintenance state, faults, stubs, services) and then
looks again. Residue (containers, images, releases) is cleared silently; a fault the test left is undone
and fails that test at its teardown, naming node, aspect and value; a fault found before a loan (it
appeared after the last check) fails the test about to run; what the reset cannot undo fails the test and
the cluster is made anew before the next loan, so one bad test does not poison the ones after it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker

from orchestrator.sim import reset as sim_reset
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.condition import Condition


class ResetFailed(AssertionError):
    """The reset found something it could not undo (or a leak that escaped the previous reset)."""


class SharedCluster:
    def __init__(self, client: docker.DockerClient | None, tag: str, *, nodes: int = 2,
                 load_image_on: tuple[int, ...] = (1, 2), init: str = "docker-init", cluster_class=SimCluster):
        self.client, self.tag, self.cluster_class = client, tag, cluster_class
        self.nodes, self.load_image_on, self.init = nodes, load_image_on, init
        self.cluster: SimCluster | None = None
        self.baseline: dict[str, Condition] = {}
        self.broken: str | None = None   # why the cluster must be made anew before the next loan
        self.last_user: str | None = None
        self.made = 0
        self.files: dict[Path, bytes] = {}
        self.images = sim_reset.ImageWant()  # how a node gets the stand-in image back (set when made)
        self._lock = threading.Lock()

    # ---- the cluster ---------------------------------------------------------------------------
    def _make(self) -> SimCluster:
        self.made += 1
        cluster = self.cluster_class(f"{self.tag}{os.getpid()}m{self.made}", client=self.client)
        try:
            cluster.up(self.nodes, self.load_image_on, init=self.init)
            self.baseline = sim_reset.save_baseline(cluster, cluster.nodes())
            self.files = _controller_files(cluster)
            images = (cluster.info() or {}).get("images") or {}
            self.images = sim_reset.image_loader(images.get("vllm"), images.get("vllm_tags") or [])
        except BaseException:
            cluster.down()
            raise
        self.cluster, self.broken = cluster, None
        return cluster

    def _restore_files(self) -> list[str]:
        """The controller's side (inventory, recipe, key, known_hosts) as made: a test edits copies."""
        now = _controller_files(self.cluster)
        changed = sorted(str(p) for p in set(now) | set(self.files) if now.get(p) != self.files.get(p))
        for path in set(now) - set(self.files):
            path.unlink()
        for path, data in self.files.items():
            if now.get(path) != data:
                path.write_bytes(data)
        return changed

    def down(self) -> None:
        if self.cluster is not None:
            self.cluster.down()
            self.cluster = None

    # ---- loans -----------------------------------------------------------------------------------
    @contextmanager
    def lend(self, user: str) -> Iterator[SimCluster]:
        """The cluster, clean, for `user` (a test or module id); reset and checked again afterwards."""
        with self._lock:
            cluster = self._before(user)
            try:
                yield cluster
            finally:
                self._after(user)

    def _before(self, user: str) -> SimCluster:
        if self.cluster is None or self.broken:
            if self.cluster is not None:
                self.cluster.down()
                self.cluster = None
            return self._make()
        outcome = sim_reset.reset(self.cluster, self.baseline, self.images)
        edited = self._restore_files()
        if edited:
            raise ResetFailed(f"shared cluster {self.cluster.name}: before {user}, controller files differ from "
                              f"how they were made (restored; left by {self.last_user}): {', '.join(edited)}")
        if outcome.left:
            self.broken = "left dirty before " + user
            raise ResetFailed(f"shared cluster {self.cluster.name}: before {user}, the reset could not undo "
                              f"(left by {self.last_user or 'nobody known'}):\n  " + outcome.describe(outcome.left)
                              + _errors(outcome))
        if outcome.faults:  # the last loan was checked clean: a fault found now escaped it (residue that
            # appeared since, such as an image a dying copy's last command removed, was just cleared)
            raise ResetFailed(f"shared cluster {self.cluster.name}: found before {user} (it escaped the reset "
                              f"after {self.last_user or 'the last loan'}; now undone):\n  "
                              + outcome.describe(outcome.faults))
        return self.cluster

    def _after(self, user: str) -> None:
        self.last_user = user
        if self.cluster is None:
            return
        outcome = sim_reset.reset(self.cluster, self.baseline, self.images)
        edited = self._restore_files()
        if outcome.left:
            self.broken = f"{user} left what the reset cannot undo"
            raise ResetFailed(f"shared cluster {self.cluster.name}: {user} left what the reset could not undo "
                              "(the cluster is made anew for the next test):\n  " + outcome.describe(outcome.left)
                              + "\n  it found:\n  " + outcome.describe(outcome.found)
                              + _errors(outcome))
        if edited:
            raise ResetFailed(f"shared cluster {self.cluster.name}: {user} changed the cluster's own files "
                              f"(restored; write a copy under tmp_path instead): {', '.join(edited)}")
        if outcome.faults:  # undone, but a test heals what it injects: name the leak where it happened
            raise ResetFailed(f"shared cluster {self.cluster.name}: {user} left faults behind (undone by the "
                              "reset; heal them in the test):\n  " + outcome.describe(outcome.faults))


def _controller_files(cluster: SimCluster) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(cluster.state_dir.iterdir()) if p.is_file()}


def _errors(outcome: sim_reset.Outcome) -> str:
    return ("\n  errors: " + "; ".join(outcome.errors)) if outcome.errors else ""
