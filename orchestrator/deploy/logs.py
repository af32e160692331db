"""Container logs from every node, prefixed by node; merged in time order, or followed live.

`--tail N` is N lines per node: docker's own `--tail` bounds each container's read, then a node's containers
(several recipes) are merged by the time docker stamped on each line (`--timestamps`) and cut to their last
N, and the nodes merged by that time."""

from __future__ import annotations

import re
import threading
from typing import Callable

from ..transport.group import Cluster
from ..transport.node import NodeConnection
from ..docker_cli.containers import current_of, ours as ours_on

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ?(.*)$")


def _argv(container: str, since: str | None, follow: bool, tail: str | None) -> list[str]:
    argv = ["docker", "logs", "--timestamps"]
    if since:
        argv += ["--since", since]
    if tail:
        argv += ["--tail", tail]
    if follow:
        argv.append("--follow")
    return argv + [container]


Row = tuple[str, str, str]  # (sortable timestamp, node, line)


def merged(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None, since: str | None,
           tail: int | None) -> list[Row]:
    """(timestamp, node, line) for every container of ours on `nodes`: the last `tail` lines of each node,
    all sorted by time."""
    containers = current(cluster, nodes, recipe)
    docker_tail = str(tail) if tail is not None else None

    def read(conn: NodeConnection) -> list[Row]:
        out = []
        for name in containers.get(conn.name, []):
            result = conn.run_script('"$@" 2>&1', *_argv(name, since, False, docker_tail), timeout=120)
            out += stamped(conn.name, result.stdout)
        return out

    return merge_nodes(cluster.each(read, nodes), tail)


def stamped(node: str, text: str) -> list[Row]:
    """`docker logs --timestamps` output as rows; a line without a stamp sorts first."""
    rows = []
    for line in text.splitlines():
        found = _STAMP.match(line)
        stamp, said = (found.group(1), found.group(2)) if found else ("", line)
        rows.append((_sortable(stamp), node, said))
    return rows


def merge_nodes(per_node: dict[str, list[Row]], tail: int | None) -> list[Row]:
    """Each node's rows in time order cut to its last `tail` (None: all), then every node's merged by time
    (a stable sort: lines of one instant keep their order)."""
    kept: list[Row] = []
    for rows in per_node.values():
        ordered = sorted(rows, key=lambda r: r[0])
        kept += ordered[-tail:] if tail is not None else ordered
    return sorted(kept, key=lambda r: r[0])


def current(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None) -> dict[str, list[str]]:
    """Names of our current containers per node (not the previous ones `up` keeps stopped)."""
    return cluster.each(lambda c: [x.name for x in current_of(ours_on(c, recipe))], nodes)


def _sortable(stamp: str) -> str:
    """Docker trims trailing zeros of the fraction; pad it so string order is time order."""
    if "." in stamp:
        whole, frac = stamp.rstrip("Z").split(".")
        return f"{whole}.{frac.ljust(9, '0')}Z"
    return stamp.replace("Z", ".000000000Z")


def follow(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None, since: str | None, tail: int | None,
           emit: Callable[[str, str], None], stop: threading.Event) -> None:
    """Stream every container's log until all end or `stop` is set; emit(node, line) as lines arrive (each
    container's last `tail` lines first)."""
    containers = current(cluster, nodes, recipe)
    tail_arg = str(tail) if tail is not None else None
    threads = []
    for conn in nodes:
        for name in containers.get(conn.name, []):
            def run(conn=conn, name=name):
                try:
                    conn.stream(_argv(name, since, True, tail_arg),
                                lambda line: emit(conn.name, _STAMP.sub(r"\2", line, count=1)), stop)
                except Exception as exc:  # noqa: BLE001 - said as a line, never a thread's traceback
                    if not stop.is_set():  # once stopping, the connection closed under it is ours
                        emit(conn.name, f"[spark-deploy: following {name}'s log failed: {exc}]")
            thread = threading.Thread(target=run, daemon=True)
            thread.start()
            threads.append(thread)
    for thread in threads:
        while thread.is_alive() and not stop.is_set():
            thread.join(0.5)
