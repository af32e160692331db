"""Take one sample of the serving release: an Observation of the nodes (containers, history), one script per
node (MemAvailable, swap, SM clock), two /metrics scrapes around one probe completion."""
from __future__ import annotations

import time
import urllib.error
from functools import partial
from pathlib import Path
from typing import Callable

from ..bench.metrics import ACCEPTED, DRAFT_TOKENS, RUNNING, WAITING, MetricsError, parse
from ..config.load import load_inventory, load_kept_recipe
from ..deploy.after_ready import memory
from ..deploy.supervise import read_state as supervisor_state
from ..facts.supervisor import SupervisorState
from ..http_api.endpoint import Endpoint
from ..operation import Observation, OperationRefused, Reach
from ..releases.record import Release, ReleaseOutcome
from ..transport.group import Cluster, Connector
from ..transport.node import NodeError
from .capacity import figure_of
from .model import Engine, NodeFacts, Rank, RankState, Sample, judge

GENERATION = "vllm:generation_tokens_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
NODE_SCRIPT = ("cat /proc/meminfo; echo @@gpu; "
               "nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits 2>&1 | head -n 1 || true")


class WatchError(Exception):
    """The cluster could not be read at all (exit 1)."""


def recorded_serving(releases: list[Release], recipe: str | None) -> Release | None:
    """The release the records say serves (of `recipe`, if given): what the nodes must be running."""
    return next((r for r in releases if r.outcome is ReleaseOutcome.SERVING and (recipe is None or r.recipe == recipe)),
                None)


def node_facts(name: str, stdout: str) -> NodeFacts:
    mem, _, gpu = stdout.partition("@@gpu")
    facts = NodeFacts(name)
    try:
        m = memory(mem)
        facts.mem_available_gib = m["mem_available_gib"]
        facts.swap_used_gib = round(m["swap_total_gib"] - m["swap_free_gib"], 2)
    except ValueError as exc:
        facts.error = f"meminfo unreadable: {exc}"
    first = next(iter(gpu.strip().splitlines()), "")
    try:
        facts.sm_clock_mhz = float(first)
    except ValueError:  # memory is still judged; the clock is only shown, so its absence is said, not judged
        facts.sm_clock_missing = f"nvidia-smi: {first.strip()[:120]}" if first.strip() else "nvidia-smi printed nothing"
    return facts


def ranks_of(release: Release, containers: dict, unreachable: dict) -> list[Rank]:
    out = []
    for r in release.ranks:
        if r.node in unreachable:
            out.append(Rank(r.rank, r.node, "", RankState.UNREACHABLE, unreachable[r.node], name=r.container))
            continue
        found = next((c for c in containers.get(r.node, []) if c.id.startswith(r.container) or c.name == r.container),
                     None)
        if found is None:
            out.append(Rank(r.rank, r.node, "", RankState.ABSENT, name=r.container))
        elif found.running:
            out.append(Rank(r.rank, r.node, found.id, RankState.RUNNING, name=found.name))
        else:
            out.append(Rank(r.rank, r.node, found.id, RankState.STOPPED, f"{found.status}, exit {found.exit_code}"
                            + (", OOM-killed" if found.oom_killed else ""), name=found.name))
    return out


def _scrape(endpoint: Endpoint):
    status, body = endpoint.request("GET", "/metrics", timeout=5)
    if status != 200:
        raise MetricsError(f"/metrics answered {status}")
    return parse(body.decode(errors="replace"))


