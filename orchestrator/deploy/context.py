"""What the steps of one `up` share: the plan, the connections, the events, and what each step did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..checks.verdict import Verdict
from ..config.load import Deployment
from ..docker_cli.image_sync import STALL_TIMEOUT, SyncPlan
from ..http_api.endpoint import Endpoint
from ..render.plan import Plan
from ..runner.events import Events
from ..transport.group import Cluster
from .current import Decision
from .watch import Monitor

if TYPE_CHECKING:  # the steps import this module: their types are named here, not imported at run time
    from ..operation import Operation
    from ..releases.lock import DeployLock
    from ..releases.record import Release
    from ..releases.store import History
    from ..runner.runner import StepFailed
    from ..docker_cli.containers import Container
    from .expectations import ExpectationResult
    from .restore import Kept
    from .steps_prepare import StopPrevious


@dataclass
class UpOptions:
    force: bool = False
    keep_on_failure: bool = False
    replace_image: bool = False  # --sync: replace a different image held under the same reference
    listen_timeout: float = 600.0
    join_timeout: float = 120.0  # peers must hold a connection to the rendezvous by then
    ready_timeout: float = 5400.0  # 167 GB over NFS took 69 minutes to serve (field note 13)
    expect_timeout: float = 60.0
    poll: float = 0.05  # LISTEN probe interval: one short SSH exec each
    heartbeat: float = 30.0  # seconds between "still waiting" lines during long waits
    stall_warning: float = 300.0  # warn when no node has logged anything for this long
    copy_stall_timeout: float = STALL_TIMEOUT  # an image copy that moves no byte for this long fails
    skip_checks: list[str] = field(default_factory=list)  # --skip-check NAME: preflight checks left out
    restore: bool = True  # a failed or interrupted `up` starts the previous release again (--no-restore: not)
    rollback_of: Release | None = None  # this `up` deploys that release again (`rollback`)
    sync_model: bool = False  # --sync-model: copy the model's missing blobs to the nodes before preflight
    accept: bool = True  # run the recipe's acceptance checks after readiness (--no-accept: not)
    upgrade: dict | None = None  # `upgrade`: the old and new image and vLLM versions, recorded with the release


@dataclass
class Look:
    """What preflight saw on every node, read in parallel before anything is changed."""

    found: dict[str, list[Container]]  # node -> ours of this recipe (by label), and any holding the plan's names
    ports: Verdict
    image: SyncPlan
    facts: dict[str, dict] = field(default_factory=dict)  # node -> fact name -> Observed (boot units among them)


@dataclass
class UpContext:
    dep: Deployment
    plan: Plan
    cluster: Cluster
    events: Events
    opts: UpOptions
    endpoint: Endpoint
    monitor: Monitor = field(default_factory=Monitor)
    look: Look | None = None
    decision: Decision | None = None
    sample: str = ""
    expectations: list[ExpectationResult] = field(default_factory=list)  # one per log check
    after_ready: dict | None = None  # the facts read once ready (deploy/after_ready.py)
    fingerprint: dict | None = None  # what every rank's engine resolved (facts/fingerprint.py), once read
    acceptance: list = field(default_factory=list)  # acceptance.Result per check, once run
    lock: DeployLock | None = None  # while held
    history: History | None = None  # as read at the start
    release: Release | None = None  # this run's record
    replaces: Release | None = None  # the release whose containers this run stops
    reuse: dict[str, Kept] = field(default_factory=dict)  # node -> start it instead of `docker run` (rollback)
    stop_step: StopPrevious | None = None  # once planned: what it stopped is what a restore starts
    failure: StepFailed | None = None  # once the run failed: its nodes and causes go into the audit line
    endpoint_at: Callable[[str, int], Endpoint] = Endpoint  # (host, port) -> an API; the restore's too (tests: in memory)
    op: Operation | None = None  # the operation this `up` is a body of: its connections, lock and audit line
    op_owned: bool = False  # True: `up`'s own operation (it connected, locked and read the state for this run)

    def conn(self, node: str):
        return self.cluster[node]
