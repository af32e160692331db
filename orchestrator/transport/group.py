"""Run one function on every node at once, collect every outcome, then raise once (Fabric's GroupResult shape)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from ..config.inventory import Inventory
from .node import NodeConnection, NodeError, SSHTarget

T = TypeVar("T")


class GroupError(Exception):
    """Some nodes failed. `failures` maps node name to its exception; `results` holds the others."""

    def __init__(self, failures: dict[str, BaseException], results: dict):
        self.failures, self.results = failures, results
        super().__init__("; ".join(str(exc) if isinstance(exc, NodeError) else f"{node}: {exc}"
                                   for node, exc in failures.items()))


def on_all(items: Iterable[T], fn: Callable[[T], object], name: Callable[[T], str]) -> dict:
    """Call fn(item) for all items in parallel; {name: result}, or GroupError naming every failed node."""
    items = list(items)
    if not items:
        return {}
    results, failures = {}, {}
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = {name(item): pool.submit(fn, item) for item in items}
        for key, future in futures.items():
            try:
                results[key] = future.result()
            except Exception as exc:  # collected, re-raised together below
                failures[key] = exc
    if failures:
        raise GroupError(failures, results)
    return results


class Cluster:
    """The connections of one inventory, in rank order (head first), opened together and reused."""

    def __init__(self, inventory: Inventory):
        self.inventory = inventory
        self.nodes: list[NodeConnection] = [NodeConnection(SSHTarget.of(inventory, n)) for n in inventory.ranked]

    def open(self) -> "Cluster":
        try:
            on_all(self.nodes, lambda c: c.open(), lambda c: c.name)
        except GroupError:
            self.close()
            raise
        return self

    def open_reachable(self) -> tuple[list[NodeConnection], dict[str, BaseException]]:
        """Open every node; for reports that go on without the ones that do not answer.

        Returns (open connections in rank order, {node: why it is unreachable})."""
        try:
            on_all(self.nodes, lambda c: c.open(), lambda c: c.name)
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

    def each(self, fn: Callable[[NodeConnection], object], nodes: list[NodeConnection] | None = None) -> dict:
        return on_all(self.nodes if nodes is None else nodes, fn, lambda c: c.name)

    def close(self) -> None:
        for conn in self.nodes:
            try:
                conn.close()
            except Exception:
                pass

    def __enter__(self) -> "Cluster":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()
