"""The lifecycle every command that changes a cluster runs in: open, lock, read ONE state, act, audit.

    with Operation(inventory, events, AuditAction.PRUNE, reach=Reach.HEAD) as op:
        ...op.state (ClusterState), op.alive, op.unreachable, op.cluster...
        op.done(Outcome.OK, "kept releases 3, 2", release=3, nodes={"spark-2": "unreachable"})

- **open** under an explicit reachability policy (`Reach`): refused before anything is read or locked when
  the nodes the command needs do not answer, naming each and why; then the cluster's identity, as the
  nodes hold it (releases/identity.py: what the lock and the state are keyed by; nodes of two clusters
  refused, naming both; a locking command gives a head that holds none its identity);
- **lock**: the deploy lock on the head, re-entrant for this process (a command that runs another inside
  it — `maintenance end` bringing a release back — holds it once; the inner one reuses it); a stale lock
  is taken over loudly; a lost lock cancels the operation's connections (releases/lock.py);
- **nesting**: an operation begun inside another on the same cluster (`bench --compare` running `down`,
  `up` and `rollback` per block) is a part of it: it reuses the outer one's open connections and lock,
  reads the state afresh, and its outcome becomes one of the `parts` of the outer one's audit line;
- **state**: one round trip per node (operation/state.py), read after the lock is held, and the history
  copies that lag are repaired from it;
- **audit**: exactly one entry per operation, written on the way out from its outcome — the body's word
  (`done`) or the exception that ended it, with the per-node reasons and the cause chain.
"""

from __future__ import annotations

import contextvars
import json
from enum import StrEnum
from typing import Callable

from ..bugs import is_bug, unexpected
from ..config.inventory import Inventory
from ..releases import audit, identity, store
from ..releases.guard import report_takeover
from ..releases.lock import DeployLock, lock_path
from ..runner.events import Events
from ..runner.runner import StepFailed
from ..transport.cancel import Cancelled
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection, NodeError
from .state import ClusterState, read_state


class Reach(StrEnum):
    """Which nodes must answer before the operation may go on."""

    ALL = "every node"  # acting on every rank: refused when any node is unreachable
    HEAD = "the head"  # the lock lives there; the others that do not answer are named and left as they are
    ANY = "any node"  # reports: whoever answers


class Locking(StrEnum):
    """Whether the operation holds the deploy lock."""

    REQUIRED = "required"  # refused when the head (where it lives) does not answer
    IF_HEAD_ANSWERS = "if the head answers"  # `down`: what can be reached is removed either way, said loudly
    NONE = "none"  # read only


class Outcome(StrEnum):
    OK = "ok"
    INCOMPLETE = "incomplete"  # done where it could be; the nodes say where not
    REFUSED = "refused"  # nothing was changed: a precondition did not hold
    FAILED = "failed"
    INTERRUPTED = "interrupted"


class AuditAction(StrEnum):
    UP = "up"
    ROLLBACK = "rollback"
    DOWN = "down"
    PRUNE = "prune"
    PIN = "pin"
    LOCK_RELEASE = "lock-release"
    BOOT_ENABLE = "boot-enable"
    BOOT_DISABLE = "boot-disable"
    MAINTENANCE_BEGIN = "maintenance-begin"
    MAINTENANCE_END = "maintenance-end"
    BENCH_RECORD = "bench-record"
    BENCH_COMPARE = "bench-compare"
    UP_GATE = "up-gate"  # `up RECIPE --gate`: the blocks' ups and rollbacks are its parts
    BENCH_REPLICATES = "bench-replicates"
    TUNE = "tune"  # `tune`: every variant's up and rollback are its parts
    MODEL_PULL = "model-pull"
    RESTART = "restart"  # `restart`: the serving release's whole group stopped and started in order
    SUPERVISE_ENABLE = "supervise-enable"  # the group supervisor installed on the head for the serving release
    SUPERVISE_DISABLE = "supervise-disable"
    RECOVER = "recover"  # written by the group supervisor on the head (render/supervisor_rules.audit_entry)
    FABRIC_BASELINE = "fabric-baseline"  # `fabric test --save`: the figures kept on every node