def engine_facts(endpoint: Endpoint, model: str, window: float) -> Engine:
    """A scrape, one 1-token completion (the proof it generates: /health is not), a scrape `window` s later."""
    e = Engine(probed=True)
    try:
        before, t0 = _scrape(endpoint), time.monotonic()
    except (MetricsError, OSError, urllib.error.URLError) as exc:
        before, e.metrics_error = None, str(exc)
    try:
        e.healthy = endpoint.healthy(timeout=3)
        answer = endpoint.complete(model, "The DGX Spark cluster is", max_tokens=1, timeout=15)
        e.generating = bool(answer.get("choices"))
        e.probe = "a 1-token completion came back" if e.generating else f"no choices: {str(answer)[:120]}"
    except (RuntimeError, OSError, urllib.error.URLError, ValueError) as exc:
        e.probe = f"the probe completion failed: {exc}"
    if before is None:
        return e
    rest = window - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)  # the measuring window of a rate, not a wait for readiness
    try:
        after, t1 = _scrape(endpoint), time.monotonic()
    except (MetricsError, OSError, urllib.error.URLError) as exc:
        e.metrics_error = str(exc)
        return e
    e.running, e.waiting, e.kv_usage = after.get(RUNNING), after.get(WAITING), after.get(KV_USAGE)
    g0, g1 = before.get(GENERATION), after.get(GENERATION)
    if g0 is not None and g1 is not None and t1 > t0:
        e.gen_tps = round((g1 - g0) / (t1 - t0), 2)
    d0, d1, a0, a1 = before.get(DRAFT_TOKENS), after.get(DRAFT_TOKENS), before.get(ACCEPTED), after.get(ACCEPTED)
    if None not in (d0, d1, a0, a1) and d1 > d0:
        e.spec_acceptance = round((a1 - a0) / (d1 - d0), 4)
    if d1 and a1 is not None:
        e.spec_acceptance_total = round(a1 / d1, 4)
    return e


def take(inventory_path: Path, recipe: str | None, reserve_gib: float | None, window: float = 1.0, *,
         connector: Connector | None = None, endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> Sample:
    inv = load_inventory(inventory_path)[0]
    try:
        with Observation(inv, reach=Reach.ANY, what="watch",
                         cluster_factory=partial(Cluster, connector=connector)) as seen:
            state = seen.state
            nodes = []
            for conn in seen.cluster.nodes:
                if conn.name in state.unreachable or not conn.is_open:
                    nodes.append(NodeFacts(conn.name, error=f"unreachable: {state.unreachable.get(conn.name, '')}"))
                    continue
                try:
                    got = conn.run_script(NODE_SCRIPT, timeout=10)
                    nodes.append(node_facts(conn.name, got.stdout))
                except NodeError as exc:
                    nodes.append(NodeFacts(conn.name, error=str(exc)))
            supervisor = _supervisor(seen, inv)
    except (OperationRefused, NodeError) as exc:
        raise WatchError(str(exc)) from None
    release = recorded_serving(state.releases, recipe)
    plans = {node: sorted({c.ours.plan_hash for c in cs if c.running and c.ours and c.ours.cluster == inv.cluster
                           and (recipe is None or c.ours.recipe == recipe)})
             for node, cs in state.containers.items()}
    reserve = reserve_gib
    engine = Engine(probe="no release to probe")
    ranks: list[Rank] = []
    if release is not None:
        ranks = ranks_of(release, state.containers, state.unreachable)
        # the release's own recipe: its port, model and reserve
        kept = load_kept_recipe(release.recipe_text, f"spark-deploy-releases/{release.cluster}",
                                f"release-{release.id:06d}-{release.recipe}.yaml", inventory_path).recipe
        reserve = reserve if reserve is not None else kept.preflight.memory_reserve_gib
        gone = [r for r in ranks if r.state in (RankState.STOPPED, RankState.ABSENT)]
        if gone:  # already a problem; a head whose peer died stalls, and a probe would only wait it out
            # (a rank that cannot be observed is not known gone: the probe, bounded, says whether it serves)
            engine = Engine(probe=f"not probed: rank {gone[0].rank} is gone")
        else:
            engine = engine_facts(endpoint_at(inv.ranked[0].address, kept.serve.port), kept.served_name, window)
    return judge(Sample(time.time(), inv.cluster, release.id if release else None, release.recipe if release else recipe,
                        release.plan_hash if release else None, plans, ranks, nodes, engine,
                        reserve if reserve is not None else 4.0,
                        capacity=figure_of(release.id, release.bench) if release else None, supervisor=supervisor))


def _supervisor(seen, inv) -> SupervisorState | None:
    """The head's group supervisor (its recoveries, a crash loop); None when the head was not read."""
    head = next((c for c in seen.alive if c.name == inv.head and c.is_open), None)
    if head is None:
        return None
    try:
        return supervisor_state(head, inv)
    except NodeError:  # shown as not read; the ranks and the probe still judge the release
        return None
