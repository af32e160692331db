"""The moving parts of an image copy: the node-to-node pipeline, its progress and stall watch, and
who is to blame when it fails.

The direct copy runs `WRITER | ssh DEST 'dd | docker load'` on the source, the writer being `docker save`,
`docker save | layer_filter.py` or layer_store.py (layers.sender picks). The destination's end reports, on
stderr lines tagged with a marker, its process group (so the controller can kill it there even when the
link between the nodes is down), the bytes it has received (dd's progress), and docker's own errors; the
source's end reports the writer's errors, what it left out, and the exit codes. Nothing is parsed out of
free text except docker's reason for a failure.
"""

from __future__ import annotations

import enum
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable

from ..transport.bulk_ssh import BULK_SSH_OPTS
from ..transport.cancel import Cancelled
from ..transport.jobs import MARK, RemoteJob, received, wrapped
from ..transport.node import NodeConnection, NodeError
from .images import docker_reason as cause

STALL_TIMEOUT = 30.0  # seconds without a byte received before a copy is declared stuck
STEP = 0.1
TAG = b"\x1eSD "
BYTES = re.compile(rb"(\d+) byte")  # dd's "\r123 bytes (...) copied": read up to each "s", so "123 byte"

# On the source. "$1" image ID, "$2" user@destination, "$3" the destination's command (quoted here),
# "$4" what writes the archive (layers.Producer: store, filter, or docker save), "$5" its python3 program
# (layer_store.py or layer_filter.py) and "$6" that program's plan.
SEND = r"""set -o pipefail
tag() { while IFS= read -r l; do printf '\036SD %s %s\n' "$1" "$l" >&2; done; }
to() { ssh -o BatchMode=yes -o StrictHostKeyChecking=yes """ + BULK_SSH_OPTS + r""" -o ConnectTimeout=10 "$1" "$2"; }
case "$4" in
  store)
    python3 -c "$5" sdstore "$6" 2> >(tag serr) | to "$2" "$3"
    s=("${PIPESTATUS[@]}" 0) ;;
  filter)
    docker save "$1" 2> >(tag serr) | python3 -c "$5" sdfilter "$6" 2> >(tag filter) | to "$2" "$3"
    s=("${PIPESTATUS[@]}"); s=("${s[0]}" "${s[2]}" "${s[1]}") ;;
  *)
    docker save "$1" 2> >(tag serr) | to "$2" "$3"
    s=("${PIPESTATUS[@]}" 0) ;;
esac
printf '\036SD status %s %s %s\n' "${s[0]}" "${s[1]}" "${s[2]}" >&2
[ "${s[0]}" = 0 ] && [ "${s[1]}" = 0 ] && [ "${s[2]}" = 0 ]"""

# On the source, for a relayed copy that leaves held layers out: "$1" image ID, "$2" program, "$3" plan.
SAVE_FILTERED = 'set -o pipefail\ndocker save "$1" | python3 -c "$2" sdfilter "$3"'


def source_argv(image_id: str, producer: str, program: str, plan: str) -> list[str]:
    """What writes the archive on the source for a relayed copy (the direct one has it in SEND)."""
    if producer == "store":
        return ["python3", "-c", program, "sdstore", plan]
    if producer == "filter":
        return ["bash", "-c", SAVE_FILTERED, "sdsave", image_id, program, plan]
    return ["docker", "save", image_id]

# On the destination (under the process-group wrapper, whose marker goes back on stdout).
RECEIVE = r"""set -o pipefail
tag() { while IFS= read -r l; do printf '\036SD %s %s\n' "$1" "$l" >&2; done; }
count() { while IFS= read -r -d s l; do case $l in *byte) printf '\036SD bytes %s\n' "${l//[$'\r\n']/ }" >&2 ;; esac; done; }
{ dd bs=1M status=progress 2> >(count); r=$?; printf '\036SD received %s\n' "$r" >&2; exit "$r"; } \
  | docker load 2> >(tag terr) >/dev/null"""


class Side(enum.Enum):
    SOURCE = "source"
    TARGET = "target"
    LINK = "link"  # between the two nodes: both are named


class TransferFailed(NodeError):
    """An image copy failed; `node` is the side that failed ("src → dst" when it is the link)."""

    def __init__(self, side: Side, source: str, target: str, message: str):
        self.side, self.source, self.target = side, source, target
        node = {Side.SOURCE: source, Side.TARGET: target}.get(side, f"{source} → {target}")
        super().__init__(node, message)


