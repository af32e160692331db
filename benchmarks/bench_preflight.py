#!/usr/bin/env python3
"""Preflight's facts gathered in one SSH command per node, all nodes in parallel, against the same facts
run as one SSH command each, one after another — on 2 and on 4 simulated nodes.

    .venv/bin/python benchmarks/bench_preflight.py              # 2 and 4 nodes, median of 10 (~3 min)
    .venv/bin/python benchmarks/bench_preflight.py --runs 5 --nodes 2

Brings up its own simulated clusters (unique names, removed in a finally block). Connections are opened
once and reused (warm: what `up` and `preflight` do); the vLLM --help cache is warm. Every run is checked,
not only timed: both ways must read the same fact values (clocks aside). Printed: medians and the ratio
sequential / gathered (higher is better).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from orchestrator import preflight  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.facts.core import FACTS, FactInput, gather, parse_framed  # noqa: E402
from orchestrator.render.plan import build_plan  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402
from orchestrator.transport.group import Cluster  # noqa: E402

VOLATILE = {"clock"}


def fact_names() -> list[str]:
    return sorted({f for s in preflight.select() for f in s.facts})


def sequential(cluster: Cluster, dep, plan, names: list[str]) -> dict:
    seen = {}
    for conn in cluster.nodes:
        given = FactInput(dep.inventory.node(conn.name), dep, plan)
        seen[conn.name] = {}
        for name in names:
            spec = FACTS[name]
            r = conn.run_script(spec.script, *map(str, spec.args(given)), timeout=90)
            framed = f"\x1eF {name} {r.exit_code}\n{r.stdout.rstrip(chr(10))}\n\x1eE\n{r.stderr}"
            seen[conn.name].update(parse_framed(framed, {name: spec}))
    return seen


def values(seen: dict) -> dict:
    return {n: {f: (o.value if o.ok else o.error) for f, o in facts.items() if f not in VOLATILE}
            for n, facts in seen.items()}


def measure(nodes: int, runs: int) -> tuple[float, float]:
    sim = SimCluster(f"bpf{os.getpid()}n{nodes}")
    try:
        sim.up(nodes)
        dep = load_deployment(sim.recipe_path, sim.inventory_path)
        plan = build_plan(dep)
        names = fact_names()
        with Cluster(dep.inventory) as cluster:
            gather(cluster, cluster.nodes, dep, plan, names)  # warm: caches, page cache
            fast, slow = [], []
            for _ in range(runs):
                t = time.perf_counter()
                together = gather(cluster, cluster.nodes, dep, plan, names)
                fast.append(time.perf_counter() - t)
                t = time.perf_counter()
                apart = sequential(cluster, dep, plan, names)
                slow.append(time.perf_counter() - t)
                if values(together.per_node) != values(apart):
                    raise SystemExit(f"the two ways read different facts:\n{values(together.per_node)}\n{values(apart)}")
        return statistics.median(fast), statistics.median(slow)
    finally:
        sim.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--nodes", type=int, action="append")
    args = parser.parse_args()
    print(f"facts: {', '.join(fact_names())}")
    for n in args.nodes or [2, 4]:
        fast, slow = measure(n, args.runs)
        print(f"{n} nodes: gathered (1 SSH command per node, parallel) median {fast * 1000:.0f} ms; "
              f"one command per fact, sequential median {slow * 1000:.0f} ms; ratio {slow / fast:.1f}x")


if __name__ == "__main__":
    main()
