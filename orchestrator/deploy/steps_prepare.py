"""The steps of `up` before anything serving is touched: connect, preflight, current state, image, secrets.

Then the one step that touches what serves: stop the previous deployment (kept under the names it always
had, so undo — or a rollback — can start it again), and the port and memory checks that can only run after it.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import preflight
from ..facts import look
from ..checks import basics
from ..checks.verdict import Verdict
from ..docker_cli import image_sync
from ..docker_cli.containers import Container, stop_container
from ..runner.events import Kind, Phase
from ..runner.runner import StepFailed
from ..transport.group import GroupError
from ..transport.node import NodeConnection
from .context import Look, UpContext
from .current import Action, decide
from .down import forget_stale_secrets, stale_secret_files


class NoUndo:
    def undo(self, ctx: UpContext) -> None:
        return None

    def leftover(self, ctx: UpContext) -> list[str]:
        return []


def judge(phase: Phase, verdicts: list[Verdict], ctx: UpContext, *, skippable: bool = False) -> None:
    """Verdicts as check events; any fail stops `up` (`skippable`: a registry check, which --skip-check
    NAME overrides, and the message says so)."""
    for v in verdicts:
        ctx.events.check(v.name, str(v.status), {n: c.value for n, c in v.cells.items()},
                         "; ".join(f"{n}: {c.value}" for n, c in v.cells.items()))
    failed = [v for v in verdicts if v.failed_nodes()]
    if failed:
        raise StepFailed(phase, "; ".join(
            f"{v.name} failed on {', '.join(v.failed_nodes())} ("
            + "; ".join(f"{n}: {v.cells[n].value}" for n in v.failed_nodes()) + f"). {v.fix}" for v in failed)
            + (" (--skip-check NAME overrides one check)" if skippable else ""),
            sorted({n for v in failed for n in v.failed_nodes()}))


def judge_report(phase: Phase, report, ctx: UpContext) -> None:
    """The registry's verdicts; any fail stops `up` before anything is touched."""
    judge(phase, report.verdicts, ctx, skippable=True)


class Connect(NoUndo):
    """Inside an enclosing operation (`rollback`, `maintenance end`, `bench --compare`): its connections,
    and every rank must have answered it. (`up`'s own operation connects under the `connect` phase.)"""

    phase, detail = Phase.CONNECT, "the enclosing operation's connections"

    def run(self, ctx: UpContext) -> None:
        if ctx.op.unreachable:
            raise StepFailed(self.phase, "; ".join(f"{n} is unreachable ({why})" for n, why in ctx.op.unreachable.items()),
                             sorted(ctx.op.unreachable))
        ctx.events.note(f"{len(ctx.plan.ranks)} node(s): " + ", ".join(c.name for c in ctx.cluster.nodes))


class Preflight(NoUndo):
    phase, detail = Phase.PREFLIGHT, "docker, GPU, JIT cache; containers, ports and image on every node"

    def run(self, ctx: UpContext) -> None:
        """Every check's facts, the boot units (up's last word: boot.follow), and what the later steps read
        (the image survey, the recipe's containers and who holds the plan's names, the head's listening
        ports: facts/look.py) in ONE gathering per node; the JIT probe beside it."""
        cluster, plan = ctx.cluster, ctx.plan
        specs = preflight.select(skip=["ports", "image", *ctx.opts.skip_checks], up_subset=True)
        # a killed `up` may have left this recipe's secrets env-file on a node's disk: never keep it. Removed
        # under the lock (so never the file of an `up` that holds it) and beside the gathering, not before it
        where = stale_secret_files(ctx.dep.inventory, ctx.dep.recipe.name)
        with ThreadPoolExecutor(1, thread_name_prefix="stale-secrets") as pool:
            forgot = pool.submit(cluster.each, lambda conn: forget_stale_secrets(conn, where[conn.name]))
            try:
                report = preflight.run_checks(ctx.dep, plan, cluster, specs, opened=True, per_boot=True,
                                              also=("boot_units", *look.NAMES))
            except Exception as error:  # noqa: BLE001 - a transport error, not a verdict: named as such
                nodes = sorted(error.failures) if isinstance(error, GroupError) else []
                raise StepFailed(self.phase, f"the checks could not run (a transport error, not a verdict on a "
                                 f"node): {error}", nodes) from error
            forgot.result()
        judge_report(self.phase, report, ctx)  # a dead engine, a missing shard: before anything
        seen = look.looked(report.facts, cluster.nodes, plan)
        ctx.look = Look(seen.found, seen.ports, seen.image, dict(report.facts))