class TransferStalled(TransferFailed):
    """No byte arrived for `stall_timeout` seconds; both ends were stopped."""


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


class Stall:
    """Bytes moved, the progress callback, and the two reasons to stop waiting: cancel and no progress."""

    def __init__(self, src: NodeConnection, dst: NodeConnection | None, target: str, total: int,
                 progress: Callable[[int, int], None] | None, timeout: float):
        self.src, self.dst, self.target, self.total = src, dst, target, total
        self.progress, self.timeout = progress, timeout
        self.moved = 0
        self.left_out = 0  # bytes the source's layer filter kept off the link (held layers)
        self.last = time.monotonic()
        self.receiving = True

    def advance(self, count: int) -> None:
        self.moved += count
        self.last = time.monotonic()
        if self.progress:
            self.progress(self.moved, max(self.total, self.moved))

    def reached(self, moved: int) -> None:
        if moved > self.moved:
            self.advance(moved - self.moved)

    def received_all(self) -> None:
        """The stream is in; what is left (docker registering layers) is not bounded by the stall watch."""
        self.receiving = False

    @property
    def delivered(self) -> bool:
        """The target's engine may hold the whole stream: it said so, or it has counted at least the image's
        size (the end-of-stream line can still be on its way when a cancel lands)."""
        return not self.receiving or (self.total > 0 and self.moved >= self.total)

    def cancelled(self) -> None:
        """Raise Cancelled if either end's token is set (then a killed end is not a failure)."""
        for conn in (self.src, self.dst):
            if conn is not None and conn.cancel.is_set():
                raise Cancelled(conn.cancel.reason or "cancelled")

    def check(self, what: str) -> None:
        self.cancelled()
        if self.receiving and time.monotonic() - self.last > self.timeout:
            raise TransferStalled(Side.LINK, self.src.name, self.target,
                                  f"the image copy made no progress for {self.timeout:g} s ({_mb(self.moved)} of "
                                  f"about {_mb(self.total)} MB had arrived; {what}): the link between the nodes "
                                  "dropped or one end hung; both ends were stopped")


class Collector:
    """Reads a job's stderr in a thread (so neither window fills and blocks); keeps the last lines."""

    def __init__(self, job: RemoteJob):
        self._lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(job,), daemon=True)
        self._thread.start()

    def _read(self, job: RemoteJob) -> None:
        data = b""
        for chunk in received(job, job.recv_stderr):
            data = (data + chunk)[-16384:]
        self._lines = [line for line in data.decode(errors="replace").splitlines() if line.strip()]

    def lines(self) -> list[str]:
        self._thread.join(1.0)
        return list(self._lines)


def wait_exit(job: RemoteJob, watch: Stall) -> int:
    """The job's exit code (-1 when it was killed), watching the cancel token meanwhile."""
    while not job.channel.status_event.wait(STEP):
        if job.channel.closed:
            return -1
        watch.check("waiting for the command to end")
    return job.channel.exit_status


def left_out(lines: list[str]) -> tuple[int, int]:
    """The layer filter's last word (`left-out MEMBERS BYTES`), (0, 0) when it did not run or say it."""
    for line in reversed(lines):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "left-out" and all(p.isdigit() for p in parts[1:]):
            return int(parts[1]), int(parts[2])
    return 0, 0


def broken_pipe(lines: list[str], code: int | None = None) -> bool:
    """The writer failed only because its reader went away first (a consequence, not the cause)."""
    return code == 141 or any("broken pipe" in line.lower() for line in lines)


def truncated(lines: list[str]) -> bool:
    return any("unexpected eof" in line.lower() for line in lines)


