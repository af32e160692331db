"""The steps of `up` that start the new plan: head, rendezvous, peers, forget secrets, ready, log checks.

Every started container is recorded by ID before anything else can fail, and its undo removes exactly
that ID — never a container found by name.
"""

from __future__ import annotations

import re
import time

from ..facts import fingerprint as engine_fp
from ..docker_cli.containers import list_containers, remove_container, run_container
from ..render.labels import Label
from ..render.plan import RankLaunch
from ..runner.events import Kind, Phase
from ..runner.runner import StepFailed
from ..transport.node import NodeConnection
from .context import UpContext
from .expectations import ExpectationResult, evaluate, transport
from .liveness import NodeLiveness
from .readiness import wait_ready
from .steps_prepare import NoUndo, forget_secrets
from .waits import Seen, Tick, WaitTimeout, wait_until
from .watch import FailureSeen

SHARDS = re.compile(r"Loading safetensors checkpoint shards:\s+\d+% Completed \| (\d+)/(\d+)")


class StartRanks:
    """Start some ranks at once (the head alone, or every peer) and watch each container's log."""

    def __init__(self, phase: Phase, launches: list[RankLaunch]):
        self.phase, self.launches = phase, launches
        self.detail = ", ".join(f"{l.node.name}: {l.container}" for l in launches)
        self.started: dict[str, str] = {}  # node -> container ID
        self.attempted: set[str] = set()

    def run(self, ctx: UpContext) -> None:
        ctx.cluster.each(lambda conn: self._start(ctx, conn), [ctx.conn(l.node.name) for l in self.launches])

    def _start(self, ctx: UpContext, conn: NodeConnection) -> None:
        launch = next(l for l in self.launches if l.node.name == conn.name)
        self.attempted.add(conn.name)
        container_id = run_container(conn, launch.argv)
        self.started[conn.name] = container_id
        ctx.events.container(Kind.CONTAINER_STARTED, conn.name, launch.container, container_id)
        ctx.monitor.watch(conn, container_id, lambda node, line: _on_line(ctx, node, line), launch.container)
        ctx.monitor.helpers.append(NodeLiveness(conn, ctx.monitor).start())

    def undo(self, ctx: UpContext) -> None:
        if ctx.opts.keep_on_failure:
            ctx.events.warn("--keep-on-failure: leaving " + ", ".join(f"{n}: {i[:12]}" for n, i in self.started.items()))
            self.started = {}
            return
        ctx.monitor.stop(list(self.started.values()))
        ctx.cluster.each(lambda conn: self._remove(ctx, conn), [ctx.conn(n) for n in list(self.started)])
        self._remove_half_created(ctx)

    def _remove(self, ctx: UpContext, conn: NodeConnection) -> None:
        container_id = self.started[conn.name]
        remove_container(conn, container_id)
        del self.started[conn.name]
        ctx.events.container(Kind.CONTAINER_REMOVED, conn.name, ctx.plan.on(conn.name).container, container_id)

    def _remove_half_created(self, ctx: UpContext) -> None:
        """`docker run` interrupted after create but before it printed the ID: find it by this run's label."""
        for node in self.attempted - set(self.started):
            conn = ctx.conn(node)
            for c in list_containers(conn, [f"label={Label.RUN}={ctx.plan.run_id}"]):
                remove_container(conn, c.id)
                ctx.events.container(Kind.CONTAINER_REMOVED, node, c.name, c.id)

    def leftover(self, ctx: UpContext) -> list[str]:
        return [f"{n}: container {ctx.plan.on(n).container} ({i[:12]}) of this run: docker rm -f {i[:12]}"
                for n, i in self.started.items()]


def _on_line(ctx: UpContext, node: str, line: str) -> None:
    found = SHARDS.search(line)
    if found:
        ctx.events.progress("loading shards", int(found.group(1)), int(found.group(2)))


