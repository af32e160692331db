#!/usr/bin/env python3
"""The tool's own time in a 4-variant `tune`, as a fraction of 4 x (the stand-in's load + the shots), in one run.

    .venv/bin/python benchmarks/bench_tune.py [--shots 6] [--max-tokens 400] [--load 2] [--json FILE]

Brings up its own 2-node simulated cluster (real sshd and dockerd per node, the vLLM stand-in), deploys
the sim recipe once (what serves before the tune), then runs `tune` itself (bench/tune.tune, as the CLI
calls it) over `num_speculative_tokens=1,3` on the sim recipe (k = 5): with the original and the
no-speculation baseline, four variants, one round (one block each), profiles code and chat, --shots kept
per profile and block and `tune`'s warm-ups; --shots and --max-tokens default to `tune`'s own defaults. The
original serves before the tune, as a recipe being tuned usually does. The cluster is removed at the end, on an error
or Ctrl-C too.

What is not the tool's: each start's load (SIM_LOAD_SECONDS, the stand-in's configured weight loading) and
every shot's request, warm-up included (send to last token: TTFT + the decode, as the client saw it).
Everything else is the tool's own time: the operation (connect, lock, state), the lint, each `up` (preflight,
containers, readiness, its acceptance checks), the metrics scrapes around each shot, the final settle
(a rollback to the winner when it is not the last block's) and the record. Printed: the wall time, the
parts, the ratio tool / (4 x (load + shots)) against the target 0.10, and the tool's time per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from benchsim import phase_seconds, recipe_variant  # noqa: E402
from orchestrator.bench import prompts as prompt_sets  # noqa: E402
from orchestrator.bench import runner, tune_plan  # noqa: E402
from orchestrator.bench import tune as tune_mod  # noqa: E402
from orchestrator.bench.shot import ShotOptions  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.deploy.up import UpOptions, up  # noqa: E402
from orchestrator.runner.events import Events  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402

KEY = "vllm.speculative_config.num_speculative_tokens"
TARGET = 0.10


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def shot_seconds(shot) -> float:
    """One shot's requests as the client timed them: send to first token, then first to last chunk."""
    total = 0.0
    for r in shot.requests:
        if r.ttft_s is not None:
            total += r.ttft_s
        if r.t_first_ns and r.t_last_ns:
            total += (r.t_last_ns - r.t_first_ns) / 1e9
    return total


SPANS = ("_lint", "_side", "run", "_tables", "_stop_early", "_settle", "_write")


def timed(spans: dict[str, float]) -> None:
    """Wrap tune's own parts (module attributes of bench/tune.py) and its Operation's open and close so
    their seconds add up in `spans`: where the tool's time goes."""
    def wrap(name, fn):
        def inner(*a, **kw):
            t0 = time.monotonic()
            try:
                return fn(*a, **kw)
            finally:
                spans[name] = spans.get(name, 0.0) + time.monotonic() - t0
        return inner
    for name in SPANS:
        setattr(tune_mod, name, wrap(name, getattr(tune_mod, name)))
    op = tune_mod.Operation
    op.__enter__, op.__exit__ = wrap("operation open", op.__enter__), wrap("operation close", op.__exit__)


