"""One SSH connection per node (Fabric over paramiko), host keys verified, every argv quoted.

Commands are argv lists; they are joined with `shlex.join` here and only here, so no caller can build
a shell string by hand. Secrets are written with `put_secret` (SFTP, mode 0600), never passed in argv.
Every command runs in its own remote process group (see jobs.py), at most `max_channels` at once
(OpenSSH's MaxSessions is 10), and is killed as a group on a timeout, an interrupt or the cancel token.
"""

from __future__ import annotations

import logging
import os
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import paramiko
from fabric import Connection

from ..config.inventory import Inventory, Node
from .cancel import Cancelled, CancelToken
from .jobs import KILL_SCRIPT, RemoteJob, command_line, received
from .result import NodeError, NodeTimeout, NodeUnreachable, Result, drain

__all__ = ["NodeConnection", "NodeError", "NodeTimeout", "NodeUnreachable", "Result", "SSHTarget", "drain"]

# paramiko's transport thread logs a failed handshake (a reset, an EOF) with its whole traceback through
# logging's last-resort stderr handler, before our one-line NodeUnreachable. The failure is said once, by
# us; `--debug` attaches a real handler (cli/common.set_debug).
logging.getLogger("paramiko").addHandler(logging.NullHandler())

CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_CHANNELS = 8  # sshd refuses an 11th session per connection by default (MaxSessions 10)
CONTROL_CHANNELS = 2  # kept free of the bound above for kills
KILL_TIMEOUT = 5.0
KILLER_JOIN = 3.0
SESSION_RETRY = 10.0  # seconds a refused channel open is retried (see _open_session)
STEP = 0.1  # how often a blocked read looks at the clock and the cancel token


def _closed_in_handshake(exc: BaseException) -> bool:
    """The peer accepted TCP and then closed or reset before speaking SSH (paramiko: 'Error reading SSH
    protocol banner', caused by an EOFError or a reset)."""
    cause = exc.__cause__ or exc.__context__
    return "protocol banner" in str(exc) or isinstance(cause, (EOFError, ConnectionResetError))


