#!/usr/bin/env python3
"""`up`'s overhead, two checkouts A/B alternating on ONE simulated cluster, in one run (issue 19, acc 5).

    .venv/bin/python benchmarks/bench_up_ab.py --a /path/to/checkout-A [--b .] [--runs 7] [--mode fresh]

Each side is a checkout with its own .venv; each timed run is a new process of that side's interpreter
calling its `up(load_deployment(recipe, inventory), Events(), UpOptions())`. Overhead = the call's wall
time minus the stand-in's SIM_LOAD_SECONDS (what bench_up.py and issue 19 measure); the process's wall
time (interpreter start-up and imports too, as the CLI pays them) is printed beside it. The order
alternates A B, B A, A B ... (one warm-up pair first, not counted), so drift in the machine's load hits
both sides alike.

Both sides do the same work on the same cluster state:
  --mode fresh  (default) `down` before every run, not timed: each `up` deploys onto empty nodes with the
                same history (the records accumulate equally for both sides).
  --mode force  `up --force` every time: each run replaces the release the other side just deployed
                (stop previous, kept, ports and memory re-checked); `prune --keep 1` between runs, not
                timed, keeps the kept containers from piling up.
The housekeeping between runs is always B's CLI. Printed: each side's overhead median, min, max, the
ratio B/A of the medians and the median of the pairwise ratios, and each side's per-phase medians.
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

from benchsim import load_seconds, median, spread  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def venv(checkout: Path, tool: str) -> str:
    path = checkout / ".venv" / "bin" / tool
    if not path.exists():
        raise SystemExit(f"{checkout}: no .venv/bin/{tool} (run `bash scripts/setup` there first)")
    return str(path)


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "describe", "--always", "--dirty", "--exclude", "*"],
                          capture_output=True, text=True, check=False).stdout.strip() or "?"


# Run by each side's own interpreter, so `orchestrator` is that checkout's: times up() as bench_up.py does.
_RUNNER = r"""
import json, sys, time
t_process = time.monotonic()
from orchestrator.config.load import load_deployment
from orchestrator.deploy.up import UpOptions, up
from orchestrator.runner.events import Events
dep = load_deployment(sys.argv[1], sys.argv[2])
events = Events()
t0 = time.monotonic()
result = up(dep, events, UpOptions(force=sys.argv[3] == "force"))
wall = time.monotonic() - t0
phases = {}
for record in events.phases:
    phases[str(record.phase)] = phases.get(str(record.phase), 0.0) + record.seconds
import orchestrator
print(json.dumps({"up": wall, "in_process": time.monotonic() - t_process, "phases": phases,
                  "already_serving": result.already_serving, "code": orchestrator.__file__}))
"""


def timed_up(python: str, recipe: Path, inventory: Path, force: bool) -> tuple[float, float, dict[str, float]]:
    """One `up()` in a new process of that side's interpreter: the call's wall time (what bench_up.py and
    issue 19 measure), the whole process's (imports and interpreter start-up too), and its phases."""
    argv = [python, "-c", _RUNNER, str(recipe), str(inventory), "force" if force else "fresh"]
    checkout = Path(python).parents[2]  # CHECKOUT/.venv/bin/python
    t0 = time.monotonic()
    # cwd: `python -c` puts the working directory first on sys.path; started from B's checkout, A's
    # interpreter imported B's `orchestrator` (the check below refuses that now)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600, cwd=checkout)
    process = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{python} up exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not Path(result["code"]).is_relative_to(checkout):
        raise RuntimeError(f"{python} ran the code at {result['code']}, not {checkout}'s")
    if result["already_serving"]:
        raise RuntimeError(f"{python}: up found the plan already serving: no deployment was timed")
    return result["up"], process, result["phases"]


def housekeeping(exe: str, recipe: Path, inventory: Path, mode: str) -> None:
    argv = [exe, "down", str(recipe), "-i", str(inventory)] if mode == "fresh" else \
        [exe, "prune", "--keep", "1", "-i", str(inventory)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stdout[-1000:]} {proc.stderr[-1000:]}")


