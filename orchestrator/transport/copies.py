"""One small file kept on every node (the maintenance baseline, the fabric baseline): each node's copy read in
one round trip, written to every given node at once. A node that does not answer is an entry in the result,
never an exception, so a caller can take the newest copy among those that did."""

from __future__ import annotations

from typing import Callable, TypeVar

from .group import Cluster, GroupError
from .node import NodeConnection

T = TypeVar("T")

READ = '[ -f "$1" ] && cat -- "$1" || echo MISSING'  # "$1" the file; MISSING when the node holds none


def read_copies(cluster: Cluster, conns: list[NodeConnection], path_of: Callable[[str], str],
                parse: Callable[[str], T]) -> dict[str, T | Exception]:
    """Per node, `parse` of what READ printed (a ValueError it raises is that node's entry), or the error that
    made the node not answer."""
    def one(conn: NodeConnection) -> T | Exception:
        result = conn.run_script(READ, path_of(conn.name), timeout=30, check=True)
        try:
            return parse(result.stdout)
        except ValueError as exc:
            return exc

    try:
        return cluster.each(one, conns)
    except GroupError as exc:
        return {**exc.results, **{n: RuntimeError(f"unreachable: {e}") for n, e in exc.failures.items()}}


def write_copies(cluster: Cluster, conns: list[NodeConnection], path_of: Callable[[str], str],
                 text: str) -> dict[str, str]:
    """`text` at each node's path (put_file: atomic, durable). Returns {node: why} where it was not written."""
    try:
        cluster.each(lambda conn: conn.put_file(path_of(conn.name), text), conns)
    except GroupError as exc:
        return {node: str(why) for node, why in exc.failures.items()}
    return {}