class OperationRefused(Exception):
    """The nodes the operation needs did not answer; nothing was read, locked or changed."""

    def __init__(self, message: str, nodes: list[str]):
        self.nodes = nodes
        super().__init__(message)


# The deploy locks this process holds, by lock file and head: what makes the lock re-entrant.
_HELD: contextvars.ContextVar[dict[tuple[str, str], DeployLock]] = contextvars.ContextVar("spark_deploy_locks")
# The outermost open operation per cluster (same key): what an operation begun inside it becomes a part of.
_OPEN: contextvars.ContextVar[dict[tuple[str, str], "Operation"]] = contextvars.ContextVar("spark_deploy_operations")


def _key(inventory: Inventory) -> tuple[str, str]:
    return (inventory.node(inventory.head).address, lock_path(inventory))


def enclosing(inventory: Inventory) -> "Operation | None":
    """The open operation on the inventory's cluster this one runs inside, if any."""
    return _OPEN.get({}).get(_key(inventory))


def held_lock(inventory: Inventory) -> DeployLock | None:
    """The deploy lock this process already holds for the inventory's cluster, if any (and still ours)."""
    lock = _HELD.get({}).get(_key(inventory))
    return lock if lock is not None and lock.held else None


SAID_MAX = 300  # characters of one cause or one node's reason in an audit line (a line stays < PIPE_BUF)
PART_MAX = 160  # characters of one part's detail in the outer audit line


def _short(text: str) -> str:
    return text if len(text) <= SAID_MAX else text[:SAID_MAX - 6] + " [cut]"


