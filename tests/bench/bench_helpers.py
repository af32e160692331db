"""Running the real `spark-deploy` CLI from the bench tests, and reading back what a run recorded."""

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


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The installed `spark-deploy ARGS` (a real process)."""
    return subprocess.run([str(SPARK_DEPLOY), *args], capture_output=True, text=True, timeout=timeout)


def history(cluster) -> dict[int, dict]:
    """Every release record of the cluster (`history --json`), by id."""
    res = cli("history", "-i", str(cluster.inventory_path), "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    return {r["id"]: r for r in cli_json.result(res.stdout)}


def serving(records: dict[int, dict]) -> dict:
    """The one release that serves."""
    (now,) = [r for r in records.values() if r["serving"]]
    return now


def audit_lines(cluster, action: str, tail: int = 300) -> list[dict]:
    """The cluster's last `tail` audit lines of `action` (`audit --json`)."""
    res = cli("audit", "-i", str(cluster.inventory_path), "--tail", str(tail), "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    return [a for a in cli_json.result(res.stdout) if a["action"] == action]