class CurrentState(NoUndo):
    phase, detail = Phase.CURRENT, "what runs now, by label and plan hash"

    def run(self, ctx: UpContext) -> None:
        decision = decide(ctx.plan, ctx.look.found, ctx.opts.force)
        if decision.clashes:
            shown = "; ".join(f"{node}: {c.name} ({c.id[:12]}, {c.status}, image {c.image[:19]})"
                              for node, c in decision.clashes)
            raise StepFailed(self.phase, f"a container that spark-deploy did not create holds this recipe's name: "
                             f"{shown}. It is left untouched: remove it yourself (docker rm) "
                             "or rename the recipe", [node for node, _ in decision.clashes])
        if decision.action is Action.ALREADY_SERVING and not ctx.endpoint.healthy():
            decision.action, decision.reason = Action.REPLACE, f"{ctx.endpoint.url}/health does not answer 200"
        ctx.decision = decision
        if decision.names_taken and decision.action is not Action.ALREADY_SERVING and not ctx.reuse:
            ctx.plan = ctx.plan.named_for_run()  # the earlier containers of this plan keep their names
            ctx.events.note(f"plan {ctx.plan.plan_hash}'s names are held by its earlier containers (kept): this "
                            f"run's are {', '.join(l.container for l in ctx.plan.ranks)}")
        if decision.action is Action.FRESH:
            ctx.events.note(decision.reason)
        if decision.action is not Action.ALREADY_SERVING and not decision.previous_running and ctx.look.ports.failed_nodes():
            judge(self.phase, [ctx.look.ports], ctx)  # nothing of ours holds them: another process does
        elif decision.action is Action.REPLACE:
            shown = ", ".join(f"{n}: {c.name} plan {c.ours.plan_hash or '?'} {c.status}"
                              for n, cs in decision.previous.items() for c in cs)
            ctx.events.note(f"will replace {shown} ({decision.reason}) once the new plan {ctx.plan.plan_hash} "
                            "is ready to start; the previous containers are kept, stopped")


