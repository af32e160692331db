"""Record a bench run with the release it measured (Release.bench), under the deploy lock.

The record keeps the headline and the per-group figures, not every shot (those go to --report's JSON):
release records are copied to every node and read by every `history`.
"""

from __future__ import annotations

import time

from ..config.inventory import Inventory
from ..releases import store
from ..operation import AuditAction, Operation, OperationRefused, Outcome
from ..releases.lock import LockError
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.group import GroupError
from ..transport.node import NodeError
from .report import BenchResult


class NotRecorded(Exception):
    """The run could not be written to its release (lock held, release gone, node error)."""


def summary(result: BenchResult, replicates: dict | None = None) -> dict:
    """What the release keeps: the headline, each group's figures without shots, the ceiling's verdict, and
    with `bench --replicates` the capacity figure per profile (bench/replicates.py)."""
    groups = []
    for g in result.groups:
        d = g.as_dict()
        d.pop("shots", None)
        groups.append(d)
    ceiling = result.ceiling_dict()
    if ceiling and "error" not in ceiling:
        ceiling = {k: ceiling[k] for k in ("bytes_per_token", "ceiling_tps", "of_ceiling", "nodes", "bandwidth",
                                           "bytes_read", "hypotheses")}
    out = {"at": result.finished_at or time.time(), "headline": result.headline(), "groups": groups,
           "ceiling": ceiling, "plan": result.as_dict()["plan"], "target": result.target,
           "interrupted": result.interrupted}
    if replicates is not None:
        out["replicates"] = replicates
    return out


def headline_text(bench: dict | None) -> str:
    """One line for `history`: decode tok/s per profile at c=1 (a `?` marks a provisional figure), and
    after `bench --replicates` the capacity figure (`cap 35.0 (3 of 4 runs)`: 1 replicate left out); a run
    stopped by Ctrl-C/SIGTERM ends in `(interrupted)` (its figures are of the shots it took)."""
    if not bench or not bench.get("headline"):
        return "-"
    parts = []
    caps = (bench.get("replicates") or {}).get("profiles", {})
    n = (bench.get("replicates") or {}).get("n")
    for profile, h in bench["headline"].items():
        mark = "?" if h.get("provisional") else ""
        steps = f" x{h['tokens_per_step']:.2f}" if h.get("tokens_per_step") else ""
        cap = caps.get(profile)
        if cap is not None:
            out = len(cap.get("left_out") or [])
            figure = f"{cap['capacity']:.1f}" if cap.get("capacity") is not None else "?"
            steps += f" cap {figure} ({n - out} of {n} runs)"
        parts.append(f"{profile} {h['decode_tps']:.1f}{mark}{steps}")
    return ", ".join(parts) + (" (interrupted)" if bench.get("interrupted") else "")


def record(result: BenchResult, inventory: Inventory, release_id: int, console, replicates: dict | None = None) -> None:
    """The results written into the release's record on every node, under the deploy lock (inside an
    enclosing operation, e.g. `bench --replicates`, a part of it)."""
    try:
        with Operation(inventory, Events(TerminalSink(console)), AuditAction.BENCH_RECORD, ttl=120) as op:
            release = op.state.history.get(release_id)
            if release is None:
                raise NotRecorded(f"release {release_id} is no longer in the history")
            store.write_release(op.cluster, inventory, release.touch(bench=summary(result, replicates)))
            op.done(Outcome.OK, f"bench results recorded with release {release_id}", release=release_id)
    except LockError as exc:
        raise NotRecorded(f"the deploy lock is held ({exc}): results not recorded with release {release_id}") from None
    except (NodeError, GroupError, OperationRefused) as exc:
        raise NotRecorded(f"results not recorded with release {release_id}: {exc}") from None
