"""Running the real `spark-deploy bench` CLI from the bench tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cli_json

SPARK_DEPLOY = Path(sys.executable).with_name("spark-deploy")


def bench_cli(*args: str, timeout: float = 300) -> tuple[int, dict | None, str]:
    """Run the installed `spark-deploy bench` (a real process); (exit code, parsed --json output, stderr)."""
    cmd = [str(SPARK_DEPLOY), "bench", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    data = cli_json.result(res.stdout) if res.stdout.strip().startswith("{") else None
    return res.returncode, data, res.stderr + res.stdout


def head_truth(cluster, recipe: str):
    """The `SIM truth:` line of the newest rank-0 container of `recipe` on the head (running or kept)."""
    from orchestrator.sim.standin.speed import Truth

    ids = cluster.exec(1, ["docker", "ps", "-aq", "--filter", f"label=spark-deploy.recipe={recipe}",
                           "--filter", "label=spark-deploy.rank=0"]).stdout.split()
    assert ids, f"no rank-0 container of {recipe} on the head"
    log = cluster.exec(1, ["sh", "-c", 'docker logs "$1" 2>&1', "sh", ids[0]]).stdout
    return Truth.from_line(log)
