"""One SSH connection per node (Fabric over paramiko), host keys verified, every argv quoted.

Commands are argv lists; they are joined with `shlex.join` here and only here, so no caller can build
a shell string by hand. Secrets are written with `put_secret` (SFTP, mode 0600), never passed in argv.
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import paramiko
from fabric import Connection

from ..config.inventory import Inventory, Node

CONNECT_TIMEOUT = 10.0


class NodeError(Exception):
    """Something failed on one node; the message names the node and the cause."""

    def __init__(self, node: str, message: str):
        self.node = node
        super().__init__(f"{node}: {message}")


class NodeUnreachable(NodeError):
    pass


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


@dataclass(frozen=True)
class SSHTarget:
    """Everything needed to open one node's connection, resolved from the inventory."""

    node: str
    host: str
    user: str
    port: int
    key: str | None
    known_hosts: str

    @classmethod
    def of(cls, inventory: Inventory, node: Node) -> "SSHTarget":
        defaults, own = inventory.ssh, node.ssh
        return cls(
            node=node.name, host=node.address,
            user=(own and own.user) or defaults.user, port=(own and own.port) or defaults.port,
            key=(own and own.key) or defaults.key,
            known_hosts=defaults.known_hosts or str(Path("~/.ssh/known_hosts").expanduser()),
        )


class NodeConnection:
    """A live, reused SSH session to one node. Unknown host keys are refused (RejectPolicy)."""

    def __init__(self, target: SSHTarget):
        self.target = target
        self.name = target.node
        kwargs = {"look_for_keys": target.key is None, "allow_agent": target.key is None,
                  "timeout": CONNECT_TIMEOUT, "banner_timeout": CONNECT_TIMEOUT, "auth_timeout": CONNECT_TIMEOUT}
        if target.key:
            kwargs["key_filename"] = target.key
        self._conn = Connection(host=target.host, user=target.user, port=target.port, connect_kwargs=kwargs)

    def open(self) -> "NodeConnection":
        """Connect now (not lazily), so an unreachable node is named before anything starts."""
        client = self._conn.client
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if not os.path.exists(self.target.known_hosts):
            raise NodeUnreachable(self.name, f"known_hosts file {self.target.known_hosts} does not exist")
        client.load_host_keys(self.target.known_hosts)
        try:
            self._conn.open()
        except paramiko.SSHException as exc:
            if "not found in known_hosts" in str(exc) or "known_hosts" in str(exc):
                raise NodeUnreachable(self.name, f"host key of {self.target.host} is not in {self.target.known_hosts}; "
                                                 "refusing to connect (verify its fingerprint, then add it)") from None
            raise NodeUnreachable(self.name, f"SSH to {self.target.user}@{self.target.host}:{self.target.port} failed: {exc}") from None
        except (OSError, socket.timeout) as exc:
            raise NodeUnreachable(self.name, f"cannot reach {self.target.host}:{self.target.port}: {exc.strerror or exc}") from None
        return self

    @property
    def transport(self) -> paramiko.Transport:
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise NodeUnreachable(self.name, "the SSH connection is closed")
        return transport

    def run(self, argv: Sequence[str], *, timeout: float | None = 60, check: bool = False) -> Result:
        """Run one command (argv, quoted here) and collect its output."""
        command = shlex.join(argv)
        try:
            channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        except paramiko.SSHException as exc:
            raise NodeUnreachable(self.name, f"cannot open a channel: {exc}") from None
        with channel:
            channel.settimeout(timeout)
            channel.exec_command(command)
            channel.shutdown_write()
            try:
                stdout, stderr = drain(channel)
            except socket.timeout:
                raise NodeError(self.name, f"`{command}` did not finish within {timeout} s") from None
            code = channel.recv_exit_status()
        result = Result(self.name, tuple(argv), code, stdout.decode(errors="replace"), stderr.decode(errors="replace"))
        return result.check() if check else result

    def run_script(self, script: str, *args: str, **kwargs) -> Result:
        """Run a fixed bash script whose variable parts arrive as "$1", "$2"... (never spliced in).

        For pipes and redirections only; `script` must be a constant written in this code base."""
        return self.run(["bash", "-c", script, "bash", *args], **kwargs)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None], stop: threading.Event | None = None) -> int:
        """Run a long command (e.g. `docker logs -f`), calling `on_line` for each stdout/stderr line.

        Returns the exit code when the command ends or `stop` is set (then -1)."""
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.set_combine_stderr(True)
        channel.exec_command(shlex.join(argv))
        channel.settimeout(0.2)
        buffer = b""
        try:
            while True:
                if stop is not None and stop.is_set():
                    return -1
                try:
                    chunk = channel.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    on_line(line.decode(errors="replace").rstrip("\r"))
            if buffer:
                on_line(buffer.decode(errors="replace"))
            return channel.recv_exit_status()
        finally:
            channel.close()

    def exec_channel(self, argv: Sequence[str]) -> paramiko.Channel:
        """A raw channel for byte pipes (docker save | docker load relays)."""
        channel = self.transport.open_session(timeout=CONNECT_TIMEOUT)
        channel.exec_command(shlex.join(argv))
        return channel

    def put_secret(self, path: str, content: str) -> None:
        """Write a secret file readable by the owner only; it is created 0600 before any byte is written."""
        directory = os.path.dirname(path)
        self.run(["mkdir", "-p", "-m", "0700", directory], check=True)
        with self._conn.sftp() as sftp:
            with sftp.open(path, "w") as handle:
                handle.chmod(0o600)
                handle.write(content)

    def close(self) -> None:
        self._conn.close()


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
