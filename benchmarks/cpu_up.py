#!/usr/bin/env python3
"""The CPU one `up` costs, on the nodes and on this machine: the work, not the wall time (issue 19).

    .venv/bin/python benchmarks/cpu_up.py RECIPE -i INVENTORY --nodes CONTAINER,CONTAINER [--runs 4]
    /path/to/A/.venv/bin/python benchmarks/cpu_up.py ... --checkout /path/to/A     # A's code, A's interpreter

On a 2-core machine shared with other suites the wall time of `up` follows the CPU it needs more than its
round trips. This reads it: the simulated nodes' cgroup CPU (cgroup v1 cpuacct of each node container:
its sshd, bash, docker CLI, dockerd and the stand-in inside it) and this process's own CPU, over the
whole `up()` and over its preflight step, `down` before each run (not counted). `--checkout` (default:
this one) is the code measured, against an existing simulated cluster (`spark-deploy sim up`);
both checkouts on the same cluster, one after the other, compare like with like whatever the load.
Read only apart from the deployments themselves.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
_AT = sys.argv.index("--checkout") + 1 if "--checkout" in sys.argv[:-1] else 0
sys.path.insert(0, str(Path(sys.argv[_AT]).resolve() if _AT else HERE.parent))  # before `orchestrator` is imported

from benchsim import remove_deployment  # noqa: E402
from orchestrator.config.load import load_deployment  # noqa: E402
from orchestrator.deploy import steps_prepare  # noqa: E402
from orchestrator.deploy.up import UpOptions, up  # noqa: E402
from orchestrator.runner.events import Events  # noqa: E402

CGROUP = "/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"


def node_cpu(ids: list[str]) -> float:
    """Seconds of CPU every node container has used so far."""
    return sum(int(Path(CGROUP.format(id=i)).read_text()) for i in ids) / 1e9


def own_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("recipe", type=Path)
    ap.add_argument("-i", "--inventory", type=Path, required=True)
    ap.add_argument("--nodes", required=True, help="the node containers, comma-separated (docker ps)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--checkout", type=Path, default=HERE.parent, help="the checkout whose code is measured")
    args = ap.parse_args()
    ids = []
    for name in args.nodes.split(","):
        found = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True)
        if found.returncode != 0 or not Path(CGROUP.format(id=found.stdout.strip())).exists():
            raise SystemExit(f"{name}: no such container, or no cgroup v1 cpuacct for it")
        ids.append(found.stdout.strip())
    in_preflight: dict[str, float] = {}
    run_preflight = steps_prepare.Preflight.run

    def measured(self, ctx) -> None:
        nodes, own = node_cpu(ids), own_cpu()
        try:
            run_preflight(self, ctx)
        finally:
            in_preflight.update(nodes=node_cpu(ids) - nodes, own=own_cpu() - own)

    steps_prepare.Preflight.run = measured
    import orchestrator
    print(f"code: {Path(orchestrator.__file__).parent.parent}")
    dep = load_deployment(args.recipe, args.inventory)
    rows = []
    for _ in range(args.runs):
        remove_deployment(dep)
        nodes, own = node_cpu(ids), own_cpu()
        up(dep, Events(), UpOptions())
        rows.append((node_cpu(ids) - nodes, own_cpu() - own, in_preflight["nodes"], in_preflight["own"]))
    remove_deployment(dep)
    for k, label in enumerate(("up: nodes", "up: this process", "preflight: nodes", "preflight: this process")):
        values = [r[k] for r in rows]
        print(f"{label:<24} CPU median {statistics.median(values):.3f} s  ({', '.join(f'{v:.3f}' for v in values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
