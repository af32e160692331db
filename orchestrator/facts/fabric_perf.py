"""Fabric speed facts: which measuring tools a node has, the constant commands that measure a link, and
pure parsers of what each tool prints (perftest's ib_write_bw/ib_write_lat, `iperf3 --json`, nccl-tests'
all_reduce_perf, and the built-in stream). Reach is fabric.py's; these say how fast (fabric/ runs them).

Parsers are tested on real published outputs (tests/data/fabric/, sources in its README)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from .core import fact


class Method(StrEnum):
    """How a link is measured, best first: RDMA needs perftest and profile roce; iperf3 needs iperf3 on both
    ends; the built-in stream needs only python3."""

    RDMA = "rdma"  # ib_write_bw (both directions) and ib_write_lat
    IPERF3 = "iperf3"  # iperf3 --json (TCP); latency: the kernel's mean TCP round trip it reports
    STREAM = "stream"  # python3 on both ends: a timed TCP stream and 1-byte round trips


TOOLS = ("ib_write_bw", "ib_write_lat", "iperf3", "python3")


TOOLS_SCRIPT = 'for t in "$@"; do command -v "$t" >/dev/null 2>&1 && echo "$t"; done; exit 0'


@fact("fabric_tools", TOOLS_SCRIPT, args=lambda _given: list(TOOLS))
def parse_tools(stdout: str) -> frozenset[str]:
    """The measuring tools on the node's PATH, one name a line."""
    return frozenset(line.strip() for line in stdout.splitlines() if line.strip() in TOOLS)


# ---- the commands (constants; "$1".. are the addresses, ports and bounds) -----------------------------
# Every server prints a line once it listens (its own words), so the client starts on that event, and
# runs under `timeout` so a lost controller cannot leave it behind (the transport kills it first anyway).
READY = {Method.IPERF3: "listening", Method.RDMA: "Waiting for client", Method.STREAM: "listening"}

# $1 bind address, $2 port, $3 seconds it may live
IPERF3_SERVER = 'exec timeout "$3" iperf3 -s -B "$1" -p "$2" --forceflush'
# $1 server address, $2 port, $3 seconds of traffic, $4 bound
IPERF3_CLIENT = 'exec timeout "$4" iperf3 -c "$1" -p "$2" -t "$3" --json'

# $1 bind address (unused by perftest: the HCA is bound), $2 port, $3 HCA, $4 GID index, $5 seconds it may live,
# $6 test (ib_write_bw | ib_write_lat), $7 seconds of traffic
RDMA_SERVER = ('if [ "$6" = ib_write_lat ]; then exec timeout "$5" ib_write_lat -d "$3" -x "$4" -F -p "$2" -n 1000; '
               'fi; exec timeout "$5" ib_write_bw -d "$3" -x "$4" -F --report_gbits -p "$2" -D "$7"')
# $1 server address, $2 port, $3 HCA, $4 GID index, $5 bound, $6 test, $7 seconds of traffic
RDMA_CLIENT = ('if [ "$6" = ib_write_lat ]; then exec timeout "$5" ib_write_lat -d "$3" -x "$4" -F -p "$2" -n 1000 '
               '"$1"; fi; exec timeout "$5" ib_write_bw -d "$3" -x "$4" -F --report_gbits -p "$2" -D "$7" "$1"')

_STREAM_PY = r'''
import json, socket, sys, time
role, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if role == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(4); print("listening", flush=True)
    while True:
        c, _ = s.accept()
        kind = c.recv(1)
        if kind == b"P":  # round trips: echo each byte back
            while (b := c.recv(1)):
                c.sendall(b)
        else:  # a stream: count it, answer the count when the sender is done
            n = 0
            while (b := c.recv(1 << 20)):
                n += len(b)
            c.sendall(str(n).encode())
        c.close()
seconds = float(sys.argv[4])
c = socket.create_connection((host, port), timeout=30); c.sendall(b"P")
t = time.perf_counter()
for _ in range(200):
    c.sendall(b"x"); c.recv(1)
rtt = (time.perf_counter() - t) / 200 * 1e6
c.close()
c = socket.create_connection((host, port), timeout=30); c.sendall(b"S")
buf = b"\0" * (1 << 20); t0 = time.perf_counter()
while time.perf_counter() - t0 < seconds:
    c.sendall(buf)
c.shutdown(socket.SHUT_WR)
got = int(c.recv(64) or b"0"); took = time.perf_counter() - t0
print(json.dumps({"bytes": got, "seconds": took, "rtt_us": rtt}))
'''
# $1 the program (STREAM_PROGRAM), then: $2 bind address, $3 port, $4 seconds it may live
STREAM_SERVER = 'exec timeout "$4" python3 -u -c "$1" server "$2" "$3"'
# $1 the program, then: $2 server address, $3 port, $4 seconds of traffic, $5 bound
STREAM_CLIENT = 'exec timeout "$5" python3 -c "$1" client "$2" "$3" "$4"'
STREAM_PROGRAM = _STREAM_PY  # a constant too, passed as an argument rather than spliced into the script


