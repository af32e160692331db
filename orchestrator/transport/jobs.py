"""A remote command in its own process group, so that it can be killed whole.

Closing an SSH channel does not stop the remote command: a `docker save | ssh | docker load` or a
`docker logs --follow` keeps running after the channel is gone. Every command is therefore started
under a small wrapper that makes it the leader of its own process group (sshd already calls setsid for
each session; the wrapper re-execs itself under `setsid` where that is not so) and prints the group ID
on a marker line before anything else. A second channel can then `kill -TERM -- -PGID`, then `-KILL`.
"""

from __future__ import annotations

import shlex
import socket
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import paramiko

if TYPE_CHECKING:
    from .node import NodeConnection

MARK = b"\x1eSDPGID "
# $0 is "sdjob", $1 this script again (for the setsid re-exec), then the command's argv.
WRAPPER = ('read -r _ _ _ _ g _ </proc/$$/stat; [ "$g" = "$$" ] || exec setsid bash -c "$1" sdjob "$@"; '
           'shift; printf "\\036SDPGID %s\\n" "$$"; exec "$@"')
# "$@" are negative group IDs: TERM, up to 1 s for them to go, then KILL.
KILL_SCRIPT = ('kill -TERM -- "$@" 2>/dev/null; i=0; while [ $i -lt 20 ]; do alive=; '
               'for g in "$@"; do kill -0 -- "$g" 2>/dev/null && alive=1; done; [ -z "$alive" ] && exit 0; '
               'sleep 0.05; i=$((i+1)); done; kill -KILL -- "$@" 2>/dev/null; exit 0')
MARK_GRACE = 2.0  # after a cancel, how long the group ID is still awaited so the command can be killed
MARK_TIMEOUT = 15.0  # the wrapper prints its group before running anything: this only covers a slow node


def wrapped(argv: Sequence[str]) -> list[str]:
    """argv that runs `argv` in its own process group after printing the group's marker line."""
    return ["bash", "-c", WRAPPER, "sdjob", WRAPPER, *argv]


def command_line(argv: Sequence[str]) -> str:
    return shlex.join(wrapped(argv))


class RemoteJob:
    """One command on one channel: channel-like (recv, recv_stderr, send, sendall, shutdown_write,
    recv_exit_status, close) with the marker stripped, plus `kill()` that ends its whole process group.

    `close()` kills the group first unless the command has exited, and frees the connection's channel slot.
    """

    def __init__(self, conn: "NodeConnection", argv: Sequence[str], channel: paramiko.Channel,
                 release: Callable[["RemoteJob"], None], *, shield: bool = False):
        self.conn, self.argv, self.channel = conn, tuple(argv), channel
        self.shield = shield  # cleanup work: runs on after the cancel token is set
        self.pgid: int | None = None
        self._pushback = b""
        self._release = release
        self._closed = False
        self.claimed = False  # a connection-wide killer has taken over killing this job's group
        self._lock = threading.Lock()

    # ---- start -----------------------------------------------------------------------------------
    def read_marker(self, deadline: float | None) -> None:
        """Read the wrapper's first line (the group ID); anything else is kept for the first recv()."""
        head = b""
        stop = time.monotonic() + MARK_TIMEOUT if deadline is None else min(deadline, time.monotonic() + MARK_TIMEOUT)
        self.channel.settimeout(0.1)
        cancelled_at: float | None = None
        while b"\n" not in head:
            if time.monotonic() >= stop:
                break
            if not self.shield and self.conn.cancel.is_set():
                # The command may already run: learn its group first (briefly), so close() can kill it.
                cancelled_at = cancelled_at or time.monotonic()
                if time.monotonic() - cancelled_at > MARK_GRACE:
                    break
            try:
                chunk = self.channel.recv(4096)
            except socket.timeout:
                continue
            if not chunk:
                break
            head += chunk
            if not MARK.startswith(head[:len(MARK)]):
                break
        if head.startswith(MARK) and b"\n" in head:
            line, _, rest = head.partition(b"\n")
            try:
                self.pgid = int(line[len(MARK):].strip())
            except ValueError:
                self.pgid = None
            head = rest
        self._pushback = head
        self.channel.settimeout(None)
        if not self.shield:
            self.conn.cancel.check()

    # ---- channel-like ----------------------------------------------------------------------------
    def settimeout(self, timeout: float | None) -> None:
        self.channel.settimeout(timeout)

    def recv(self, size: int) -> bytes:
        if self._pushback:
            data, self._pushback = self._pushback[:size], self._pushback[size:]
            return data
        return self.channel.recv(size)

    def recv_stderr(self, size: int) -> bytes:
        return self.channel.recv_stderr(size)

    def send(self, data: bytes) -> int:
        return self.channel.send(data)

    def sendall(self, data: bytes) -> None:
        self.channel.sendall(data)

    def shutdown_write(self) -> None:
        self.channel.shutdown_write()

    def exit_status_ready(self) -> bool:
        return self.channel.exit_status_ready()

    def recv_exit_status(self) -> int:
        return self.channel.recv_exit_status()

    @property
    def finished(self) -> bool:
        """The remote command has exited (its status arrived): nothing left to kill."""
        return self.channel.exit_status_ready()

    # ---- ending ----------------------------------------------------------------------------------
    def kill(self) -> None:
        """End the remote process group (TERM, then KILL after 1 s) and close the channel."""
        self.close(kill=True)

    def close(self, kill: bool = True) -> None:
        """Close the channel and free its slot; first kill the group (`kill`) unless it has exited or a
        connection-wide killer has claimed it. Safe to call from several threads and more than once."""
        if kill and self.pgid is not None and not self._closed and not self.finished and not self.claimed:
            self.conn.kill_groups([self.pgid])
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self.channel.close()
        finally:
            self._release(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "RemoteJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def received(job: "RemoteJob", recv: Callable[[int], bytes], size: int = 65536) -> Iterator[bytes]:
    """What `recv` (a job's recv or recv_stderr) returns, until EOF, a dead channel, or the job closed while
    waiting: the passive reader every background drain of a job's output shares."""
    while True:
        try:
            chunk = recv(size)
        except socket.timeout:
            if job.closed:
                return
            continue
        except (OSError, EOFError):
            return
        if not chunk:
            return
        yield chunk
