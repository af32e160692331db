"""MemoryNode: a NodeConnection that answers from a node's model instead of over SSH.

The same interface the product uses (run, run_script, stream, put_file, put_secret, open, close, the
cancel token), so `Cluster(inventory, connector=world.connector)` runs every command body unchanged.
"""

from __future__ import annotations

import _thread
import threading
import time
from typing import Callable, Sequence

from orchestrator.transport.cancel import Cancelled, CancelToken
from orchestrator.transport.node import NodeUnreachable, Result, SSHTarget

from . import docker, facts, scripts
from .model import Node, World, stamp

STEP = 0.02  # how often a blocked stream looks at its stop event and the cancel token


class MemoryNode:
    def __init__(self, world: World, target: SSHTarget, *, cancel: CancelToken | None = None, **_limits):
        self.world, self.target, self.name = world, target, target.node
        self.model: Node = world.nodes[target.node]
        self.cancel = cancel or CancelToken()
        self.cluster = None
        self.peak_channels = 0
        self._open = False
        self.commands: list = []  # every argv / script constant sent, in order

    # ---- connection ---------------------------------------------------------------------------
    def open(self) -> "MemoryNode":
        self._reach()
        self._open = True
        return self

    @property
    def is_open(self) -> bool:
        return self._open and self.model.unreachable is None

    def close(self) -> None:
        self._open = False

    def use_cancel(self, token: CancelToken) -> None:
        self.cancel = token

    def _reach(self) -> None:
        if self.model.unreachable is not None:
            raise NodeUnreachable(self.name, f"cannot reach {self.target.host}:{self.target.port}: "
                                             f"{self.model.unreachable}")

    def _arrive(self, command, shield: bool) -> docker.Answer | None:
        """Every command: reachable? cancelled? a trap set by the test for this one (which may answer it
        instead of the engine: a refusal, an error)?"""
        self._reach()
        if not shield:
            self.cancel.check()
        self.commands.append(command)
        for trap in list(self.model.traps):
            matches, action = trap
            if matches(command):
                self.model.traps.remove(trap)
                return action(self, shield)
        return None

    # ---- commands -----------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, timeout: float | None = 60, idle_timeout: float | None = None,
            check: bool = False, shield: bool = False) -> Result:
        argv = list(argv)
        trapped = self._arrive(tuple(argv), shield)
        with self.world.changed:
            code, out, err = trapped or self._answer(argv)
        result = Result(self.name, tuple(argv), code, out, err)
        return result.check() if check else result

    def run_script(self, script: str, *args: str, **kwargs) -> Result:
        shield = kwargs.get("shield", False)
        trapped = self._arrive(script, shield)
        with self.world.changed:
            try:
                code, out, err = trapped or scripts.answer(self.model, script, args)
            except AssertionError as exc:
                self.world.unknown.append(str(exc))
                raise
        result = Result(self.name, ("bash", "-c", script, "bash", *args), code, out, err)
        return result.check() if kwargs.get("check") else result

    def _answer(self, argv: list[str]) -> docker.Answer:
        try:
            if argv[0] == "docker":
                return docker.answer(self.model, argv)
            if argv[0] == "systemctl":
                return self.model.systemd.systemctl(self.model, argv[1:])
            if argv == ["true"]:
                return 0, "", ""
            if argv[:2] == ["rm", "-f"]:
                for path in argv[3:] if argv[2:3] == ["--"] else argv[2:]:
                    self.model.files.pop(path, None)
                return 0, "", ""
            if argv[:2] == ["cat", "--"] and len(argv) == 3:  # coreutils' words for a missing file
                if argv[2] not in self.model.files:
                    return 1, "", f"cat: {argv[2]}: No such file or directory\n"
                return 0, self.model.files[argv[2]], ""
            if argv == ["cat", "/proc/meminfo"]:  # a Spark's, idle or with the sim recipe's 0.7 serving
                serving = any(c.running and c.ours for c in self.model.containers.values())
                name = "meminfo-sim-spark-serving-0.7.txt" if serving else "meminfo-sim-spark-idle.txt"
                return 0, (facts.SAMPLES / name).read_text(), ""
            if argv[:2] == ["mkdir", "-p"]:
                return 0, "", ""
            if argv[:2] == ["ss", "-Hltnpe"]:
                return 0, facts.listening(self.model), ""
            if argv[:2] == ["ss", "-Hltn"] and argv[2].startswith("sport = :"):
                port = int(argv[2].rsplit(":", 1)[1])
                listening = port in self.model.listening()
                return 0, f"LISTEN 0 4096 0.0.0.0:{port} 0.0.0.0:*\n" if listening else "", ""
            if argv[:5] == ["ss", "-Htn", "state", "established", "dst"]:
                addr, port = argv[5].rsplit(":", 1)
                joined = self.model.joined(addr, int(port))
                return 0, f"0 0 {self.model.fabric_ip}:41234 {addr}:{port}\n" if joined else "", ""
            if argv == ["pgrep", "-a", "-x", "earlyoom"]:
                return 1, "", ""
        except AssertionError as exc:
            self.world.unknown.append(str(exc))
            raise
        error = docker.unknown(" ".join(argv[:4]))
        self.world.unknown.append(str(error))
        raise error

    def stream(self, argv: Sequence[str], on_line: Callable[[str], None], stop: threading.Event | None = None) -> int:
        """`docker logs --follow --timestamps [--since T] ID`: the lines so far, then each new one, until the
        container stops (0), or `stop` / the cancel token is set (-1)."""
        argv = list(argv)
        try:
            self._arrive(tuple(argv), False)
        except Cancelled:
            return -1
        if argv[:4] != ["docker", "logs", "--follow", "--timestamps"]:
            raise docker.unknown(" ".join(argv[:4]))
        since = argv[5] if argv[4:5] == ["--since"] else None
        ref = argv[-1]
        from orchestrator.deploy.watch import stamp_seconds
        after = stamp_seconds(since) if since else None
        sent = 0
        while True:
            with self.world.changed:
                container = self.model.container(ref)
                if container is None:
                    return 1
                lines = [(at, text) for at, text in container.logs[sent:]]
                sent = len(container.logs)
                ended = not container.running
                if not lines and not ended:
                    self.world.changed.wait(STEP)
            for at, text in lines:
                if after is None or at >= after - 1e-9:
                    on_line(f"{stamp(at)} {text}")
            if (stop is not None and stop.is_set()) or self.cancel.is_set() or self.model.unreachable:
                return -1
            if ended and not lines:
                return 0

    def put_file(self, path: str, content: str, mode: int = 0o644) -> None:
        self._arrive(("put_file", path), False)
        with self.world.changed:
            self.model.files[path] = content

    def put_secret(self, path: str, content: str) -> None:
        self._arrive(("put_secret", path), False)
        with self.world.changed:
            self.model.files[path] = content

    def exec_channel(self, argv: Sequence[str], *, shield: bool = False):
        raise docker.unknown(f"a byte pipe {' '.join(argv[:3])} (image copies are not modelled)")

    def adopt(self, pgid: int) -> Callable[[], None]:
        return lambda: None

    def kill_groups(self, pgids, timeout: float = 5.0) -> bool:
        return True