def _merged(phases: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in phases.items():
        out[k.split(" (")[0]] = out.get(k.split(" (")[0], 0.0) + v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shots", type=int, default=6, help="kept shots per profile and block (default 6, tune's)")
    ap.add_argument("--max-tokens", type=int, default=400, help="a shot's output length (default 400, tune's)")
    ap.add_argument("--load", type=float, default=2.0, help="SIM_LOAD_SECONDS of every start (default 2)")
    ap.add_argument("--json", type=Path, help="also write every raw figure here")
    args = ap.parse_args()
    os.environ.setdefault("SPARK_DEPLOY_SIM_HOME", tempfile.mkdtemp(prefix="bench-tune-"))
    sim = SimCluster(f"tn{os.getpid() % 100000}")
    load_start = os.getloadavg()[0]
    shots: list[tuple[str, bool, float]] = []
    try:
        log(f"sim cluster {sim.name}: 2 nodes, the image on both")
        sim.up(nodes=2, load_image_on=(1, 2))
        recipe = recipe_variant(sim.recipe_path, Path(sim.recipe_path).with_name("bench-tune.yaml"),
                                env={"SIM_LOAD_SECONDS": f"{args.load:g}"})
        dep = load_deployment(recipe, sim.inventory_path)
        up(dep, Events(), UpOptions())  # what serves before the tune
        log("the sim recipe serves; tune starts")
        variants = tune_plan.expand(dep.text(), [tune_plan.parse_set(f"{KEY}=1,3")])
        order = tune_plan.order(len(variants), 1, last=next(i for i, v in enumerate(variants) if v.original))
        sets = prompt_sets.select(["code", "chat"], None)

        def plan_of(tgt):
            return runner.Plan(prompts=sets, shots=args.shots, warmup=1, concurrency=(1,), until_stable=None,
                               max_shots=args.shots, draft_budget=tgt.draft_budget,
                               shot=ShotOptions(max_tokens=args.max_tokens))

        events = Events()
        spans: dict[str, float] = {}
        timed(spans)
        t0 = time.monotonic()
        result = tune_mod.tune(dep, variants, order, plan_of, events,
                               on_shot=lambda g, s: shots.append((g.profile, s.warmup, shot_seconds(s))))
        wall = time.monotonic() - t0
    finally:
        sim.down()
    n = len(variants)
    rolled = "rolled back" in result.serving
    starts = sum(1 for r in events.phases if str(r.phase) == "ready")  # an `up` of what serves starts nothing
    loads = args.load * starts
    shot_total = sum(s for _, _, s in shots)
    tool = wall - loads - shot_total
    base = loads + shot_total
    phases = phase_seconds(events)
    print(f"\n{n}-variant tune on the stand-in ({', '.join(result.labels)}), 1 round, profiles code, chat, "
          f"{args.shots} shots per profile and block (warm-ups: 1, the first block 1 + {args.shots}), "
          f"max_tokens {args.max_tokens}, "
          f"SIM_LOAD_SECONDS {args.load:g}; load average {load_start:.2f} -> {os.getloadavg()[0]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print(f"  wall time of tune()             {wall:8.3f} s")
    print(f"  stand-in's load                 {loads:8.3f} s ({starts} starts x {args.load:g} s"
          f"{', the settle rollback one of them' if rolled else ''})")
    print(f"  shots ({len(shots)}, warm-ups included)   {shot_total:8.3f} s")
    print(f"  the tool's own time             {tool:8.3f} s")
    print(f"  the stand-in's time: load + shots {base:8.3f} s")
    print(f"  tool / (load + shots)           {tool / base:8.3f}  (target <= {TARGET:.2f}: "
          f"{'PASS' if tool / base <= TARGET else 'FAIL'}); against {n} x load + shots "
          f"({n * args.load + shot_total:.1f} s): {tool / (n * args.load + shot_total):.3f}")
    block_loads = args.load * (starts - (1 if rolled else 0))
    parts = {"operation open (connect, lock, state)": spans.get("operation open", 0.0),
             "lint (speculative-tokens on every variant)": spans.get("_lint", 0.0),
             "making each variant serve (up), minus its load": spans.get("_side", 0.0) - block_loads,
             "around the shots (scrapes, client)": spans.get("run", 0.0) - shot_total,
             "table and stop rule": spans.get("_tables", 0.0) + spans.get("_stop_early", 0.0),
             "settle (winner serves), minus its load": spans.get("_settle", 0.0) - (loads - block_loads),
             "record into the release": spans.get("_write", 0.0),
             "operation close (audit, unlock)": spans.get("operation close", 0.0)}
    parts["the rest"] = tool - sum(parts.values())
    print("  the tool's time by part (s): " + "; ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    print("  phases of every up and rollback (s, load inside `ready`): "
          + ", ".join(f"{k.split(' (')[0]} {v:.3f}" for k, v in _merged(phases).items()))
    print(f"  serving at the end: {result.serving}")
    if args.json:
        args.json.write_text(json.dumps({"wall": wall, "loads": loads, "shots": shots, "tool": tool, "base": base,
                                         "phases": phases, "parts": parts, "labels": result.labels}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