def cause_chain(exc: BaseException, most: int = 5) -> list[str]:
    """The exception and what caused it, outermost first, each in words (a bug named as one), each cut to
    SAID_MAX: an audit line must stay one short write."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen and len(chain) < most:
        seen.add(id(exc))
        chain.append(_short(unexpected(exc) if is_bug(exc) else (str(exc) or type(exc).__name__)))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return chain


def node_reasons(exc: BaseException) -> dict[str, str]:
    """Per node, why it failed, from the errors that carry nodes (GroupError, NodeError, StepFailed)."""
    while exc is not None:
        if isinstance(exc, GroupError):
            return {n: _short(unexpected(e) if is_bug(e) else str(e)) for n, e in exc.failures.items()}
        if isinstance(exc, NodeError):
            return {exc.node: _short(str(exc))}
        if isinstance(exc, (StepFailed, OperationRefused)) and exc.nodes:
            return {n: _short(str(exc).splitlines()[0]) for n in exc.nodes}
        exc = exc.__cause__
    return {}


def _fit(line: dict) -> dict:
    """An audit line with many parts (a long `bench --compare`) stays one short write: the parts' details
    go first, then everything of a part but what it was, its outcome and its release."""
    for keep in (None, ("action", "outcome", "release", "block", "recipe"), ("action", "outcome", "release")):
        if len(json.dumps(line, separators=(",", ":")).encode()) <= audit.MAX_LINE - 200 or not line.get("parts"):
            return line
        cut = [{k: v for k, v in p.items() if k != "detail" and (keep is None or k in keep)} for p in line["parts"]]
        line = {**line, "parts": cut}
    return line


class Operation:
    """One mutating command's lifecycle; see the module docstring."""

    def __init__(self, inventory: Inventory, events: Events, action: AuditAction | str, *,
                 reach: Reach = Reach.ALL, lock: Locking = Locking.REQUIRED, ttl: float = 900.0,
                 cluster_factory: Callable[[Inventory], Cluster] = Cluster, run_id: str | None = None):
        self.inventory, self.events, self.action = inventory, events, str(action)
        self.reach, self.locking, self.ttl = reach, lock, ttl
        self.run_id = run_id  # written in the lock: a taker of it, stale, removes what this run created
        self.outer = enclosing(inventory)  # set: a part of that operation (its connections, lock and audit line)
        self.cluster = self.outer.cluster if self.outer is not None else cluster_factory(inventory)
        self.alive: list[NodeConnection] = []
        self.unreachable: dict[str, str] = {}
        self.state: ClusterState | None = None
        self.lock: DeployLock | None = None
        self.parts: list[dict] = []  # the outcomes of the operations run inside this one, in order
        self._own_lock = False
        self._token: contextvars.Token | None = None
        self._open_token: contextvars.Token | None = None
        self._said: dict | None = None  # what `done` recorded

    # ---- the body's word ------------------------------------------------------------------------
    def done(self, outcome: Outcome | str, detail: str = "", *, release: int | None = None,
             nodes: dict[str, str] | None = None, **extra) -> None:
        """The outcome the audit entry records (the last call wins)."""
        self._said = {"outcome": str(outcome), "detail": detail, "release": release, "nodes": nodes or {}, **extra}

    def part(self, action: str, outcome: str, detail: str = "", *, release: int | None = None, **extra) -> None:
        """One outcome of a body run inside this operation (an `up` of a block, a restore): a part of the
        one audit line, in order."""
        said = {"action": str(action), "outcome": str(outcome), "release": release,
                "detail": _short(detail)[:PART_MAX], **extra}
        self.parts.append({k: v for k, v in said.items() if v not in (None, "", {}, [])})

    def unanswered(self, node: str, why: str) -> None:
        """A body found `node` gone mid-command: the audit line names it and is not written there (a write
        to a dead connection would hold the outcome up by its whole timeout)."""
        self.unreachable.setdefault(node, why)

    def reread(self) -> ClusterState:
        """The state read again (after a body this operation ran changed the cluster); no new connection."""
        self.state = read_state(self.cluster, [c for c in self.alive if c.is_open], self.unreachable)
        return self.state

    # ---- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> "Operation":
        try:
            self._open()
            if self.locking is Locking.REQUIRED or (self.locking is Locking.IF_HEAD_ANSWERS
                                                    and self.inventory.head not in self.unreachable):
                self._take_lock()
            elif self.locking is Locking.IF_HEAD_ANSWERS:
                self.events.warn(f"the head {self.inventory.head} is unreachable: going on without the deploy lock")
            self.state = read_state(self.cluster, self.alive, self.unreachable)
            if self._own_lock:
                self._repair()
            if self.outer is None and self.locking is not Locking.NONE:
                self._open_token = _OPEN.set({**_OPEN.get({}), _key(self.inventory): self})
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.cluster.renew_cancel()  # after Ctrl-C (or a lost lock) the audit line and the unlock are new work
            if exc is not None or self._said is not None or self.parts:
                self._audit(exc)
        finally:
            self._close()
        return False

    def _open(self) -> None:
        if self.outer is not None:  # its connections: those that answered it, still open
            self.alive = [c for c in self.outer.alive if c.is_open]
            self.unreachable = {**self.outer.unreachable,
                                **{c.name: "its connection was closed" for c in self.outer.alive if not c.is_open}}
        else:
            alive, failures = self.cluster.open_reachable()
            self.alive, self.unreachable = alive, {n: str(e) for n, e in failures.items()}
        alive = self.alive
        head = self.inventory.head
        missing = []
        if self.reach is Reach.ALL:
            missing = list(self.unreachable)
        elif self.reach is Reach.HEAD or self.locking is Locking.REQUIRED:
            missing = [head] if head in self.unreachable else []
        elif not alive:
            missing = list(self.unreachable)
        if missing:
            why = "; ".join(f"{n} is unreachable ({self.unreachable[n]})" for n in missing)
            needs = "every node" if self.reach is Reach.ALL else (
                "at least one node" if head not in missing else f"the head {head} (the deploy lock lives there)")
            if not alive:  # said first: nothing at all answered (a wrong inventory, the network, a VPN)
                needs = f"a node that answers, and no node of {self.inventory.cluster} does"
            raise OperationRefused(f"{self.action} needs {needs}: {why}; nothing was changed", missing)
        if self.outer is not None:
            return  # the outer operation named them
        for node, why in self.unreachable.items():
            self.events.warn(f"unreachable, left as it is: {why}", node)
        # which cluster the nodes say they are (refused when they say two), before any lock or state is read;
        # a command that will change the cluster gives it an identity when its head holds none
        identity.resolve(self.cluster, self.inventory, self.alive, write=self.locking is not Locking.NONE)

    def _take_lock(self) -> None:
        reused = held_lock(self.inventory)
        if reused is not None:
            self.lock = reused
            return
        lock = DeployLock(self.cluster.head, self.inventory, audit.command_line(), self.ttl, run_id=self.run_id)
        lock.acquire()
        self.lock, self._own_lock = lock, True
        held = dict(_HELD.get({}))
        held[_key(self.inventory)] = lock
        self._token = _HELD.set(held)
        report_takeover(self.cluster, self.inventory, self.events, lock)
        lock.start_refreshing()

    def _repair(self) -> None:
        """Under the lock: a node whose history copy is missing or older gets the newest copies back."""
        try:
            for line in store.repair(self.cluster, self.inventory, self.state.history):
                self.events.note(line)
        except Exception as exc:  # noqa: BLE001 - the command goes on; the copy stays behind, named
            self.events.warn(f"could not repair the release history: {exc}")

    def _audit(self, exc: BaseException | None) -> None:
        said = dict(self._said or {})
        if exc is not None:
            interrupted = isinstance(exc, (KeyboardInterrupt, Cancelled)) or getattr(exc, "interrupted", False)
            chain = cause_chain(exc)
            said["outcome"] = str(Outcome.INTERRUPTED if interrupted else said.get("outcome") or Outcome.FAILED)
            if said["outcome"] == str(Outcome.OK):
                said["outcome"] = str(Outcome.FAILED)
            said["detail"] = "; ".join(x for x in (said.get("detail"), chain[0]) if x)
            said["causes"] = chain
            said["nodes"] = {**node_reasons(exc), **(said.get("nodes") or {})}
        if self.unreachable:
            said["nodes"] = {**{n: f"unreachable: {w}" for n, w in self.unreachable.items()}, **(said.get("nodes") or {})}
        if not said.get("nodes"):
            said.pop("nodes", None)
        if self.parts:
            said["parts"] = self.parts
        outcome, detail, release = said.pop("outcome"), said.pop("detail", ""), said.pop("release", None)
        if self.outer is not None:  # one line per command: the outer operation's
            for part in said.pop("parts", []):
                self.outer.parts.append(part)
            said.pop("causes", None)
            self.outer.part(self.action, outcome, detail, release=release,
                            nodes=sorted(said.get("nodes") or {}) or None)
            return
        targets = [c for c in self.alive if c.is_open and c.name not in self.unreachable]
        missed = audit.append(self.cluster, self.inventory,
                              _fit(audit.entry(self.action, outcome, release=release, detail=detail, **said)), targets)
        for node, why in missed.items():
            self.events.warn(f"audit line not written: {why}", node)

    def _close(self) -> None:
        if self._open_token is not None:
            _OPEN.reset(self._open_token)
            self._open_token = None
        try:
            if self._own_lock and self.lock is not None:
                try:
                    self.lock.release()
                except Exception as exc:  # noqa: BLE001 - it expires by itself; say so
                    self.events.warn(f"could not release the deploy lock ({exc}): it expires by itself, or "
                                     "`spark-deploy lock release --force`")
                if self._token is not None:
                    _HELD.reset(self._token)
                    self._token = None
        finally:
            if self.outer is None:  # a part leaves the outer operation's connections open
                self.cluster.close()


class Observation:
    """The read-only twin: open (whoever answers), read the state, close. No lock, no audit."""

    def __init__(self, inventory: Inventory, *, reach: Reach = Reach.ANY, what: str = "reading the cluster",
                 cluster_factory: Callable[[Inventory], Cluster] = Cluster):
        self.op = Operation(inventory, Events(), what, reach=reach, lock=Locking.NONE,
                            cluster_factory=cluster_factory)

    def __enter__(self) -> Operation:
        return self.op.__enter__()

    def __exit__(self, *exc) -> bool:
        self.op._close()
        return False