class SyncImage:
    """Every node holds the pinned image under its reference. Undo keeps the verified images (a retry need
    not move them again) but points a reference that --sync moved back at what it named before."""

    phase = Phase.IMAGE
    CLEANUP_WAIT = 30.0  # seconds undo waits for an interrupted copy to put its target back (its own bounds: 15 s)

    def __init__(self, image_id: str, ref: str):
        self.detail = f"{image_id[:19]} ({ref})"
        self.moved_tags: list[tuple[NodeConnection, str]] = []  # (node, image ID the reference named before)
        # target -> set once its copy has ended and cleaned up, and what that cleanup said (notes on its error).
        # An interrupt returns from the copies' threads after a short grace; undo waits for them, then says.
        self.copies: dict[str, tuple[threading.Event, list[str]]] = {}

    def undo(self, ctx: UpContext) -> None:
        for name, (ended, said) in self.copies.items():
            if not ended.wait(self.CLEANUP_WAIT):
                ctx.events.warn(f"the interrupted image copy did not finish cleaning up within "
                                f"{self.CLEANUP_WAIT:g} s: check for a partial image (docker image ls -a) and "
                                "`sdlate` processes", name)
            for note in said:
                ctx.events.warn(note.removeprefix(f"{name}: "), name)
        self.copies.clear()
        while self.moved_tags:
            conn, before = self.moved_tags[-1]
            conn.run(["docker", "tag", before, ctx.plan.image_ref], timeout=30, check=True, shield=True)
            self.moved_tags.pop()

    def leftover(self, ctx: UpContext) -> list[str]:
        return [f"{conn.name}: {ctx.plan.image_ref} now names {ctx.plan.image_id[:19]} (was {before[:19]}: "
                f"docker tag {before[:19]} {ctx.plan.image_ref})" for conn, before in self.moved_tags]

    def run(self, ctx: UpContext) -> None:
        plan, survey = ctx.plan, ctx.look.image
        if survey.source is None:
            raise StepFailed(self.phase, f"no node holds image {plan.image_id} ({plan.image_ref}): load it on one "
                             "node first (docker load / docker pull), then run up again")
        if survey.conflicts and not ctx.opts.replace_image:
            shown = "; ".join(f"{n.conn.name} has {(n.by_ref or n.pinned).short()} under {plan.image_ref}"
                              for n in survey.conflicts)
            raise StepFailed(self.phase, f"a different image under the same reference: pinned "
                             f"{survey.source.pinned.short()} (on {survey.source.conn.name}); {shown}. Use --sync to "
                             "replace it", [n.conn.name for n in survey.conflicts])
        todo = {n.conn.name: n for n in survey.missing + survey.conflicts}
        if not todo:
            ctx.events.note(f"every node holds {plan.image_id[:19]}: nothing to move")
        ctx.cluster.each(lambda conn: self._transfer(ctx, survey.source, conn), [n.conn for n in todo.values()])
        for node in survey.nodes:
            if node.conn.name in todo or node.by_ref is None:
                if node.by_ref is not None and node.by_ref.id != plan.image_id:
                    self.moved_tags.append((node.conn, node.by_ref.id))  # recorded first: undo points it back
                image_sync.tag(node.conn, plan.image_id, plan.image_ref)

    def _transfer(self, ctx: UpContext, source: image_sync.NodeImage, dst: NodeConnection) -> None:
        """copy_image picks the route, moves, verifies, and puts the target back as it was on any failure."""
        dep = ctx.dep
        dst_node = dep.inventory.node(dst.name)
        user = (dst_node.ssh and dst_node.ssh.user) or dep.inventory.ssh.user
        ended, said = self.copies.setdefault(dst.name, (threading.Event(), []))
        try:
            moved = image_sync.copy_image(
                source.conn, dst, ctx.plan.image_id, source.pinned, dst_host=dst_node.fabric_ip, dst_user=user,
                progress=lambda done, total: ctx.events.progress(f"image → {dst.name}", done, max(total, done)),
                stall_timeout=ctx.opts.copy_stall_timeout)
        except BaseException as exc:
            said.extend(getattr(exc, "__notes__", []))
            raise
        finally:
            ended.set()
        route = {image_sync.TransferMode.DIRECT: "node to node over the fabric",
                 image_sync.TransferMode.RELAY: "relayed through this machine (nodes cannot SSH to each other)"}
        what = moved.layers
        writer = {image_sync.Producer.STORE: f"read from {moved.source}'s layer store",
                  image_sync.Producer.FILTERED_SAVE: f"docker save, cut on {moved.source}"}.get(moved.producer, "")
        if what is not None and what.archive is image_sync.Archive.LAYERS:
            sent = (f"; only the {what.layers - what.held} of {what.layers} layers it lacked "
                    f"({moved.left_out} bytes of held layers left out; {writer})")
        elif what is not None and what.held:
            sent = f"; the whole image ({what.reason})"
        else:
            sent = ""
        ctx.events.image_moved(moved.source, moved.target, ctx.plan.image_id, moved.bytes, route[moved.mode] + sent)
        ctx.events.note(f"now holds {moved.identity.short()}", dst.name)


class WriteSecrets:
    """The env-file Docker reads at `docker run`; removed again right after the last `docker run`."""

    phase = Phase.SECRETS

    def __init__(self, names: list[str]):
        self.names = names
        self.detail = ", ".join(names)
        self.written: list[str] = []

    def run(self, ctx: UpContext) -> None:
        missing = [name for name in self.names if name not in os.environ]
        if missing:
            raise StepFailed(self.phase, f"{', '.join(missing)} not set in this shell's environment: export it "
                             "(it is written to each node's env-file, mode 0600, never put on a command line)")
        content = "".join(f"{name}={os.environ[name]}\n" for name in self.names)

        def put(conn: NodeConnection) -> None:
            self.written.append(conn.name)  # before writing: a half-written file is removed too
            conn.put_secret(ctx.plan.on(conn.name).env_file, content)

        ctx.cluster.each(put)
        ctx.events.note(f"wrote {len(self.names)} secret(s) to {ctx.plan.head.env_file} on every node")

    def undo(self, ctx: UpContext) -> None:
        forget_secrets(ctx, self.written)
        self.written = []

    def leftover(self, ctx: UpContext) -> list[str]:
        return [f"{node}: secrets env-file {ctx.plan.on(node).env_file} (rm -f it)" for node in self.written]