def interrupt(node: MemoryNode, shield: bool) -> None:
    """A trap action: Ctrl-C arrives in the main thread while this command runs (as SIGINT would), and the
    command is killed by the cancel token the interrupt sets (a shielded one goes on)."""
    _thread.interrupt_main()
    if shield:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if node.cancel.wait(STEP):
            raise Cancelled(node.cancel.reason or "cancelled")
    raise AssertionError(f"{node.name}: the interrupt never set the cancel token")


def fails(code: int, stderr: str) -> Callable[[MemoryNode, bool], docker.Answer]:
    """A trap action: the command exits `code` printing `stderr`, and changes nothing."""
    return lambda node, shield: (code, "", stderr)


def connector(world: World):
    """The `connector` for Cluster: one MemoryNode per inventory node, every one in `world`."""
    made: list[MemoryNode] = []

    def make(target: SSHTarget, *, cancel: CancelToken, **limits) -> MemoryNode:
        conn = MemoryNode(world, target, cancel=cancel, **limits)
        made.append(conn)
        return conn

    make.made = made
    return make


def matches_argv(*prefix: str) -> Callable[[object], bool]:
    return lambda command: isinstance(command, tuple) and command[:len(prefix)] == prefix


def matches_script(constant: str) -> Callable[[object], bool]:
    return lambda command: command is constant
