"""A sample as Prometheus text for node_exporter's textfile collector: an existing Prometheus/Grafana sees
the deployment's health without a new daemon. Written to a temp file and renamed (the collector must
never read half a file)."""
from __future__ import annotations

import os
import tempfile

from ..facts.supervisor import Watch
from .model import RankState, Sample


def _labels(**kv) -> str:
    def esc(v) -> str:
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}"


def render(sample: Sample) -> str:
    lines: list[str] = []
    base = {"cluster": sample.cluster}

    def metric(name: str, help_: str, samples: list[tuple[dict, float | None]]) -> None:
        rows = [(labels, v) for labels, v in samples if v is not None]
        if not rows:
            return
        lines.extend([f"# HELP spark_deploy_{name} {help_}", f"# TYPE spark_deploy_{name} gauge"])
        lines.extend(f"spark_deploy_{name}{_labels(**base, **labels)} {float(v)!r}" for labels, v in rows)

    metric("ok", "1 when watch saw no problem", [({}, 0.0 if sample.problems else 1.0)])
    metric("release", "The release recorded as serving", [({"recipe": sample.recipe or ""}, sample.release)])
    matches = all(p == sample.plan_hash for ps in sample.plans.values() for p in ps) if sample.plan_hash else None
    metric("plan_matches", "1 when every node runs only the release's plan",
           [({}, None if matches is None else float(matches))])
    metric("rank_up", "1 when the rank's container runs",
           [({"rank": r.rank, "node": r.node}, 1.0 if r.state is RankState.RUNNING else 0.0) for r in sample.ranks])
    metric("mem_available_bytes", "MemAvailable on the node",
           [({"node": n.node}, None if n.mem_available_gib is None else n.mem_available_gib * 2**30)
            for n in sample.nodes])
    metric("swap_used_bytes", "Swap in use on the node",
           [({"node": n.node}, None if n.swap_used_gib is None else n.swap_used_gib * 2**30) for n in sample.nodes])
    metric("sm_clock_mhz", "The GPU's SM clock", [({"node": n.node}, n.sm_clock_mhz) for n in sample.nodes])
    e = sample.engine
    metric("generating", "1 when a probe completion came back", [({}, 1.0 if e.generating else 0.0)])
    metric("requests_running", "vllm:num_requests_running", [({}, e.running)])
    metric("requests_waiting", "vllm:num_requests_waiting", [({}, e.waiting)])
    metric("kv_cache_usage_ratio", "vllm:kv_cache_usage_perc (0..1)", [({}, e.kv_usage)])
    metric("generation_tokens_per_second", "Generation tokens per second over the sample's window",
           [({}, e.gen_tps)])
    metric("spec_acceptance_ratio", "Accepted over drafted tokens over the sample's window",
           [({}, e.spec_acceptance)])
    metric("spec_acceptance_total_ratio", "Accepted over drafted tokens since the engine started",
           [({}, e.spec_acceptance_total)])
    cap = sample.capacity
    metric("capacity_tokens_per_second", "The release's lowest capacity figure (bench --replicates)",
           [({"profile": cap.profile}, cap.tok_s)] if cap else [])
    metric("below_capacity_samples", "Samples in a row whose live decode is below the capacity figure",
           [({}, float(sample.below_capacity))] if cap else [])
    sup = sample.supervisor
    known = sup is not None and sup.watch not in (Watch.NONE, Watch.UNKNOWN)
    metric("supervisor_recoveries", "Restarts of its release after which the group supervisor saw it serve again",
           [({"release": sup.release}, float(sup.recoveries))] if known else [])
    metric("supervisor_crash_looped", "1 when the group supervisor stopped its release as crash-looped",
           [({"release": sup.release}, 1.0 if sup.crash_looped else 0.0)] if known else [])
    return "\n".join(lines) + "\n"


def write(path: str, sample: Sample) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".spark-deploy-watch.", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(render(sample))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