# ---- results ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bandwidth:
    gbit_s: float  # what arrived, in Gbit/s (10^9 bit/s)
    latency_us: float | None = None  # one-way (perftest) or round trip (TCP), as the method reports it
    detail: str = ""


class ToolError(ValueError):
    """The tool printed no result (it said why, or its output was cut)."""


_MB = 1 << 20  # perftest's MB/sec is 2^20 bytes/s; its Gb/sec (--report_gbits) is 10^9 bit/s


def parse_ib_write_bw(stdout: str) -> Bandwidth:
    """ib_write_bw's table -> the average of its last (largest message) row. The header says the unit:
    `BW average[Gb/sec]` (--report_gbits) or `BW average[MB/sec]`."""
    unit = None
    row = None
    for line in stdout.splitlines():
        m = re.search(r"BW average\[(Gb|MB)/sec\]", line)
        if m:
            unit = m.group(1)
            continue
        fields = line.split()
        if unit and len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            row = fields
    if unit is None or row is None:
        raise ToolError(f"ib_write_bw printed no result: {_last(stdout)}")
    avg = float(row[3])
    gbit = avg if unit == "Gb" else avg * _MB * 8 / 1e9
    return Bandwidth(gbit, None, f"{row[0]} B messages, {row[1]} iterations")


def parse_ib_write_lat(stdout: str) -> float:
    """ib_write_lat's table -> t_typical (the median, one way) in µs, of its last row."""
    column = None
    value = None
    for line in stdout.splitlines():
        if "t_typical[usec]" in line:
            column = line.split().index("t_typical[usec]")
            continue
        fields = line.split()
        if column is not None and len(fields) > column and fields[0].isdigit() and fields[1].isdigit():
            value = float(fields[column])
    if value is None:
        raise ToolError(f"ib_write_lat printed no result: {_last(stdout)}")
    return value


def parse_iperf3(stdout: str) -> Bandwidth:
    """`iperf3 --json` -> what the receiver got (end.sum_received), and the sender's mean TCP round trip."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        raise ToolError(f"iperf3 printed no JSON: {_last(stdout)}") from None
    if doc.get("error"):
        raise ToolError(f"iperf3: {doc['error']}")
    end = doc.get("end") or {}
    received = end.get("sum_received") or {}
    if "bits_per_second" not in received:
        raise ToolError("iperf3's JSON has no end.sum_received (the test did not finish)")
    senders = [s.get("sender") or {} for s in end.get("streams") or []]
    rtts = [s["mean_rtt"] for s in senders if s.get("mean_rtt")]
    retrans = (end.get("sum_sent") or {}).get("retransmits")
    return Bandwidth(received["bits_per_second"] / 1e9, sum(rtts) / len(rtts) if rtts else None,
                     f"{received.get('seconds', 0):.1f} s" + (f", {retrans} retransmits" if retrans is not None else ""))


def parse_stream(stdout: str) -> Bandwidth:
    """The built-in stream's JSON line -> bytes the server counted over the sender's time; round trip µs."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ToolError(f"the stream printed no result: {_last(stdout)}")
    doc = json.loads(lines[-1])
    if doc["seconds"] <= 0:
        raise ToolError("the stream took no time")
    return Bandwidth(doc["bytes"] * 8 / doc["seconds"] / 1e9, doc.get("rtt_us"),
                     f"{doc['bytes']} B in {doc['seconds']:.1f} s")


@dataclass(frozen=True)
class AllReduce:
    avg_busbw_gb_s: float  # `# Avg bus bandwidth` (GB/s, over every size)
    peak_busbw_gb_s: float  # the largest size's out-of-place busbw (GB/s): what a link sustains
    largest_bytes: int


_PREFIX = re.compile(r"^\[\d+,\d+\]<std(out|err)>:")  # mpirun --tag-output


def parse_all_reduce(stdout: str) -> AllReduce:
    """nccl-tests' all_reduce_perf -> the average bus bandwidth and the largest size's busbw. Columns are
    read from its header (`busbw` after `algbw`), so a version with a `root` column parses too."""
    cols: list[str] | None = None
    avg = None
    rows: list[tuple[int, float]] = []
    for raw in stdout.splitlines():
        line = _PREFIX.sub("", raw)
        if line.startswith("#") and "busbw" in line and "size" in line:
            cols = line.lstrip("#").split()
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", line)
        if m:
            avg = float(m.group(1))
            continue
        fields = line.split()
        if cols and fields and fields[0].isdigit() and len(fields) >= cols.index("busbw") + 1:
            rows.append((int(fields[0]), float(fields[cols.index("busbw")])))
    if avg is None or not rows:
        raise ToolError(f"all_reduce_perf printed no result: {_last(stdout)}")
    size, busbw = max(rows)
    return AllReduce(avg, busbw, size)


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(nothing)"
