"""`bench RECIPE --replicates N`: the same shots in N sittings of the serving release, restarted between
them, and a capacity figure per profile that a run right after a deploy cannot inflate (field note 16: a
first run said 69.3 tok/s, four re-runs 38-42 — "do not plan capacity from one run").

ONE operation: the cluster opened and locked once, the serving release read once (its containers' IDs do
not change when they are restarted), each restart a body of it (deploy/restart.py), the figures recorded with
the release as a part, and one `bench-replicates` audit line. The statistics are in capacity.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from ..config.load import Deployment
from ..deploy.context import UpOptions
from ..deploy.restart import RestartRefused, restart
from ..deploy.restore import recorded_deployment
from ..http_api.endpoint import Endpoint
from ..operation import AuditAction, Operation, Outcome, Reach
from ..releases.record import Release
from ..runner.events import Events
from ..runner.runner import StepFailed
from ..transport.cancel import signals_interrupt
from ..transport.group import Cluster, Connector
from .capacity import Capacity, capacity
from .client import open_client
from .runner import Group, Plan, run
from .target import Target


class ReplicatesError(Exception):
    """Nothing of the recipe serves, or a restart failed (exit 1); the message says which and what is left."""


@dataclass
class Replicate:
    number: int  # 1-based
    restarted: bool  # False for the first: measured on the release as it served
    groups: list[Group]


@dataclass
class ReplicatesResult:
    recipe: str
    release: int
    replicates: list[Replicate] = field(default_factory=list)

    def capacities(self) -> list[tuple[str, int, Capacity]]:
        """Per profile and level (in the order run): the replicate medians, their spreads and the capacity."""
        keys: list[tuple[str, int]] = []
        for r in self.replicates:
            for g in r.groups:
                if (g.profile, g.concurrency) not in keys:
                    keys.append((g.profile, g.concurrency))
        rows = []
        for profile, c in keys:
            medians, numbers, within = [], [], []
            for r in self.replicates:
                for g in r.groups:
                    head = g.headline() if (g.profile, g.concurrency) == (profile, c) else None
                    if head is not None:
                        medians.append(head.summary.median)
                        numbers.append(r.number)
                        within.append(head.summary.spread)
            rows.append((profile, c, capacity(medians, numbers, within)))
        return rows

    def recorded(self) -> dict:
        """What the release keeps (Release.bench["replicates"]): per profile at c=1, the capacity and why."""
        out = {}
        for profile, c, cap in self.capacities():
            if c == 1:
                out[profile] = {"capacity": cap.capacity, "interval": list(cap.interval) if cap.interval else None,
                                "medians": cap.medians, "between_spread": cap.between,
                                "left_out": [o.words() for o in cap.outliers], "why_none": cap.why_none or None}
        return {"n": len(self.replicates), "method": "lower bound of the 95% t interval of the mean of the "
                "replicate medians; a replicate outside the others' 95% prediction interval is left out",
                "profiles": out}

    def as_dict(self) -> dict:
        return {"recipe": self.recipe, "release": self.release,
                "replicates": [{"replicate": r.number, "restarted": r.restarted,
                                "groups": [g.as_dict() for g in r.groups]} for r in self.replicates],
                "capacity": [{"profile": p, "concurrency": c, **cap.as_dict()} for p, c, cap in self.capacities()]}


@dataclass(frozen=True)
class Seams:
    """The nodes' connections, the head's API, the waits' options (defaults: SSH, HTTP, `up`'s)."""

    connector: Connector | None = None
    endpoint_at: Callable[[str, int], Endpoint] = Endpoint
    options: UpOptions = field(default_factory=UpOptions)


def _target(dep: Deployment, release: Release) -> Target:
    """The serving release's endpoint, from the recipe (no second read of the cluster)."""
    recipe, head = dep.recipe, dep.inventory.ranked[0]
    spec = recipe.vllm.speculative_config
    return Target(url=Endpoint(head.address, recipe.serve.port).url, model=recipe.served_name,
                  draft_budget=spec.num_speculative_tokens if spec else None,
                  nodes=recipe.vllm.tensor_parallel_size, recipe=recipe.name, release=release.id)


def measure(dep: Deployment, n: int, plan_of: Callable[[Target], Plan], events: Events,
            on_shot: Callable[[Group, object], None] = lambda g, s: None,
            on_done: Callable[[Target, Plan, ReplicatesResult], str] = lambda t, p, r: "",
            seams: Seams = Seams()) -> ReplicatesResult:
    """N replicates of `plan_of(target)` on the release serving `dep`'s recipe, restarted between them.
    `on_done` runs inside the operation (e.g. records the figures: a part of its line) and says what it did."""
    if n < 2:
        raise ValueError("replicates need n >= 2")
    opts = seams.options
    with Operation(dep.inventory, events, AuditAction.BENCH_REPLICATES, reach=Reach.ALL,
                   ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                   cluster_factory=partial(Cluster, connector=seams.connector)) as op:
        state = op.state
        if not state.serving_known:
            raise ReplicatesError("cannot tell what serves: " + "; ".join(state.problems()))
        serving = state.serving
        if serving is None or serving.recipe != dep.recipe.name:
            what = "nothing serves" if serving is None else f"release {serving.id} of {serving.recipe!r} serves"
            raise ReplicatesError(f"{what} on {dep.inventory.cluster}, not {dep.recipe.name!r}: nothing measured")
        running = state.running(serving)
        as_deployed = recorded_deployment(serving, dep.inventory, dep.inventory_path, dep.inventory_doc)
        tgt = _target(as_deployed, serving)
        plan = plan_of(tgt)
        result = ReplicatesResult(dep.recipe.name, serving.id)
        for number in range(1, n + 1):
            if number > 1:
                try:
                    with signals_interrupt():
                        restart(op.cluster, serving, running, as_deployed, events, opts, seams.endpoint_at)
                except (StepFailed, RestartRefused) as exc:
                    raise ReplicatesError(f"restart before replicate {number} of release {serving.id}: {exc} "
                                          f"({number - 1} measured; if it is left stopped, start it with "
                                          f"`spark-deploy rollback {serving.id}`)") from None
            with open_client(tgt.url) as http:
                groups = run(http, tgt.model, plan, on_shot)
            result.replicates.append(Replicate(number, number > 1, groups))
        said = on_done(tgt, plan, result)
        caps = [f"{p} c={c}: " + (f"capacity {cap.capacity:.1f} tok/s" if cap.capacity is not None
                                  else f"no capacity ({cap.why_none})")
                + "".join(f"; {o.words()}" for o in cap.outliers) for p, c, cap in result.capacities()]
        op.done(Outcome.OK, f"release {serving.id}: {n} replicates, restarted {n - 1} times; " + "; ".join(caps)
                + (f"; {said}" if said else ""), release=serving.id)
    return result
