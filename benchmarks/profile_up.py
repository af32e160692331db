#!/usr/bin/env python3
"""Where one `up` spends its time: per phase, and every SSH round trip inside it (issue 19).

    .venv/bin/python benchmarks/profile_up.py RECIPE -i INVENTORY [--runs 3]

Runs `up()` in this process on an existing (e.g. simulated) cluster, `down` before each run (not timed),
with NodeConnection.run and its SFTP writes wrapped to record each round trip: node, phase, what ran
(the first words of the command; a script by its first line), start and duration. Printed per phase of
the last run: its seconds, its round trips per node, and the round trips themselves, longest first.
Read-only instrumentation: the commands and their order are up's own.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchsim import load_seconds, phase_seconds, remove_deployment  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.deploy.up import UpOptions, up  # noqa: E402
from orchestrator.runner.events import Events  # noqa: E402
from orchestrator.transport import node as node_mod  # noqa: E402

TRIPS: list[dict] = []
CURRENT: dict[str, object] = {"events": None}


def _what(argv) -> str:
    argv = list(argv)
    if argv[:2] == ["bash", "-c"] and len(argv) > 2:
        first = next((l.strip() for l in argv[2].splitlines() if l.strip() and not l.strip().startswith("#")), "")
        return "script: " + first[:60]
    return " ".join(argv[:4])[:70]


def _phase() -> str:
    """The open phase, or where up is when none is open (its outcome record, audit line and close)."""
    ev = CURRENT["events"]
    if ev is None:
        return "?"
    return str(ev.current) if getattr(ev, "_open", None) else f"after {ev.current} (finish, close)"


def instrument() -> None:
    orig_run = node_mod.NodeConnection.run
    orig_put = node_mod.NodeConnection.put_file

    def run(self, argv, **kw):
        t0 = time.monotonic()
        try:
            return orig_run(self, argv, **kw)
        finally:
            if CURRENT["events"] is not None:
                TRIPS.append({"node": self.name, "phase": _phase(), "what": _what(argv),
                              "start": t0, "seconds": time.monotonic() - t0})

    def put_file(self, path, content, mode=0o644):
        t0 = time.monotonic()
        try:
            return orig_put(self, path, content, mode)
        finally:
            if CURRENT["events"] is not None:
                TRIPS.append({"node": self.name, "phase": _phase(), "what": f"put_file (mkdir, sftp, sync+mv) {path}",
                              "start": t0, "seconds": time.monotonic() - t0})

    node_mod.NodeConnection.run = run
    node_mod.NodeConnection.put_file = put_file


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    instrument()
    dep = load_deployment(args.recipe, args.inventory)
    load = load_seconds(dep)
    for i in range(args.runs):
        remove_deployment(dep)
        TRIPS.clear()
        events = Events()
        CURRENT["events"] = events
        t0 = time.monotonic()
        up(dep, events, UpOptions())
        wall = time.monotonic() - t0
        CURRENT["events"] = None
        phases = phase_seconds(events)
        print(f"run {i}: wall {wall:.3f} s, overhead {wall - load:.3f} s, outside phases "
              f"{wall - sum(phases.values()):.3f} s, {len(TRIPS)} round trips; "
              + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    remove_deployment(dep)
    by_phase: dict[str, list[dict]] = defaultdict(list)
    for t in TRIPS:
        by_phase[t["phase"]].append(t)
    for phase, trips in by_phase.items():
        per_node: dict[str, int] = defaultdict(int)
        for t in trips:
            per_node[t["node"]] += 1
        print(f"\n{phase}: {len(trips)} round trips ({', '.join(f'{n} {c}' for n, c in sorted(per_node.items()))})")
        for t in sorted(trips, key=lambda t: -t["seconds"])[:25]:
            print(f"   {t['seconds']:.3f} s  {t['node']:<8} {t['what']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
