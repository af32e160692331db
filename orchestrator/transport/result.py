"""What a remote command gives back, and the errors that name the node they happened on."""

from __future__ import annotations

import shlex
import socket
import threading
from dataclasses import dataclass

import paramiko


class NodeError(Exception):
    """Something failed on one node; the message names the node and the cause."""

    def __init__(self, node: str, message: str):
        self.node = node
        super().__init__(f"{node}: {message}")


class NodeUnreachable(NodeError):
    pass


class NodeTimeout(NodeError):
    """A command ran past its deadline (`timeout`) or printed nothing for `idle_timeout`; it was killed."""


@dataclass(frozen=True)
class Result:
    node: str
    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self) -> "Result":
        if not self.ok:
            tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-5:]
            raise NodeError(self.node, f"`{shlex.join(self.argv)}` exited {self.exit_code}: " + " | ".join(tail))
        return self


def drain(channel: paramiko.Channel) -> tuple[bytes, bytes]:
    """Read stdout and stderr until both end; stderr in a thread so neither window can fill and block."""
    err = bytearray()

    def read_stderr() -> None:
        try:
            while chunk := channel.recv_stderr(65536):
                err.extend(chunk)
        except socket.timeout:
            pass

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out = bytearray()
    while chunk := channel.recv(65536):
        out.extend(chunk)
    reader.join()
    return bytes(out), bytes(err)
