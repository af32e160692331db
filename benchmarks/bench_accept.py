#!/usr/bin/env python3
"""The acceptance step of `up` against its slowest single check, and A/B against an older commit, in one run.

    .venv/bin/python benchmarks/bench_accept.py [--a-commit 3c20918] [--rounds 9] [--every-check]

One stand-in (orchestrator/sim/standin/local.py, the process the simulated cluster's image runs) serves the
simulated cluster's recipe (orchestrator/sim/recipes/sim-tiny.yaml: `tiny`, max_model_len 4096, 5 draft
tokens, SIM_DECODE_TPS 40, max-num-seqs 12) on 127.0.0.1, with prefix caching off: every `up` asks a fresh
engine, whose cache holds none of the checks' prompts, so no run here may find the needle's haystack cached
by the one before. Two workers, one per side, each a process of this venv's interpreter whose `orchestrator`
is that side's code (A: `git archive` of the commit, B: this checkout), run `deploy/steps_accept.Accept.run`,
the step itself, on a context holding the recipe, the endpoint and a silent Events. Each round times A's step
and B's (alternating which goes first) and then each check of the default set alone (B's run_checks with
`only=[name]`), all against the same idle engine. Printed: the medians, B's step over its slowest single
check (per round, then the median), and A/B. `--every-check`: a copy of the recipe with a tool parser and a
reasoning parser and all six built-in checks listed (tool-call's round trip, language, thinking too).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchsim import recipe_variant  # noqa: E402
from orchestrator.config.load import load_recipe  # noqa: E402
from orchestrator.sim.provision import DEFAULT_RECIPE  # noqa: E402
from orchestrator.sim.standin.local import LocalStandin  # noqa: E402

# Run by each side's worker (cwd: that side's code, first on sys.path): one line in, one JSON line out.
_WORKER = r"""
import json, sys, time
from types import SimpleNamespace
import orchestrator
from orchestrator.config.load import load_recipe
from orchestrator.deploy.steps_accept import Accept
from orchestrator.acceptance import run_checks
from orchestrator.acceptance.context import context_for
from orchestrator.acceptance.run import plan
from orchestrator.http_api.endpoint import Endpoint
from orchestrator.runner.events import Events
recipe = load_recipe(sys.argv[1])[0]
endpoint = Endpoint("127.0.0.1", int(sys.argv[2]))
names = [n for n, _ in plan(context_for(recipe, []))]
ctx = SimpleNamespace(history=None, release=None, dep=SimpleNamespace(recipe=recipe), endpoint=endpoint,
                      plan=SimpleNamespace(head=SimpleNamespace(node=SimpleNamespace(name="spark-1"))), events=Events())
print(json.dumps({"code": orchestrator.__file__, "names": names}), flush=True)
for line in sys.stdin:
    only = json.loads(line)
    t0 = time.monotonic()
    if only is None:
        Accept(names).run(ctx)
        results = ctx.acceptance
    else:
        results = run_checks(endpoint, context_for(recipe, []), only)
    seconds = time.monotonic() - t0
    print(json.dumps({"seconds": seconds, "results": [[r.name, str(r.status), r.seen] for r in results]}), flush=True)
