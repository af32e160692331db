"""Measure every pair of nodes over their fabric addresses: bandwidth both ways, and latency.

One pair and one direction at a time (two measurements at once would share the nodes' CPUs and the
link). For a direction src→dst a server starts on dst, bound to dst's fabric address; the client on src
starts when the server has said it listens (its own line, an event, never a sleep) and sends for
`seconds`. The server runs under the transport: it is killed when the direction is done, on Ctrl-C or
SIGTERM (the connection's cancel token and the stream's close kill its process group), and under
`timeout` on the node in case the controller itself is lost.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..config.inventory import Inventory
from ..facts import fabric_perf as fp
from ..facts.fabric_perf import Method
from ..releases.keys import cluster_key
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection
from .baseline import Direction, Figures, Link

DEFAULT_SECONDS = 5.0  # per direction: TCP is past its slow start well before that on a 200G link
PORT = 5201  # iperf3's own; the built-in stream and perftest use it too (one server at a time)
LISTEN_BOUND = 20.0  # seconds a server may take to say it listens
SLACK = 30.0  # a tool's bound on the node beyond its seconds of traffic


class MeasureError(Exception):
    """A link could not be measured (no tool, a server that never listened, a tool that printed no result)."""


def choose(tools: dict[str, frozenset[str]], profile: str) -> Method:
    """Pure: the best method every node can run. RDMA needs perftest on every node and profile roce."""
    def everywhere(*names: str) -> bool:
        return all(set(names) <= have for have in tools.values())

    if profile == "roce" and everywhere("ib_write_bw", "ib_write_lat"):
        return Method.RDMA
    if everywhere("iperf3"):
        return Method.IPERF3
    if everywhere("python3"):
        return Method.STREAM
    lacking = sorted(n for n, have in tools.items() if "python3" not in have)
    raise MeasureError(f"no way to measure the fabric: {', '.join(lacking)} has neither iperf3 nor python3; "
                       "install iperf3 there (`apt-get install iperf3`)")


def tools_of(cluster: Cluster, conns: list[NodeConnection]) -> dict[str, frozenset[str]]:
    try:
        found = cluster.each(lambda c: fp.parse_tools(c.run_script(fp.TOOLS_SCRIPT, *fp.TOOLS, timeout=30,
                                                                   check=True).stdout), conns)
    except GroupError as exc:
        raise MeasureError(f"could not look for the measuring tools: {exc}") from exc
    return found


def _hca(inventory: Inventory) -> tuple[str, str]:
    ic = inventory.interconnect
    first = (ic.hca or "").split(",")[0].lstrip("=").partition(":")[0]
    return first, str(ic.gid_index if ic.gid_index is not None else "")


@contextmanager
def _serving(conn: NodeConnection, argv: list[str], marker: str) -> Iterator[list[str]]:
    """A server on `conn` for the body's duration: entered once it printed `marker`; killed on the way out."""
    said: list[str] = []
    ready, ended, stop = threading.Event(), threading.Event(), threading.Event()

    def on_line(line: str) -> None:
        said.append(line)
        if marker in line:
            ready.set()

    def serve() -> None:
        try:
            conn.stream(argv, on_line, stop)
        except Exception as exc:  # noqa: BLE001 - said as the reason the server ended
            said.append(f"({exc})")
        finally:
            ended.set()
            ready.set()

    thread = threading.Thread(target=serve, name=f"fabric-server-{conn.name}", daemon=True)
    thread.start()
    try:
        if not ready.wait(LISTEN_BOUND):
            raise MeasureError(f"{conn.name}: the server did not listen within {LISTEN_BOUND:g} s "
                               f"({_tail(said)})")
        if ended.is_set() and not any(marker in line for line in said):
            raise MeasureError(f"{conn.name}: the server ended before it listened: {_tail(said)}")
        yield said
    finally:
        stop.set()
        thread.join(SLACK)


def _tail(lines: list[str]) -> str:
    shown = [line.strip() for line in lines if line.strip()]
    return "; ".join(shown[-3:])[:300] or "it printed nothing"


def _direction(src: NodeConnection, dst: NodeConnection, inventory: Inventory, method: Method, seconds: float,
               test: str = "ib_write_bw") -> fp.Bandwidth:
    """src sends to dst's fabric address; what dst received."""
    ip = inventory.node(dst.name).fabric_ip
    port, bound, secs = str(PORT), f"{seconds + SLACK:g}", f"{seconds:g}"
    if method is Method.RDMA:
        hca, gid = _hca(inventory)
        server = ["bash", "-c", fp.RDMA_SERVER, "bash", ip, port, hca, gid, bound, test, secs]
        client = [fp.RDMA_CLIENT, ip, port, hca, gid, bound, test, secs]
    elif method is Method.IPERF3:
        server = ["bash", "-c", fp.IPERF3_SERVER, "bash", ip, port, bound]
        client = [fp.IPERF3_CLIENT, ip, port, secs, bound]
    else:
        server = ["bash", "-c", fp.STREAM_SERVER, "bash", fp.STREAM_PROGRAM, ip, port, bound]
        client = [fp.STREAM_CLIENT, fp.STREAM_PROGRAM, ip, port, secs, bound]
    with _serving(dst, server, fp.READY[method]):
        result = src.run_script(*client, timeout=seconds + SLACK + 10)
    try:
        if method is Method.RDMA:
            if test == "ib_write_lat":
                return fp.Bandwidth(0.0, fp.parse_ib_write_lat(result.stdout))
            return fp.parse_ib_write_bw(result.stdout)
        return fp.parse_iperf3(result.stdout) if method is Method.IPERF3 else fp.parse_stream(result.stdout)
    except (fp.ToolError, ValueError, KeyError) as exc:
        why = exc if isinstance(exc, fp.ToolError) else f"unreadable output ({exc}); {result.stderr.strip()[-200:]}"
        raise MeasureError(f"{src.name}→{dst.name} ({method}): {why}") from exc


def measure(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection], seconds: float = DEFAULT_SECONDS,
            method: Method | None = None, progress: Callable[[str], None] = lambda _s: None) -> Figures:
    """Every pair of the given nodes (rank order), both directions and latency, by `method` (default: the
    best every node can run)."""
    if len(conns) < 2:
        raise MeasureError("a fabric needs two nodes to measure; the inventory reaches "
                           f"{', '.join(c.name for c in conns) or 'none'}")
    if method is None:
        method = choose(tools_of(cluster, conns), inventory.interconnect.profile)
    by_name = {c.name: c for c in conns}
    order = [n.name for n in inventory.ranked if n.name in by_name]
    links = []
    for a, b in itertools.combinations(order, 2):
        ca, cb = by_name[a], by_name[b]
        progress(f"{a}↔{b}: {method}, {seconds:g} s each way")
        forward = _direction(ca, cb, inventory, method, seconds)
        backward = _direction(cb, ca, inventory, method, seconds)
        latency = forward.latency_us
        if method is Method.RDMA:
            latency = _direction(ca, cb, inventory, method, seconds, test="ib_write_lat").latency_us
        links.append(Link(a=a, b=b, latency_us=latency, directions=(
            Direction(src=a, dst=b, gbit_s=forward.gbit_s, detail=forward.detail),
            Direction(src=b, dst=a, gbit_s=backward.gbit_s, detail=backward.detail))))
    return Figures(cluster=cluster_key(inventory), method=method, seconds=seconds, measured_at=time.time(),
                   links=links)