def forget_secrets(ctx: UpContext, nodes: list[str]) -> None:
    """Remove the env-files; a failure is an error naming the node and the file (never silent)."""
    files = {node: ctx.plan.on(node).env_file for node in nodes if ctx.plan.on(node).env_file}
    if files:
        ctx.cluster.each(lambda conn: conn.run(["rm", "-f", "--", files[conn.name]], timeout=30, check=True),
                         [ctx.conn(n) for n in files])


@dataclass
class Stopped:
    """One previous container as StopPrevious found it (recorded before it is touched)."""

    node: str
    container: Container


@dataclass
class StopPrevious:
    """Stop the running containers (peers first). They keep their names (which carry their plan): nothing
    is renamed, and a rollback or a restore finds them by their labels. They are never removed here.

    Undo stops what ran, as a whole; starting it again is the restore's job."""

    phase: Phase = Phase.STOP_PREVIOUS
    detail: str = "peers first, then the head; kept for undo and rollback"
    stopped: list[Stopped] = field(default_factory=list)
    ran: list[tuple[str, Container]] = field(default_factory=list)  # set by undo: what a restore starts again

    def run(self, ctx: UpContext) -> None:
        previous = ctx.decision.previous
        head = ctx.plan.head.node.name
        for group in ([n for n in previous if n != head], [n for n in previous if n == head]):
            ctx.cluster.each(lambda conn: self._stop_on(ctx, conn), [ctx.conn(n) for n in group])

    def _stop_on(self, ctx: UpContext, conn: NodeConnection) -> None:
        for container in ctx.decision.previous[conn.name]:
            self.stopped.append(Stopped(conn.name, container))
            stop_container(conn, container.id)
            ctx.events.container(Kind.CONTAINER_STOPPED, conn.name, container.name, container.id,
                                 f"{container.name} ({container.id[:12]}) stopped, kept")

    @property
    def touched(self) -> bool:
        return bool(self.stopped) or bool(self.ran)

    def undo(self, ctx: UpContext) -> None:
        """Leave the previous deployment stopped as a whole: ranks of one tensor-parallel group cannot rejoin
        a running head one by one, so once any rank was touched, every rank that ran is stopped (which also
        lets an interrupted `docker stop` finish: the engine goes on after its client is killed). Starting it
        again, with every wait `up` has, is the restore's job (deploy/restore.py), which `up` runs after this
        undo unless --no-restore."""
        if not self.stopped:
            return
        head = ctx.plan.head.node.name
        self.ran = sorted(((node, c) for node, cs in ctx.decision.previous.items() for c in cs if c.running),
                          key=lambda item: item[0] != head)
        for node, container in self.ran:
            stop_container(ctx.conn(node), container.id)
        self.stopped = []

    def leftover(self, ctx: UpContext) -> list[str]:
        if not self.stopped:
            return []
        return [f"{e.node}: previous container {e.container.name} ({e.container.id[:12]}) may be stopped"
                for e in self.stopped] + ["the previous release is stopped: `spark-deploy rollback` starts it again"]


class PortsFree(NoUndo):
    phase = Phase.PORTS

    def __init__(self, head: str, ports: list[int]):
        self.ports = ports
        self.detail = ", ".join(f"{head}:{p}" for p in ports)

    def run(self, ctx: UpContext) -> None:
        judge(self.phase, [basics.ports_free(ctx.cluster, self.ports)], ctx)


class MemoryFree(NoUndo):
    """Memory judged again once the previous release is stopped: preflight added back an estimate of what
    it held (its share + preflight.runtime_overhead_gib); this reads what the nodes show now. A fail here
    undoes the stop (the previous release is restored)."""
    phase, detail = Phase.MEMORY, "memory-headroom with the previous release stopped"

    def run(self, ctx: UpContext) -> None:
        if "memory-headroom" in ctx.opts.skip_checks:
            ctx.events.note("memory-headroom skipped (--skip-check)")
            return
        specs = preflight.select(only=["memory-headroom"])
        report = preflight.run_checks(ctx.dep, ctx.plan, ctx.cluster, specs, opened=True)
        judge_report(self.phase, report, ctx)
