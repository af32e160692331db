"""Helpers for bench_up.py: recipe variants, a silent reporter, teardown between runs, small stats."""

from __future__ import annotations

import calendar
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ruamel.yaml import YAML

from orchestrator.config.load import Deployment
from orchestrator.deploy.report import Reporter
from orchestrator.deploy.teardown import ours, remove_ranked
from orchestrator.transport.group import Cluster


@dataclass
class SilentReporter(Reporter):
    """Records phases (the base class does) and notes; prints nothing."""

    notes: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def warn(self, message: str) -> None:
        self.notes.append("warning: " + message)


def recipe_variant(base: Path, dest: Path, *, env: dict | None = None, extra: dict | None = None,
                   tp: int | None = None) -> Path:
    """A copy of the sim cluster's recipe.yaml (ruamel round trip) with env/extra/TP changed."""
    y = YAML()
    y.preserve_quotes = True
    doc = y.load(base.read_text())
    for key, value in (env or {}).items():
        doc.setdefault("env", {})[key] = value
    for key, value in (extra or {}).items():
        doc["vllm"].setdefault("extra", {})[key] = value
    if tp is not None:
        doc["vllm"]["tensor_parallel_size"] = tp
    with dest.open("w") as f:
        y.dump(doc, f)
    return dest


def load_seconds(dep: Deployment) -> float:
    """The stand-in's configured load time (SIM_LOAD_SECONDS in the recipe env; vllm_sim default 2.0)."""
    return float(dep.recipe.env.get("SIM_LOAD_SECONDS", 2.0))


def remove_deployment(dep: Deployment) -> None:
    """`spark-deploy down <recipe>`: this recipe's containers, peers first (not timed by callers)."""
    cluster = Cluster(dep.inventory).open()
    try:
        found = ours(cluster, dep.recipe.name)
        if any(found.values()):
            remove_ranked(cluster, found)
    finally:
        cluster.close()


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z$")


def docker_time(stamp: str) -> float:
    """Docker's RFC 3339 UTC time with nanoseconds ("2026-12-01T02:37:20.229544513Z") as epoch seconds."""
    found = _STAMP.match(stamp.strip())
    if not found:
        raise ValueError(f"not a docker timestamp: {stamp!r}")
    whole = calendar.timegm(time.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S"))
    frac = found.group(2) or "0"
    return whole + int(frac) / 10 ** len(frac)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float]) -> str:
    if not values:
        return "no runs"
    return f"median {median(values):.3f} s, min {min(values):.3f}, max {max(values):.3f} (n={len(values)})"


def phase_medians(runs: list[dict[str, float]]) -> dict[str, float]:
    names: list[str] = []
    for run in runs:
        names += [n for n in run if n not in names]
    return {n: median([r[n] for r in runs if n in r]) for n in names}