class DirectCopy:
    """One node-to-node copy: start it on the source, watch it, kill both ends if it must stop."""

    def __init__(self, src: NodeConnection, dst: NodeConnection | None, target: str, total: int,
                 progress: Callable[[int, int], None] | None, stall_timeout: float):
        self.src, self.dst, self.target = src, dst, target
        self.watch = Stall(src, dst, target, total, progress, stall_timeout)
        self.target_pgid: int | None = None
        self._release: Callable[[], None] = lambda: None
        self.save_err: list[str] = []
        self.load_err: list[str] = []
        self.ssh_err: list[str] = []
        self.filter_err: list[str] = []
        self.left_out: tuple[int, int] = (0, 0)  # members, bytes the layer filter kept off the link
        self.status: tuple[int, int, int] | None = None  # docker save, ssh, the filter
        self.producer = "save"

    def run(self, image_id: str, destination: str, producer: str = "save", program: str = "", plan: str = "") -> int:
        """Move the image; `producer` (store | filter | save) with its python3 `program` and `plan` decide
        what the source writes (layers.sender)."""
        self.producer = producer
        remote = shlex.join(wrapped(["bash", "-c", RECEIVE, "sdrecv"]))
        job = self.src.exec_channel(["bash", "-c", SEND, "sdsend", image_id, destination, remote, producer, program,
                                     plan])
        try:
            job.shutdown_write()
            reader = threading.Thread(target=self._read_stdout, args=(job,), daemon=True)
            reader.start()
            job.settimeout(STEP)
            buffer = b""
            while True:
                self.watch.check(f"{self.target} received nothing more")
                try:
                    chunk = job.recv_stderr(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._line(line)
            self._line(buffer)
            # a cancel kills the source's end, which ends this stream too: that is not the target having it all
            self.watch.cancelled()
            self.watch.received_all()
            code = wait_exit(job, self.watch)
            reader.join(1.0)
        except BaseException:
            self._stop_both(job)
            raise
        finally:
            job.close()
            self._release()
        return self._judge(image_id, code)

    def _read_stdout(self, job: RemoteJob) -> None:
        data = b""
        for chunk in received(job, job.recv, 4096):
            data += chunk
            while b"\n" in data:
                line, _, data = data.partition(b"\n")
                if line.startswith(MARK) and self.target_pgid is None:
                    try:
                        self.target_pgid = int(line[len(MARK):].strip())
                    except ValueError:
                        continue
                    if self.dst is not None:
                        self._release = self.dst.adopt(self.target_pgid)

    def _line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        if not raw.startswith(TAG):
            self.ssh_err.append(raw.decode(errors="replace").strip())
            return
        kind, _, rest = raw[len(TAG):].partition(b" ")
        text = rest.decode(errors="replace").strip()
        if kind == b"bytes":
            counts = [int(n) for n in BYTES.findall(rest)]
            if counts:
                self.watch.reached(max(counts))
        elif kind == b"received":
            self.watch.received_all()
        elif kind == b"serr":
            said = left_out([text])
            if said != (0, 0):
                self.left_out = said
            else:
                self.save_err.append(text)
        elif kind == b"terr":
            self.load_err.append(text)
        elif kind == b"filter":
            said = left_out([text])
            if said != (0, 0):
                self.left_out = said
            else:
                self.filter_err.append(text)
        elif kind == b"status":
            parts = text.split()
            if len(parts) in (2, 3) and all(p.isdigit() for p in parts):
                self.status = (int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 0)

    def _stop_both(self, job: RemoteJob) -> None:
        """Kill the destination's end (over the controller's own connection to it) and the source's."""
        killer = None
        if self.dst is not None and self.target_pgid is not None:
            killer = threading.Thread(target=self.dst.kill_groups, args=([self.target_pgid],), daemon=True)
            killer.start()
        job.kill()
        if killer is not None:
            killer.join(6)

    def _judge(self, image_id: str, code: int) -> int:
        src, dst = self.src.name, self.target
        self.watch.cancelled()
        if self.status is None:
            raise TransferFailed(Side.LINK, src, dst, f"the copy to {dst} ended without reporting (exit {code})"
                                 + (f": {self.ssh_err[-1]}" if self.ssh_err else ""))
        save, ssh, kept = self.status
        if save == 0 and ssh == 0 and kept == 0:
            return self.watch.moved
        if ssh == 255:
            return self._fail(Side.LINK, f"{src} cannot send the image to {dst} over SSH: "
                                         f"{cause(self.ssh_err, ssh)}")
        if kept not in (0, 141) and not broken_pipe(self.filter_err, kept) and (ssh == 0 or truncated(self.load_err)):
            return self._fail(Side.SOURCE, f"the layer filter (python3) on {src} failed: {cause(self.filter_err, kept)}")
        source_first = save != 0 and not broken_pipe(self.save_err, save) and (truncated(self.load_err) or ssh == 0)
        if ssh != 0 and not source_first:
            return self._fail(Side.TARGET, f"cannot load the image sent from {src}: {cause(self.load_err, ssh)}")
        return self._fail(Side.SOURCE, f"{self.reading(image_id)} failed: {cause(self.save_err, save)}")

    def reading(self, image_id: str) -> str:
        if self.producer == "store":
            return f"reading {image_id[:19]} from the engine's layer store (as docker save would)"
        return f"docker save of {image_id[:19]}"

    def _fail(self, side: Side, message: str) -> int:
        raise TransferFailed(side, self.src.name, self.target, message)
