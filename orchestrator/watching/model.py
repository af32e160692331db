"""One sample of the serving release, and the pure judgement `watch` exits by."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum

from ..facts.supervisor import SupervisorState, Watch


class RankState(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"  # the container is there, not running (exit code in `detail`)
    ABSENT = "absent"  # no such container on the node
    UNREACHABLE = "unreachable"  # the node did not answer


@dataclass
class Rank:
    rank: int
    node: str
    container: str  # the container's ID as the node shows it; "" when the node did not show one
    state: RankState
    detail: str = ""
    name: str = ""  # the container's name as the release recorded it

    def shown(self) -> str:
        """The container as a user can look it up: its real ID (docker's 12 characters), else its name."""
        return f"container {self.container[:12]}" if self.container else f"the container named {self.name}"


@dataclass
class NodeFacts:
    node: str
    mem_available_gib: float | None = None
    swap_used_gib: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_missing: str | None = None  # why there is no SM clock (nvidia-smi absent or failing): shown, not judged
    error: str | None = None


@dataclass
class Engine:
    """From /metrics and one probe completion: is the endpoint generating, and how busy is it."""

    probed: bool = False  # False: not asked (no release, or a rank is gone: a stalled head would hang it)
    healthy: bool = False
    generating: bool = False
    probe: str = ""  # what the probe saw
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    gen_tps: float | None = None  # generation tokens per second over the sample's window
    spec_acceptance: float | None = None  # accepted / draft tokens over the window (None: no drafts in it)
    spec_acceptance_total: float | None = None  # the same since the engine started (None without speculation)
    metrics_error: str | None = None


@dataclass(frozen=True)
class CapacityFigure:
    """What the release was measured to hold (watching/capacity.py)."""

    release: int
    profile: str
    tok_s: float  # the lower bound of the 95% interval of the replicate medians (bench/capacity.py)


@dataclass
class Sample:
    at: float
    cluster: str
    release: int | None
    recipe: str | None
    plan_hash: str | None  # the release's
    plans: dict[str, list[str]]  # node -> plan hashes of our running containers
    ranks: list[Rank]
    nodes: list[NodeFacts]
    engine: Engine
    reserve_gib: float
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    capacity: CapacityFigure | None = None  # the release's lowest capacity figure, if `bench --replicates` ran
    below_capacity: int = 0  # samples in a row, this one included, whose live decode is below that figure
    supervisor: SupervisorState | None = None  # the head's group supervisor (None: the head was not read)
    recovered: dict | None = None  # a recovery the supervisor made since the previous sample (watching/recovery.py)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def judge(sample: Sample) -> Sample:
    """Fill problems (watch exits 1) and warnings from what was seen. Pure."""
    problems, warnings = [], []
    if sample.release is None:
        problems.append(f"no release is recorded as serving on {sample.cluster}")
    for r in sample.ranks:
        if r.state is RankState.UNREACHABLE:  # not seen is not gone: the probe says whether it still serves
            serves = ("; the endpoint still generates" if sample.engine.probed and sample.engine.generating
                      else "")
            problems.append(f"cannot observe rank {r.rank} on {r.node} ({r.detail or 'the node did not answer'}): "
                            f"{r.shown()} may still run{serves}")
        elif r.state is not RankState.RUNNING:
            problems.append(f"rank {r.rank} ({r.node}) is gone: {r.shown()} {r.state}"
                            + (f" ({r.detail})" if r.detail else ""))
    if sample.plan_hash:
        other = {n: [p for p in ps if p != sample.plan_hash] for n, ps in sample.plans.items()}
        for node, plans in sorted(other.items()):
            if plans:
                problems.append(f"{node} runs plan {', '.join(plans)}, not release {sample.release}'s "
                                f"{sample.plan_hash}")
    sup = sample.supervisor
    if sup is not None and sup.crash_looped and sample.release in (sup.release, None):  # not replaced since
        problems.append(f"crash loop: {sup.detail}")
    elif sup is not None and sup.watch in (Watch.RECOVERING, Watch.WAITING_LOCK) and sup.release == sample.release:
        warnings.append(f"the supervisor is {sup.watch} release {sup.release}: {sup.detail}")
    if sample.engine.probed and not sample.engine.generating:
        problems.append(f"the endpoint is not generating: {sample.engine.probe}")
    for n in sample.nodes:
        if n.error:
            warnings.append(f"{n.node}: {n.error}")
        elif n.mem_available_gib is not None and n.mem_available_gib < sample.reserve_gib:
            line = (f"{n.node}: MemAvailable {n.mem_available_gib:.1f} GiB is under the reserve of "
                    f"{sample.reserve_gib:g} GiB (preflight.memory_reserve_gib; field note 8)")
            warnings.append(line)
            problems.append(line)
    sample.problems, sample.warnings = problems, warnings
    return sample