def _handshake_closed(where: str, exc: BaseException) -> str:
    what = "reset" if isinstance(exc, ConnectionResetError) or isinstance(exc.__context__, ConnectionResetError) \
        else "closed"
    return (f"{where} accepted the connection, then {what} it during the SSH handshake: is sshd (and not another "
            "service) listening on that port, and does it allow this address (MaxStartups, tcp wrappers)?")


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
    """A live, reused SSH session to one node. Unknown host keys are refused (RejectPolicy).

    `cancel` is shared by the connections of one cluster: setting it kills every in-flight command."""

    def __init__(self, target: SSHTarget, *, cancel: CancelToken | None = None,
                 max_channels: int = DEFAULT_MAX_CHANNELS, session_retry: float = SESSION_RETRY):
        self.target = target
        self.name = target.node
        kwargs = {"look_for_keys": target.key is None, "allow_agent": target.key is None,
                  "timeout": CONNECT_TIMEOUT, "banner_timeout": CONNECT_TIMEOUT, "auth_timeout": CONNECT_TIMEOUT}
        if target.key:
            kwargs["key_filename"] = target.key
        self._conn = Connection(host=target.host, user=target.user, port=target.port, connect_kwargs=kwargs)
        self.cancel = cancel or CancelToken()
        self.max_channels = max_channels
        self.session_retry = session_retry
        self._slots = threading.BoundedSemaphore(max_channels)
        self._control = threading.BoundedSemaphore(CONTROL_CHANNELS)
        self._lock = threading.Lock()
        self._jobs: set[RemoteJob] = set()
        self._groups: set[int] = set()  # process groups started on this node by someone else (adopt)
        self._in_use = 0
        self.peak_channels = 0  # the most channels this connection ever had open at once
        self._killers: list[threading.Thread] = []
        self.cluster = None  # the Cluster this connection belongs to, if any (set by Cluster)
        self._unsubscribe = self.cancel.on_set(self._on_cancel)

    def open(self) -> "NodeConnection":
        """Connect now (not lazily), so an unreachable node is named before anything starts."""
        client = self._conn.client
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if not os.path.exists(self.target.known_hosts):
            raise NodeUnreachable(self.name, f"known_hosts file {self.target.known_hosts} does not exist")
        client.load_host_keys(self.target.known_hosts)
        where = f"{self.target.user}@{self.target.host}:{self.target.port}"
        try:
            self._conn.open()
        except (EOFError, ConnectionResetError) as exc:
            raise NodeUnreachable(self.name, _handshake_closed(where, exc)) from None
        except paramiko.SSHException as exc:
            if _closed_in_handshake(exc):
                raise NodeUnreachable(self.name, _handshake_closed(where, exc)) from None
            if "not found in known_hosts" in str(exc) or "known_hosts" in str(exc):
                raise NodeUnreachable(self.name, f"host key of {self.target.host} is not in {self.target.known_hosts}; "
                                                 "refusing to connect (verify its fingerprint, then add it)") from None
            raise NodeUnreachable(self.name, f"SSH to {self.target.user}@{self.target.host}:{self.target.port} failed: {exc}") from None
        except (OSError, socket.timeout) as exc:
            raise NodeUnreachable(self.name, f"cannot reach {self.target.host}:{self.target.port}: {exc.strerror or exc}") from None
        return self

    @property
    def is_open(self) -> bool:
        return bool(self._conn.is_connected)

    @property
    def transport(self) -> paramiko.Transport:
        transport = self._conn.client.get_transport()
        if transport is None or not transport.is_active():
            raise NodeUnreachable(self.name, "the SSH connection is closed")
        return transport

    # ---- channel slots -----------------------------------------------------------------------
    def _acquire(self, deadline: float | None, shield: bool) -> None:
        while True:
            if not shield:
                self.cancel.check()
            wait = STEP if deadline is None else min(STEP, deadline - time.monotonic())
            if wait <= 0:
                raise NodeTimeout(self.name, f"no free SSH channel (all {self.max_channels} busy) before the deadline")
            if self._slots.acquire(timeout=wait):
                break
        with self._lock:
            self._in_use += 1
            self.peak_channels = max(self.peak_channels, self._in_use)

    def _open_session(self) -> paramiko.Channel:
        """Open a session channel. sshd frees a closed session only on its next loop turn, so an open
        right after a close can be refused although we hold fewer than MaxSessions: retried briefly."""
        delay, give_up = 0.01, time.monotonic() + self.session_retry
        while True:
            try:
                return self.transport.open_session(timeout=CONNECT_TIMEOUT)
            except paramiko.ChannelException as exc:
                if time.monotonic() + delay > give_up:
                    raise NodeUnreachable(self.name, f"sshd refused a channel: {exc}") from None
            except NodeUnreachable:
                raise
            except paramiko.SSHException as exc:
                # paramiko says only "Unable to open channel." when sshd refused without a reason code:
                # the same refusal as above (seen at MaxSessions under load), so retried the same way
                refused = "Unable to open channel" in str(exc) and self.transport.is_active()
                if not refused or time.monotonic() + delay > give_up:
                    raise NodeUnreachable(self.name, f"cannot open a channel: {exc}") from None
            except (EOFError, OSError) as exc:
                raise NodeUnreachable(self.name, f"cannot open a channel: {exc}") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _release(self) -> None:
        with self._lock:
            self._in_use -= 1
        self._slots.release()

    def _release_job(self, job: RemoteJob) -> None:
        with self._lock:
            self._jobs.discard(job)
        self._release()

    def _start(self, argv: Sequence[str], *, deadline: float | None, shield: bool,
               combine_stderr: bool = False) -> RemoteJob:
        self._acquire(deadline, shield)
        try:
            channel = self._open_session()
        except BaseException:
            self._release()
            raise
        job = RemoteJob(self, argv, channel, self._release_job, shield=shield)
        with self._lock:
            self._jobs.add(job)
        try:
            if not shield:
                self.cancel.check()  # set between the check above and the registration: the killer missed it
            if combine_stderr:
                channel.set_combine_stderr(True)
            channel.exec_command(command_line(argv))
            job.read_marker(deadline)
        except BaseException:
            job.close()
            raise
        return job

    # ---- commands ----------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float | None = 60, idle_timeout: float | None = None,
            check: bool = False, shield: bool = False) -> Result:
        """Run one command (argv, quoted here) and collect its output.

        `timeout` is a deadline for the whole command, `idle_timeout` a bound on silence (no output);
        past either the remote process group is killed and NodeTimeout raised. `shield=True` is for
        cleanup: it runs even after the cancel token is set (give it a timeout)."""
        command = shlex.join(argv)
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self._start(argv, deadline=deadline, shield=shield)
        try:
            stdout, stderr, code = self._collect(job, command, deadline, timeout, idle_timeout, shield)
        finally:
            job.close()  # kills the group unless the command has exited
        result = Result(self.name, tuple(argv), code, stdout.decode(errors="replace"), stderr.decode(errors="replace"))
        return result.check() if check else result

    def _collect(self, job: RemoteJob, command: str, deadline: float | None, timeout: float | None,
                 idle_timeout: float | None, shield: bool) -> tuple[bytes, bytes, int]:
        out, err = bytearray(), bytearray()
        last = [time.monotonic()]

        def read_stderr() -> None:
            for chunk in received(job, job.recv_stderr):
                err.extend(chunk)
                last[0] = time.monotonic()

        def overdue() -> None:
            now = time.monotonic()
            if not shield and self.cancel.is_set():
                raise Cancelled(self.cancel.reason or "cancelled")
            if deadline is not None and now >= deadline:
                raise NodeTimeout(self.name, f"`{command}` did not finish within {timeout:g} s (killed)")
            if idle_timeout is not None and now - last[0] >= idle_timeout:
                raise NodeTimeout(self.name, f"`{command}` printed nothing for {idle_timeout:g} s (killed)")

        job.settimeout(STEP)
        reader = threading.Thread(target=read_stderr, name=f"stderr-{self.name}", daemon=True)
        reader.start()
        while True:
            try:
                chunk = job.recv(65536)
            except socket.timeout:
                overdue()
                continue
            if not chunk:
                break
            out.extend(chunk)
            last[0] = time.monotonic()
        while reader.is_alive():
            reader.join(STEP)
            overdue()
        while not job.channel.status_event.wait(STEP):
            if job.channel.closed:
                break
            overdue()
        code = job.channel.exit_status if job.channel.status_event.is_set() else -1
        if code == -1 and not shield and self.cancel.is_set():
            raise Cancelled(self.cancel.reason or "cancelled")
        return bytes(out), bytes(err), code

    def run_script(self, script: str, *args: str, **kwargs) -> Result:
        """Run a fixed bash script whose variable parts arrive as "$1", "$2"... (never spliced in).

        For pipes and redirections only; `script` must be a constant written in this code base."""
        return self.run(["bash", "-c", script, "bash", *args], **kwargs)

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None], stop: threading.Event | None = None) -> int:
        """Run a long command (e.g. `docker logs -f`), calling `on_line` for each stdout/stderr line.

        Returns the exit code when the command ends, or -1 when `stop` or the cancel token is set; the
        remote command is killed (as a process group) whenever it has not ended by itself."""
        try:
            job = self._start(argv, deadline=None, shield=False, combine_stderr=True)
        except Cancelled:
            return -1
        try:
            job.settimeout(STEP)
            buffer = b""
            while True:
                if (stop is not None and stop.is_set()) or self.cancel.is_set():
                    return -1
                try:
                    chunk = job.recv(65536)
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
            while not job.channel.status_event.wait(STEP):
                if job.channel.closed or (stop is not None and stop.is_set()) or self.cancel.is_set():
                    return -1
            return job.channel.exit_status
        finally:
            job.close()

    def exec_channel(self, argv: Sequence[str], *, shield: bool = False) -> RemoteJob:
        """A channel-like job for byte pipes (docker save | docker load relays); close() it when done
        (that kills the remote command if it is still running and frees the channel slot)."""
        return self._start(argv, deadline=time.monotonic() + CONNECT_TIMEOUT + 5, shield=shield)

    def put_secret(self, path: str, content: str) -> None:
        """Write a secret file readable by the owner only; it is created 0600 before any byte is written."""
        directory = os.path.dirname(path)
        self.run(["mkdir", "-p", "-m", "0700", directory], check=True)
        self._acquire(time.monotonic() + 60, shield=False)
        try:
            sftp = paramiko.SFTPClient.from_transport(self.transport)
            try:
                with sftp.open(path, "w") as handle:
                    handle.chmod(0o600)
                    handle.write(content)
            finally:
                sftp.close()
        finally:
            self._release()

    def put_file(self, path: str, content: str, mode: int = 0o644) -> None:
        """Replace `path` atomically and durably: written beside it, fsynced, renamed over it, and the
        directory fsynced, so a reader (or a crash) sees the old file or the new one, never half of one."""
        directory = os.path.dirname(path)
        temp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        self.run(["mkdir", "-p", directory], check=True, timeout=30)
        self._acquire(time.monotonic() + 60, shield=False)
        try:
            sftp = paramiko.SFTPClient.from_transport(self.transport)
            try:
                with sftp.open(temp, "w") as handle:
                    handle.chmod(mode)
                    handle.write(content)
            finally:
                sftp.close()
        finally:
            self._release()
        self.run_script('sync -- "$1" && mv -f -- "$1" "$2" && sync -- "$3"', temp, path, directory,
                        check=True, timeout=30)

    # ---- killing -----------------------------------------------------------------------------
    def adopt(self, pgid: int) -> Callable[[], None]:
        """Kill process group `pgid` on this node too when cancelled or closed (it was started by a
        command elsewhere, e.g. the `docker load` end of a node-to-node copy); returns a release."""
        with self._lock:
            self._groups.add(pgid)
        return lambda: self._forget(pgid)

    def _forget(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    def kill_groups(self, pgids: Sequence[int], timeout: float = KILL_TIMEOUT) -> bool:
        """TERM, then KILL, the given remote process groups over a control channel; False if that failed."""
        if not pgids:
            return True
        if not self._control.acquire(timeout=timeout):
            return False
        try:
            channel = self.transport.open_session(timeout=timeout)
            with channel:
                channel.settimeout(timeout)
                channel.exec_command(shlex.join(["bash", "-c", KILL_SCRIPT, "sdkill", *(f"-{g}" for g in pgids)]))
                channel.shutdown_write()
                drain(channel)
                return channel.recv_exit_status() == 0
        except (NodeUnreachable, paramiko.SSHException, EOFError, OSError, socket.timeout):
            return False
        finally:
            self._control.release()

    def _in_flight(self, shielded: bool = False) -> tuple[list[RemoteJob], list[int]]:
        with self._lock:
            # A job whose group ID has not arrived yet is left to its own thread: it reads the ID, sees the
            # cancel and kills its group on close(); claiming it here would leave its command running.
            jobs = [j for j in self._jobs if (shielded or not j.shield) and j.pgid is not None]
            for job in jobs:
                job.claimed = True
            groups = list(self._groups)
            self._groups.clear()
        return jobs, [j.pgid for j in jobs if j.pgid is not None and not j.finished] + groups

    def use_cancel(self, token: CancelToken) -> None:
        """Follow a new token (the old one stays set: what it cancelled stays cancelled)."""
        self._unsubscribe()
        self.cancel = token
        self._unsubscribe = token.on_set(self._on_cancel)

    def _on_cancel(self, _reason: str) -> None:
        def kill_all() -> None:
            jobs, pgids = self._in_flight()
            self.kill_groups(pgids)
            for job in jobs:
                job.close(kill=False)

        killer = threading.Thread(target=kill_all, name=f"cancel-{self.name}", daemon=True)
        self._killers.append(killer)
        killer.start()

    def close(self) -> None:
        """Kill whatever still runs on the node for us (log streams, cancelled pipelines), then disconnect."""
        self._unsubscribe()
        for killer in self._killers:
            killer.join(KILLER_JOIN)
        jobs, pgids = self._in_flight(shielded=True)
        if pgids and self._conn.is_connected:
            self.kill_groups(pgids)
        for job in jobs:
            job.close(kill=False)
        self._conn.close()