def heartbeat(ctx: UpContext, what: str) -> Tick:
    """Show that a long wait is alive: elapsed, the newest log line and its age; warn once on silence."""
    warned = {"done": False}

    def tick(elapsed: float) -> None:
        newest = ctx.monitor.newest()
        if newest is None:
            ctx.events.emit_waiting(what, elapsed, None, None, None)
            return
        node, line, age = newest
        ctx.events.emit_waiting(what, elapsed, node, line, age)
        if age >= ctx.opts.stall_warning and not warned["done"]:
            warned["done"] = True
            ctx.events.warn(f"no node has logged anything for {age:.0f} s while waiting for {what}: the load may "
                            "be stalled (check the nodes' disks/NFS and `spark-deploy logs -f`)")

    return Tick(ctx.opts.heartbeat, tick)


class Rendezvous(NoUndo):
    phase = Phase.RENDEZVOUS

    def __init__(self, head: str, port: int):
        self.head, self.port = head, port
        self.detail = f"waiting for {head}:{port} to be LISTENING"

    def run(self, ctx: UpContext) -> None:
        conn = ctx.conn(self.head)

        def listening() -> Seen:
            result = conn.run(["ss", "-Hltn", f"sport = :{self.port}"], timeout=10)
            return Seen(result.ok and bool(result.stdout.strip()),
                        "LISTEN" if result.stdout.strip() else f"nothing listens on {self.port}")

        wait_until(listening, ctx.monitor, timeout=ctx.opts.listen_timeout, interval=ctx.opts.poll,
                   what=f"port {self.port} LISTENING", node=self.head, tick=heartbeat(ctx, "the rendezvous port"))


class PeersJoined(NoUndo):
    """Every peer holds a connection to the head's rendezvous port, within a bound.

    vLLM logs nothing at INFO while a peer retries (field note: the peer's own timeout is 600 s), so this
    looks from outside: `ss` on each peer for an established connection to MASTER_ADDR:PORT. A peer
    that has none in time fails, with whether it can reach that address at all."""

    phase = Phase.RENDEZVOUS

    def __init__(self, peers: list[str], addr: str, port: int):
        self.peers, self.addr, self.port = peers, addr, port
        self.detail = f"{', '.join(peers)} joined {addr}:{port}"

    def run(self, ctx: UpContext) -> None:
        pending = set(self.peers)

        def joined() -> Seen:
            for node in sorted(pending):
                result = ctx.conn(node).run(["ss", "-Htn", "state", "established", "dst", f"{self.addr}:{self.port}"],
                                            timeout=10)
                if result.ok and result.stdout.strip():
                    pending.discard(node)
            return Seen(not pending, f"not joined yet: {', '.join(sorted(pending))}" if pending else "")

        try:
            wait_until(joined, ctx.monitor, timeout=ctx.opts.join_timeout, interval=ctx.opts.poll,
                       what=f"the peers to join the rendezvous at {self.addr}:{self.port}", node=ctx.plan.head.node.name)
        except WaitTimeout:
            reach = {node: self._reachable(ctx, node) for node in sorted(pending)}
            raise StepFailed(self.phase, "; ".join(
                f"{node} has not joined the rendezvous at {self.addr}:{self.port} within "
                f"{ctx.opts.join_timeout:.0f} s: {why}" for node, why in reach.items()), sorted(pending)) from None

    def _reachable(self, ctx: UpContext, node: str) -> str:
        probe = ctx.conn(node).run_script('timeout 3 bash -c \'exec 3<>"/dev/tcp/$1/$2"\'', self.addr, str(self.port),
                                          timeout=10)
        if probe.ok:
            return "the address answers from there, but the peer never connected (check its log)"
        return (f"it cannot reach {self.addr}:{self.port} (no TCP connection from {node}: a partition, a "
                "firewall, or the wrong fabric_ip / interface)")


