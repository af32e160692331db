"""Container logs from every node, prefixed by node; merged in time order, or followed live."""

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


def merged(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None, since: str | None,
           tail: str | None) -> list[tuple[str, str, str]]:
    """(timestamp, node, line) for every container of ours on `nodes`, sorted by time."""
    containers = current(cluster, nodes, recipe)

    def read(conn: NodeConnection) -> list[tuple[str, str, str]]:
        out = []
        for name in containers.get(conn.name, []):
            result = conn.run_script('"$@" 2>&1', *_argv(name, since, False, tail), timeout=120)
            for line in result.stdout.splitlines():
                found = _STAMP.match(line)
                stamp, text = (found.group(1), found.group(2)) if found else ("", line)
                out.append((_sortable(stamp), conn.name, text))
        return out

    found = cluster.each(read, nodes)
    return sorted((row for rows in found.values() for row in rows), key=lambda r: r[0])


def current(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None) -> dict[str, list[str]]:
    """Names of our current containers per node (not the previous ones `up` keeps stopped)."""
    return cluster.each(lambda c: [x.name for x in current_of(ours_on(c, recipe))], nodes)


def _sortable(stamp: str) -> str:
    """Docker trims trailing zeros of the fraction; pad it so string order is time order."""
    if "." in stamp:
        whole, frac = stamp.rstrip("Z").split(".")
        return f"{whole}.{frac.ljust(9, '0')}Z"
    return stamp.replace("Z", ".000000000Z")


def follow(cluster: Cluster, nodes: list[NodeConnection], recipe: str | None, since: str | None, tail: str | None,
           emit: Callable[[str, str], None], stop: threading.Event) -> None:
    """Stream every container's log until all end or `stop` is set; emit(node, line) as lines arrive."""
    containers = current(cluster, nodes, recipe)
    threads = []
    for conn in nodes:
        for name in containers.get(conn.name, []):
            def run(conn=conn, name=name):
                try:
                    conn.stream(_argv(name, since, True, tail),
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
