#!/usr/bin/env python3
"""`up`'s overhead, two checkouts A/B alternating on ONE simulated cluster, in one run (issue 19, acc 5).

    .venv/bin/python benchmarks/bench_up_ab.py --a /path/to/checkout-A [--b .] [--runs 7] [--mode fresh]

Each side is a checkout with its own .venv; each timed run is that checkout's CLI as a user runs it,
`spark-deploy up RECIPE -i INVENTORY --json` (a new process: imports, connect, ... ready, log checks).
Overhead = that process's wall time minus the stand-in's SIM_LOAD_SECONDS. The order alternates
A B, B A, A B ... (one warm-up pair first, not counted), so drift in the machine's load hits both sides.

Both sides do the same work on the same cluster state:
  --mode fresh  (default) `down` before every run, not timed: each `up` deploys onto empty nodes with the
                same history (the records accumulate equally for both sides).
  --mode force  `up --force` every time: each run replaces the release the other side just deployed
                (stop previous, kept, ports and memory re-checked); `prune --keep 1` between runs, not
                timed, keeps the kept containers from piling up.
The housekeeping between runs is always B's CLI. Printed: each side's overhead median, min, max, the
ratio B/A of the medians and the median of the pairwise ratios, and B's (and A's) per-phase medians from
the `result` event of `up --json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from benchsim import load_seconds, median  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cli(checkout: Path) -> str:
    path = checkout / ".venv" / "bin" / "spark-deploy"
    if not path.exists():
        raise SystemExit(f"{checkout}: no .venv/bin/spark-deploy (run `bash scripts/setup` there first)")
    return str(path)


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "describe", "--always", "--dirty", "--exclude", "*"],
                          capture_output=True, text=True, check=False).stdout.strip() or "?"


def timed_up(exe: str, recipe: Path, inventory: Path, force: bool) -> tuple[float, dict[str, float]]:
    """One `up` as a process; its wall time and the phases its `result` event reports."""
    argv = [exe, "up", str(recipe), "-i", str(inventory), "--json"] + (["--force"] if force else [])
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result = next((json.loads(line) for line in reversed(proc.stdout.splitlines())
                   if line.startswith("{") and '"event": "result"' in line), None)
    if result is None or result.get("already_serving"):
        raise RuntimeError(f"{exe}: no fresh deployment ({'already serving' if result else 'no result event'})")
    return wall, result.get("phases", {})


def housekeeping(exe: str, recipe: Path, inventory: Path, mode: str) -> None:
    argv = [exe, "down", str(recipe), "-i", str(inventory)] if mode == "fresh" else \
        [exe, "prune", "--keep", "1", "-i", str(inventory)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stdout[-1000:]} {proc.stderr[-1000:]}")


def phase_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    names: list[str] = []
    for run in runs:
        names += [n for n in run if n not in names]
    return {n: median([r[n] for r in runs if n in r]) for n in names}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", type=Path, required=True, help="checkout A (the reference), with its own .venv")
    ap.add_argument("--b", type=Path, default=HERE.parent, help="checkout B (default: this one)")
    ap.add_argument("--runs", type=int, default=7, help="counted runs per side (default 7)")
    ap.add_argument("--mode", choices=("fresh", "force"), default="fresh")
    ap.add_argument("--json", type=Path, help="also write every raw figure here")
    args = ap.parse_args()
    sides = {"A": (args.a.resolve(), cli(args.a.resolve())), "B": (args.b.resolve(), cli(args.b.resolve()))}
    os.environ.setdefault("SPARK_DEPLOY_SIM_HOME", tempfile.mkdtemp(prefix="bench-ab-"))
    sim = SimCluster(f"ab{os.getpid() % 100000}")
    walls: dict[str, list[float]] = {"A": [], "B": []}
    phases: dict[str, list[dict]] = {"A": [], "B": []}
    load_start = os.getloadavg()[0]
    try:
        log(f"sim cluster {sim.name}: 2 nodes, the image on both (no image sync is timed)")
        sim.up(nodes=2, load_image_on=(1, 2))
        recipe, inventory = sim.recipe_path, sim.inventory_path
        load = load_seconds(load_deployment(recipe, inventory))
        housekeeper = sides["B"][1]
        force = args.mode == "force"
        if force:  # something must serve for the first run to replace
            timed_up(housekeeper, recipe, inventory, force=True)
        for i in range(args.runs + 1):
            for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                if not force:
                    housekeeping(housekeeper, recipe, inventory, "fresh")
                wall, ph = timed_up(sides[side][1], recipe, inventory, force)
                if force:
                    housekeeping(housekeeper, recipe, inventory, "force")
                if i > 0:
                    walls[side].append(wall - load)
                    phases[side].append(ph)
                log(f"round {i}{' (warm-up)' if i == 0 else ''}: {side} overhead {wall - load:.3f} s")
        housekeeping(housekeeper, recipe, inventory, "fresh")
    finally:
        sim.down()
    pairs = [b / a for a, b in zip(walls["A"], walls["B"])]
    print(f"\nup overhead A/B, {args.mode}, SIM_LOAD_SECONDS={load:g}, n={args.runs} per side, "
          f"load average {load_start:.2f} -> {os.getloadavg()[0]:.2f}")
    for side, (path, _exe) in sides.items():
        w = walls[side]
        print(f"  {side} {commit_of(path):<14} median {median(w):.3f} s  min {min(w):.3f}  max {max(w):.3f}")
        print("     phases (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in phase_medians(phases[side]).items()))
    print(f"  B/A = {median(walls['B']) / median(walls['A']):.3f} (medians); pairwise median "
          f"{statistics.median(pairs):.3f}, min {min(pairs):.3f}, max {max(pairs):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "phases": phases, "mode": args.mode, "load": load,
                                         "commits": {s: commit_of(p) for s, (p, _) in sides.items()}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