class ForgetSecrets(NoUndo):
    """Docker read the env-file at `docker run`: it need not stay on any disk through the ready wait."""

    phase, detail = Phase.FORGET_SECRETS, "remove the env-file from every node"

    def __init__(self, writer):
        self.writer = writer

    def run(self, ctx: UpContext) -> None:
        try:
            forget_secrets(ctx, self.writer.written)
            self.writer.written = []
        except Exception as exc:  # noqa: BLE001 - loud, but the deployment itself is fine
            ctx.events.warn(f"could not remove the secrets env-file: {exc}; `spark-deploy down` or the next "
                            "`up` removes it")


class Ready(NoUndo):
    phase = Phase.READY

    def __init__(self, url: str):
        self.detail = f"{url}: /health, /v1/models, one completion"

    def run(self, ctx: UpContext) -> None:
        ctx.sample = wait_ready(ctx.endpoint, ctx.dep.recipe.served_name, ctx.monitor, ctx.plan.head.node.name,
                                ctx.opts.ready_timeout, heartbeat(ctx, "the API to serve"))
        ctx.events.note(f"completion: {ctx.sample!r}")


class LogChecks(NoUndo):
    phase, detail = Phase.LOG_CHECKS, "the settings took effect, and the ranks agree"

    def run(self, ctx: UpContext) -> None:
        recipe, monitor = ctx.dep.recipe, ctx.monitor

        def logs() -> dict[str, list[str]]:
            return {w.conn.name: list(w.lines) for w in monitor.watches.values()}

        profile = ctx.dep.inventory.interconnect.profile
        debug = {r.node.name: dict(r.spec.env).get("NCCL_DEBUG", "") for r in ctx.plan.ranks}

        def results(final: bool) -> list[ExpectationResult]:
            found = evaluate(recipe, logs(), final=final)
            link = transport(profile, debug, logs())
            return found + ([link] if link else [])

        def settled() -> Seen:
            pending = [r.name for r in results(final=False) if r.status == "waiting"]
            return Seen(not pending, f"waiting for {', '.join(pending)}" if pending else "")

        started = time.monotonic()
        try:
            wait_until(settled, monitor, timeout=ctx.opts.expect_timeout, interval=0.2, what="expected log lines",
                       node=ctx.plan.head.node.name)
        except FailureSeen:
            raise
        except Exception:  # noqa: BLE001 - the lines never came: the final evaluation names them
            ctx.events.note(f"expected lines still missing after {time.monotonic() - started:.0f} s")
        ctx.expectations = results(final=True)
        for r in ctx.expectations:
            ctx.events.check(r.name, r.status, r.per_node, r.detail)
        failed = [r for r in ctx.expectations if not r.ok]
        engine, where = engine_checks(ctx, logs())
        if failed or engine:
            raise StepFailed(self.phase, "; ".join([*(f"{r.name}: {r.detail}" for r in failed),
                                                    *(f"engine {why}" for why in engine)]),
                             sorted({n for r in failed for n in r.nodes} | set(where)))


def engine_checks(ctx: UpContext, logs: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The fingerprint of what every rank resolved (facts/fingerprint.py), kept for the release record, and
    what is wrong with it (and where): ranks that disagree, or the head's `non-default args` against the
    rendered argv."""
    ranks = {l.node.name: l.spec.rank for l in ctx.plan.ranks}
    fp = engine_fp.fingerprint(logs, ranks)
    ctx.fingerprint = fp.as_dict()
    ctx.events.note(f"engine fingerprint: {engine_fp.short(ctx.fingerprint)}")
    wrong, where = engine_fp.disagreements(fp), engine_fp.deviating(fp)
    head, head_node = ctx.plan.head.spec, ctx.plan.head.node.name
    seen = fp.ranks[0].non_default if fp.ranks else None
    if seen is None:
        ctx.events.warn("the head logged no `non-default args` line (vLLM logs it at INFO: is VLLM_LOGGING_LEVEL "
                        "higher?): the engine's arguments are not judged against the rendered argv", head_node)
        return wrong, where
    differs = engine_fp.args_differences(engine_fp.expected_args(head.model, list(head.serve_args)), seen)
    return wrong + differs, where + ([head_node] if differs else [])
