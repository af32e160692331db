"""Helpers for bench_up.py: recipe variants, event readers, teardown between runs, small stats.

An `Events()` with no sinks is silent: it still records every event (`history`) and every phase
(`phases`, as PhaseRecord(phase, seconds, outcome)), which is all the benchmark reads."""

from __future__ import annotations

import calendar
import re
import statistics
import time
from pathlib import Path

from ruamel.yaml import YAML

from orchestrator.config.load import Deployment
from orchestrator.deploy.down import down
from orchestrator.runner.events import Events, Kind


def notes(events: Events) -> list[str]:
    """What a reporter would have printed as notes, warnings and image moves, in order."""
    shown = {Kind.NOTE: "", Kind.WARNING: "warning: ", Kind.IMAGE_MOVED: ""}
    return [shown[e.kind] + e.message for e in events.history if e.kind in shown]


def phase_seconds(events: Events) -> dict[str, float]:
    """Seconds per step of one command, keyed by phase; a phase that two steps share is keyed by the
    second step's detail too (`up`: "rendezvous" is the head's port LISTENING, then the peers joining)."""
    details = [e.data.get("detail", "") for e in events.history if e.kind is Kind.PHASE_START]
    out: dict[str, float] = {}
    for record, detail in zip(events.phases, details):
        key = str(record.phase)
        if key in out:
            key = f"{key} ({detail})" if detail else f"{key} (again)"
        out[key] = out.get(key, 0.0) + record.seconds
    return out


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
    """`spark-deploy down <recipe>`: this recipe's containers, peers first (not timed by callers).

    Kept containers of earlier runs carry the recipe label too, so they go as well. Anything left is an error:
    the next run would otherwise find it and measure something else."""
    result = down(dep.inventory, dep.recipe.name, Events())
    if not result.ok:
        raise RuntimeError(f"down left containers behind: {result.failed}")


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
