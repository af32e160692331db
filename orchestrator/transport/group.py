"""Run one function on every node at once, collect every outcome, then raise once (Fabric's GroupResult shape).

Interruptible: the workers are plain daemon threads (a ThreadPoolExecutor joins every worker on exit,
so Ctrl-C would wait for a multi-GB copy to end). Ctrl-C in the main thread, or the cancel token, makes
the call return within `grace` seconds: the token is set (which kills the remote work), the workers get
that long to clean up after themselves, and the interrupt is re-raised (or `Cancelled` raised).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Protocol, TypeVar

from ..bugs import is_bug, unexpected
from ..config.inventory import Inventory
from .cancel import Cancelled, CancelToken, interrupt_reason
from .node import DEFAULT_MAX_CHANNELS, SESSION_RETRY, NodeConnection, NodeError, SSHTarget

T = TypeVar("T")
CANCEL_GRACE = 1.5  # seconds the workers get, once cancelled, to kill and clean up before we return
POLL = 0.1


class GroupError(Exception):
    """Some nodes failed. `failures` maps node name to its exception; `results` holds the others."""

    def __init__(self, failures: dict[str, BaseException], results: dict):
        self.failures, self.results = failures, results
        super().__init__("; ".join(str(exc) if isinstance(exc, NodeError) else f"{node}: {_said(exc)}"
                                   for node, exc in failures.items()))


def _said(exc: BaseException) -> str:
    """A node's failure in words; a bug is named by its type (a KeyError's text is only the key)."""
    return unexpected(exc) if is_bug(exc) else str(exc)


def on_all(items: Iterable[T], fn: Callable[[T], object], name: Callable[[T], str], *,
           cancel: CancelToken | None = None, grace: float = CANCEL_GRACE) -> dict:
    """Call fn(item) for all items in parallel; {name: result}, or GroupError naming every failed node.

    With `cancel`: a KeyboardInterrupt here sets it and is re-raised; the token set elsewhere raises
    Cancelled; either way within `grace` s, whether or not every worker has finished."""
    items = list(items)
    if not items:
        return {}
    if cancel is None:  # connections of one cluster carry its token
        tokens = {id(t): t for t in (getattr(i, "cancel", None) for i in items) if isinstance(t, CancelToken)}
        cancel = next(iter(tokens.values())) if len(tokens) == 1 else None
    keys = [name(item) for item in items]
    outcomes: dict[str, tuple[bool, object]] = {}
    changed = threading.Condition()

    def work(key: str, item: T) -> None:
        try:
            outcome: tuple[bool, object] = (True, fn(item))
        except BaseException as exc:  # noqa: BLE001 - collected, re-raised together below
            outcome = (False, exc)
        with changed:
            outcomes[key] = outcome
            changed.notify_all()

    def wake(_reason: str) -> None:
        with changed:
            changed.notify_all()

    unsubscribe = cancel.on_set(wake) if cancel is not None else (lambda: None)
    try:
        try:  # the starts too: a Ctrl-C between two of them must set the token for the ones already running
            for key, item in zip(keys, items):
                threading.Thread(target=work, args=(key, item), name=f"on-all-{key}", daemon=True).start()
            with changed:
                while len(outcomes) < len(keys) and not (cancel is not None and cancel.is_set()):
                    changed.wait(POLL)  # bounded: a simulated interrupt (no real signal) is seen too
        except KeyboardInterrupt as exc:
            if cancel is not None:
                cancel.set(interrupt_reason(exc))
                _settle(changed, outcomes, len(keys), grace)
            raise
        if len(outcomes) < len(keys):  # the token was set while workers still ran
            _settle(changed, outcomes, len(keys), grace)
            if len(outcomes) < len(keys):
                raise Cancelled(cancel.reason or "cancelled")
    finally:
        unsubscribe()
    results = {k: v for k, (ok, v) in outcomes.items() if ok}
    failures = {k: v for k, (ok, v) in outcomes.items() if not ok}
    if failures and cancel is not None and cancel.is_set() and any(isinstance(e, Cancelled) for e in failures.values()):
        raise Cancelled(cancel.reason or "cancelled")
    for exc in failures.values():
        if isinstance(exc, KeyboardInterrupt):
            raise exc
    if failures:
        raise GroupError(failures, results)
    return results


def _settle(changed: threading.Condition, outcomes: dict, count: int, grace: float) -> None:
    """Give cancelled workers up to `grace` seconds to finish (they kill and clean up)."""
    deadline = time.monotonic() + grace
    with changed:
        while len(outcomes) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            changed.wait(left)


class Connector(Protocol):
    """Makes one node's connection: the SSH NodeConnection by default; the unit tests pass an in-memory
    node (tests/memnode) so every command body runs against a model of Docker state, in milliseconds."""

    def __call__(self, target: SSHTarget, *, cancel: CancelToken, max_channels: int,
                 session_retry: float) -> NodeConnection: ...


class Cluster:
    """The connections of one inventory, in rank order (head first), opened together and reused.

    `cancel` is shared by every connection: set it (or Ctrl-C inside `each`) and every remote command
    of this cluster is killed. `connector` makes each connection (default: SSH)."""

    def __init__(self, inventory: Inventory, *, cancel: CancelToken | None = None,
                 max_channels: int = DEFAULT_MAX_CHANNELS, session_retry: float = SESSION_RETRY,
                 connector: Connector | None = None):
        self.inventory = inventory
        self.cancel = cancel or CancelToken()
        make = connector or NodeConnection
        self.nodes: list[NodeConnection] = [make(SSHTarget.of(inventory, n), cancel=self.cancel,
                                                 max_channels=max_channels, session_retry=session_retry)
                                            for n in inventory.ranked]
        for conn in self.nodes:
            conn.cluster = self

    def renew_cancel(self) -> CancelToken:
        """A fresh token for the work that follows a cancel — undoing what the cancelled work did. The
        cancelled commands were killed when the old token was set; without a new one, every later call
        (a container removal, a restart of the previous deployment) would be refused as cancelled."""
        if self.cancel.is_set():
            self.cancel = CancelToken()
            for conn in self.nodes:
                conn.use_cancel(self.cancel)
        return self.cancel

    def open(self) -> "Cluster":
        try:
            on_all(self.nodes, lambda c: c.open(), lambda c: c.name, cancel=self.cancel)
        except BaseException:
            self.close()
            raise
        return self

    def open_reachable(self) -> tuple[list[NodeConnection], dict[str, BaseException]]:
        """Open every node; for reports that go on without the ones that do not answer.

        Returns (open connections in rank order, {node: why it is unreachable})."""
        try:
            on_all(self.nodes, lambda c: c.open(), lambda c: c.name, cancel=self.cancel)
            return list(self.nodes), {}
        except GroupError as exc:
            return [c for c in self.nodes if c.name not in exc.failures], dict(exc.failures)

    @property
    def head(self) -> NodeConnection:
        return self.nodes[0]

    @property
    def peers(self) -> list[NodeConnection]:
        return self.nodes[1:]

    def __getitem__(self, name: str) -> NodeConnection:
        for conn in self.nodes:
            if conn.name == name:
                return conn
        raise KeyError(name)

    def by_address(self, host: str) -> NodeConnection | None:
        """The connection to the node that `host` names (its fabric IP, address or name), if it is ours."""
        for node in self.inventory.ranked:
            if host in (node.fabric_ip, node.address, node.name):
                return self[node.name]
        return None

    def each(self, fn: Callable[[NodeConnection], object], nodes: list[NodeConnection] | None = None) -> dict:
        return on_all(self.nodes if nodes is None else nodes, fn, lambda c: c.name, cancel=self.cancel)

    def close(self) -> None:
        """Close every connection in parallel; each first kills what still runs for us on its node."""
        threads = [threading.Thread(target=_quietly, args=(conn.close,), daemon=True) for conn in self.nodes]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "Cluster":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()


def _quietly(fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001 - closing is best effort; the kill inside reports nothing useful
        pass