"""


class Worker:
    def __init__(self, code: Path, recipe: Path, port: int):
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, str(recipe), str(port)], cwd=code, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        hello = json.loads(self.proc.stdout.readline())
        if not Path(hello["code"]).is_relative_to(code):
            raise RuntimeError(f"the worker for {code} imported {hello['code']}")
        self.names = hello["names"]

    def run(self, only: list[str] | None) -> tuple[float, list]:
        self.proc.stdin.write(json.dumps(only) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("a worker ended")
        got = json.loads(line)
        return got["seconds"], got["results"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(30)


def export(commit: str, into: Path) -> Path:
    """The commit's tree (no .git): A's code."""
    tar = subprocess.run(["git", "-C", str(HERE.parent), "archive", commit], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(into, filter="data")
    return into


def every_check(dest: Path) -> Path:
    """The sim recipe with the parsers tool-call and thinking need, and all six checks listed."""
    recipe_variant(DEFAULT_RECIPE, dest, extra={"enable-auto-tool-choice": True, "tool-call-parser": "hermes",
                                                "reasoning-parser": "deepseek_r1"})
    dest.write_text(dest.read_text() + "acceptance:\n  checks: [logprobs-finite, greedy-digest, needle, tool-call, "
                    "language, thinking]\n")
    return dest


def med(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} s (min {min(xs):.3f}, max {max(xs):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a-commit", default="3c20918", help="A: the sequential acceptance (default 3c20918)")
    ap.add_argument("--rounds", type=int, default=9, help="counted rounds (one warm-up round first)")
    ap.add_argument("--every-check", action="store_true", help="all six built-in checks, with the parsers they need")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-accept-")
    recipe_path = DEFAULT_RECIPE
    if args.every_check:
        recipe_path = every_check(Path(tmp.name) / "sim-tiny-every-check.yaml")
    recipe = load_recipe(recipe_path)[0]
    env = {k: str(v) for k, v in recipe.env.items() if k.startswith("SIM_") and k != "SIM_LOAD_SECONDS"}
    extra = ["--no-enable-prefix-caching"]
    for key, value in recipe.vllm.extra.items():
        extra += [f"--{key}"] if value is True else [f"--{key}", str(value)]
    spec_k = recipe.vllm.speculative_config.num_speculative_tokens
    load_start = os.getloadavg()
    with tmp, LocalStandin(spec_k=spec_k, env=env, name=recipe.served_name, extra=extra,
                           max_model_len=recipe.vllm.max_model_len) as srv:
        a_code = export(args.a_commit, Path(tmp.name) / "a")
        sides = {"A": Worker(a_code, recipe_path, srv.port), "B": Worker(HERE.parent, recipe_path, srv.port)}
        names = sides["B"].names
        step: dict[str, list[float]] = {"A": [], "B": []}
        single: dict[str, list[float]] = {n: [] for n in names}
        ratios, verdicts = [], {}
        try:
            for i in range(args.rounds + 1):
                for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    seconds, results = sides[side].run(None)
                    verdicts.setdefault(side, results)
                    if verdicts[side] != results and side == "B":
                        raise RuntimeError(f"B's verdicts changed between rounds: {verdicts[side]} vs {results}")
                    if i:
                        step[side].append(seconds)
                alone = {}
                for name in names:
                    alone[name] = sides["B"].run([name])[0]
                    if i:
                        single[name].append(alone[name])
                if i:
                    ratios.append(step["B"][-1] / max(alone.values()))
                print(f"[{time.strftime('%H:%M:%S')}] round {i}{' (warm-up)' if not i else ''}: A {step['A'][-1:] or '-'}"
                      f" B {step['B'][-1:] or '-'}", file=sys.stderr, flush=True)
        finally:
            for w in sides.values():
                w.close()
    same = [(a[0], a[1]) for a in verdicts["A"]] == [(b[0], b[1]) for b in verdicts["B"]]
    slowest = max(names, key=lambda n: statistics.median(single[n]))
    print(f"acceptance step of `up` on the stand-in (sim-tiny: {', '.join(names)}), {args.rounds} rounds, "
          f"load average {load_start[0]:.2f} -> {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    print(f"  A {args.a_commit} (sequential)  step {med(step['A'])}")
    print(f"  B this checkout (concurrent)  step {med(step['B'])}")
    for name in names:
        print(f"    {name:<16} alone {med(single[name])}")
    print(f"  B step / slowest single check ({slowest}): {statistics.median(step['B']) / statistics.median(single[slowest]):.3f}"
          f" (medians); per round median {statistics.median(ratios):.3f}, max {max(ratios):.3f}")
    print(f"  A/B step: {statistics.median(step['A']) / statistics.median(step['B']):.2f}x (medians)")
    print(f"  verdicts A == B: {same} ({', '.join(f'{n} {s}' for n, s, _ in verdicts['B'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