def instant_engine(recipe: Path) -> Path:
    """A copy of the recipe whose stand-in generates at ~infinite rates: the time it spends making tokens is
    the engine's, not the tool's, exactly as SIM_LOAD_SECONDS is; the same copy serves both sides."""
    import yaml

    data = yaml.safe_load(recipe.read_text())
    data.setdefault("env", {}).update({"SIM_DECODE_TPS": "1000000", "SIM_PREFILL_TPS": "100000000",
                                       "SIM_TTFT": "0"})
    out = recipe.with_name(recipe.stem + "-instant" + recipe.suffix)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


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
    ap.add_argument("--engine", choices=("recipe", "instant"), default="recipe",
                    help="recipe: the stand-in generates at the recipe's rates (SIM_DECODE_TPS 40: B's acceptance "
                         "checks then wait ~1 s on tokens); instant: its generation rates made ~infinite for both "
                         "sides, so the engine's token time drops out as its load time does")
    ap.add_argument("--json", type=Path, help="also write every raw figure here")
    args = ap.parse_args()
    paths = {"A": args.a.resolve(), "B": args.b.resolve()}
    python = {side: venv(path, "python") for side, path in paths.items()}
    housekeeper = venv(paths["B"], "spark-deploy")
    os.environ.setdefault("SPARK_DEPLOY_SIM_HOME", tempfile.mkdtemp(prefix="bench-ab-"))
    sim = SimCluster(f"ab{os.getpid() % 100000}")
    ups: dict[str, list[float]] = {"A": [], "B": []}
    procs: dict[str, list[float]] = {"A": [], "B": []}
    phases: dict[str, list[dict]] = {"A": [], "B": []}
    load_start = os.getloadavg()[0]
    try:
        log(f"sim cluster {sim.name}: 2 nodes, the image on both (no image sync is timed)")
        sim.up(nodes=2, load_image_on=(1, 2))
        recipe, inventory = sim.recipe_path, sim.inventory_path
        if args.engine == "instant":
            recipe = instant_engine(recipe)
        load = load_seconds(load_deployment(recipe, inventory))
        force = args.mode == "force"
        if force:  # something must serve for the first run to replace
            timed_up(python["B"], recipe, inventory, force=True)
        for i in range(args.runs + 1):
            for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                if not force:
                    housekeeping(housekeeper, recipe, inventory, "fresh")
                wall, process, ph = timed_up(python[side], recipe, inventory, force)
                if force:
                    housekeeping(housekeeper, recipe, inventory, "force")
                if i > 0:
                    ups[side].append(wall - load)
                    procs[side].append(process - load)
                    phases[side].append(ph)
                log(f"round {i}{' (warm-up)' if i == 0 else ''}: {side} overhead {wall - load:.3f} s "
                    f"(process {process - load:.3f} s)")
        housekeeping(housekeeper, recipe, inventory, "fresh")
    finally:
        sim.down()
    print(f"\nup overhead A/B, mode {args.mode}, engine {args.engine}, SIM_LOAD_SECONDS={load:g}, n={args.runs} per side, "
          f"load average {load_start:.2f} -> {os.getloadavg()[0]:.2f}")
    for side, path in paths.items():
        print(f"  {side} {commit_of(path):<14} up() {spread(ups[side])}")
        print(f"    {'':<14} process {spread(procs[side])}")
        print("     phases (median s): " + ", ".join(f"{k} {v:.3f}" for k, v in phase_medians(phases[side]).items()))
    for label, figures in (("up()", ups), ("process", procs)):
        pairs = [b / a for a, b in zip(figures["A"], figures["B"])]
        print(f"  B/A {label}: {median(figures['B']) / median(figures['A']):.3f} (medians); pairwise median "
              f"{statistics.median(pairs):.3f}, min {min(pairs):.3f}, max {max(pairs):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"up": ups, "process": procs, "phases": phases, "mode": args.mode,
                                         "load": load, "commits": {s: commit_of(p) for s, p in paths.items()}},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
