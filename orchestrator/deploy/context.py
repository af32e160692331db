"""What the steps of one `up` share: the plan, the connections, the events, and what each step did."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks.basics import CheckResult
from ..config.load import Deployment
from ..docker_cli.image_sync import STALL_TIMEOUT, SyncPlan
from ..http_api.endpoint import Endpoint
from ..render.plan import Plan
from ..runner.events import Events
from ..transport.group import Cluster
from .current import Decision
from .watch import Monitor


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
    skip_checks: list = field(default_factory=list)  # --skip-check NAME: preflight checks left out
    restore: bool = True  # a failed or interrupted `up` starts the previous release again (--no-restore: not)
    rollback_of: object = None  # releases.record.Release: this `up` deploys that release again (`rollback`)


@dataclass
class Look:
    """What preflight saw on every node, read in parallel before anything is changed."""

    named: dict  # node -> containers holding the plan's names (ours or not)
    ports: CheckResult
    image: SyncPlan


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
    expectations: list = field(default_factory=list)
    lock: object = None  # releases.lock.DeployLock while held
    lock_owned: bool = True  # False: an enclosing operation holds the lock; this `up` must not release it
    history: object = None  # releases.store.History as read at the start
    release: object = None  # releases.record.Release: this run's record
    replaces: object = None  # the Release whose containers this run stops
    reuse: dict = field(default_factory=dict)  # node -> restore.Kept: start it instead of `docker run` (rollback)
    stop_step: object = None  # the StopPrevious step, once planned: what it stopped is what a restore starts

    def conn(self, node: str):
        return self.cluster[node]
