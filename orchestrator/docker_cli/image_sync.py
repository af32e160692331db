"""Make every node hold the pinned image: compare identities, then stream an archive into `docker load`
that leaves out the layers the target already holds (docker_cli/layers.py decides; the source writes it
from its own layer store when its login can read it, layer_store.py, else `docker save` cut by
layer_filter.py). docs/distribution-images.md says what moves when.

Node to node over the fabric when the source can SSH to the destination (host key checked on the node),
otherwise relayed through the controller. Streamed either way: no copy of the image ever lands on disk
outside the engines. A copy is cancellable (the cluster's token kills both ends as process groups),
fails when it makes no progress for `stall_timeout` seconds (naming both nodes, ending both ends), and
on any failure or cancel removes what it added on the target (compared with a snapshot taken first).
Failures name the node whose side failed and docker's reason, never the shell pipeline.
"""

from __future__ import annotations

import enum
import socket
import time
from dataclasses import dataclass, field
from typing import Callable

from ..transport.cancel import Cancelled
from ..transport.group import on_all
from ..transport.node import NodeConnection, NodeError
from . import image_pipe as pipe
from . import layers as lay
from .images import ImageIdentity, ImageSnapshot, image_size, inspect_image, inspect_images, restore, snapshot, taggable

CHUNK = 1 << 20
STALL_TIMEOUT = pipe.STALL_TIMEOUT
STEP = 0.1
LATE_REMOVER_BOUND = 600.0
LATE_REMOVER_IDLE = 3  # seconds in a row the engine shows no load in progress before the remover ends
ENGINE_IDLE_TICKS = 5  # fewer clock ticks (1/100 s) of CPU and block-I/O wait per second: the engine is idle
# "$1" image ID, "$2" seconds. Detached (own session) so it outlives this connection; it ends when it has
# removed the image, when the engine shows no load in progress for LATE_REMOVER_IDLE s, or at "$2". No load in
# progress: with the engine's staging dir readable (a root login), no docker-import-* there; otherwise (a
# docker-group login, which cannot read it) dockerd and containerd spending under ENGINE_IDLE_TICKS ticks a
# second, read from /proc/PID/stat (world-readable): registering a received image hashes and writes every
# layer, which costs far more. With no engine process visible it waits for "$2".
LATE_REMOVER = r"""setsid bash -c '
root=$(docker info --format "{{.DockerRootDir}}" 2>/dev/null); idle=0; last=
spent() {
  local p s f t=0 n=0
  for p in $(pgrep -x dockerd; pgrep -x containerd); do
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue; read -ra f <<< "${s##*) }"
    t=$((t + f[11] + f[12] + f[39])); n=$((n + 1))
  done
  [ "$n" -gt 0 ] && echo "$t"
}
for i in $(seq 1 "$2"); do
  if docker image inspect "$1" >/dev/null 2>&1; then docker image rm --force "$1" >/dev/null 2>&1; exit 0; fi
  if [ -n "$root" ] && [ -r "$root/tmp" ]; then
    if ls "$root/tmp" | grep -q "^docker-import-"; then idle=0; else idle=$((idle + 1)); fi
  else
    now=$(spent)
    if [ -n "$now" ] && [ -n "$last" ] && [ $((now - last)) -lt """ + str(ENGINE_IDLE_TICKS) + r""" ]; then
      idle=$((idle + 1)); else idle=0; fi
    last=$now
  fi
  [ "$idle" -ge """ + str(LATE_REMOVER_IDLE) + r""" ] && exit 0
  sleep 1
done' sdlate "$1" "$2" </dev/null >/dev/null 2>&1 &"""
# "$1" image ID: end the removers an earlier cancelled copy of this image left on the node. A new copy wants the
# image there, and a remover still waiting would delete it once loaded. (A survey that finds the image does
# not end them: the second at most between a late load and the remover's next poll is left open.)
STOP_LATE_REMOVERS = 'pkill -f -- "sdlate $1" 2>/dev/null; true'
Progress = Callable[[int, int], None]  # (bytes moved so far, expected total)

Side = pipe.Side
Archive = lay.Archive
Producer = lay.Producer
TransferFailed = pipe.TransferFailed
TransferStalled = pipe.TransferStalled


class TransferMode(enum.Enum):
    DIRECT = "direct"  # source node -> destination node over the fabric
    RELAY = "relay"  # source node -> this machine -> destination node


@dataclass
class NodeImage:
    conn: NodeConnection
    pinned: ImageIdentity | None  # the pinned ID, if the node has it
    by_ref: ImageIdentity | None  # what the reference points to on this node


@dataclass
class SyncPlan:
    image_id: str
    ref: str
    nodes: list[NodeImage]
    source: NodeImage | None = None
    missing: list[NodeImage] = field(default_factory=list)
    conflicts: list[NodeImage] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        return not self.missing and not self.conflicts


@dataclass(frozen=True)
class Moved:
    """One finished copy: how, how many bytes, how long, and what the destination now holds."""

    source: str
    target: str
    mode: TransferMode
    bytes: int
    seconds: float
    identity: ImageIdentity
    layers: lay.LayerPlan | None = None  # what was sent: nothing, the missing layers, or the whole archive
    left_out: int = 0  # bytes of held layers the source kept off the link
    producer: lay.Producer | None = None  # what wrote the archive on the source


def survey_refs(image_id: str, ref: str) -> list[str]:
    """What a survey inspects on each node: the pinned ID, and the reference when `docker tag` can set it."""
    return [image_id, ref] if taggable(ref) else [image_id]


def node_image(conn: NodeConnection, found: list[ImageIdentity | None]) -> NodeImage:
    """`inspect_images(conn, survey_refs(...))`'s answer as that node's NodeImage."""
    if not found:
        raise NodeError(conn.name, "docker image inspect printed nothing for the pinned image")
    return NodeImage(conn, found[0], found[1] if len(found) > 1 else None)


def survey(conns: list[NodeConnection], image_id: str, ref: str) -> SyncPlan:
    """Ask every node (in parallel) what it has under the pinned ID and under the reference."""
    refs = survey_refs(image_id, ref)
    found = on_all(conns, lambda conn: node_image(conn, inspect_images(conn, refs)), lambda c: c.name)
    return sync_plan(image_id, ref, [found[c.name] for c in conns])


def sync_plan(image_id: str, ref: str, nodes: list[NodeImage]) -> SyncPlan:
    """Pure: which node is the source, which lack the image, which hold another one under the reference."""
    plan = SyncPlan(image_id, ref, nodes)
    holders = [n for n in plan.nodes if n.pinned is not None]
    plan.source = holders[0] if holders else None
    plan.missing = [n for n in plan.nodes if n.pinned is None]
    reference = plan.source.pinned if plan.source else None
    for node in plan.nodes:
        if node.by_ref is not None and node.by_ref.id != image_id and not (reference and node.by_ref.same_content(reference)):
            plan.conflicts.append(node)
        elif node.pinned is not None and reference is not None and not node.pinned.same_content(reference):
            plan.conflicts.append(node)
    return plan


def can_reach(src: NodeConnection, dst_host: str, dst_user: str) -> bool:
    """True when `src` can SSH to the destination with a host key it already trusts (never adds one)."""
    result = src.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                      f"{dst_user}@{dst_host}", "true"], timeout=20)
    return result.ok


def copy_image(src: NodeConnection, dst: NodeConnection, image_id: str, expected: ImageIdentity, *,
               dst_host: str, dst_user: str, mode: TransferMode | None = None, progress: Progress | None = None,
               stall_timeout: float = STALL_TIMEOUT, read_store: bool = True) -> Moved:
    """The whole copy of one image to one node: pick direct or relay (None: direct when `src` can SSH to
    the destination), move it, verify it. `read_store=False` writes the archive with `docker save` even
    where the source's layer store is readable. On any failure or cancel the destination's images are put back
    as they were. Raises TransferFailed (naming the side that failed), Cancelled or NodeError."""
    started = time.monotonic()
    dst.run_script(STOP_LATE_REMOVERS, image_id, timeout=15, check=True)
    before = snapshot(dst)
    watches: list[pipe.Stall] = []
    try:
        layers, send = layer_plan(src, dst, image_id, read_store)
        if layers.archive is lay.Archive.NOTHING:
            return Moved(src.name, dst.name, mode or TransferMode.DIRECT, 0, time.monotonic() - started,
                         verify(dst, image_id, expected), layers)
        if mode is None:
            mode = TransferMode.DIRECT if can_reach(src, dst_host, dst_user) else TransferMode.RELAY
        if mode is TransferMode.DIRECT:
            moved = _direct(src, dst, dst_host, dst_user, image_id, progress, stall_timeout, watches, layers, send)
        else:
            moved = _relay(src, dst, image_id, progress, stall_timeout, watches, layers, send)
        got = verify(dst, image_id, expected)
    except BaseException as exc:
        _undo(dst, before, exc, image_id, watches)
        raise
    return Moved(src.name, dst.name, mode, moved, time.monotonic() - started, got, layers, watches[0].left_out,
                 send.producer)


def layer_plan(src: NodeConnection, dst: NodeConnection, image_id: str,
               read_store: bool = True) -> tuple[lay.LayerPlan, lay.Send]:
    """What this copy must carry, and what writes it on the source, from both engines (read in parallel)."""
    found = on_all([src, dst], lay.read_layers, lambda c: c.name)
    source = found[src.name]
    size, diffs = source.images.get(image_id) or (image_size(src, image_id), ())
    layers = lay.plan(ImageIdentity(image_id, diffs, (), ()), size, source, found[dst.name])
    return layers, lay.sender(layers, source, image_id, read_store)


def transfer_direct(src: NodeConnection, dst_host: str, dst_user: str, image_id: str, *,
                    dst: NodeConnection | None = None, progress: Progress | None = None,
                    stall_timeout: float = STALL_TIMEOUT) -> int:
    """`docker save` on the source piped over the fabric into `docker load` on the destination; bytes moved.

    Pass `dst` (the controller's connection to the destination) so that its end is killed too on a stall
    or cancel even when the link between the nodes is down, and its images are restored on failure; when
    `src` belongs to a Cluster that also holds the destination, that connection is used."""
    if dst is None and getattr(src, "cluster", None) is not None:
        dst = src.cluster.by_address(dst_host)
    before = snapshot(dst) if dst is not None else None
    watches: list[pipe.Stall] = []
    try:
        return _direct(src, dst, dst_host, dst_user, image_id, progress, stall_timeout, watches)
    except BaseException as exc:
        if dst is not None and before is not None:
            _undo(dst, before, exc, image_id, watches)
        raise


def transfer_relay(src: NodeConnection, dst: NodeConnection, image_id: str, progress: Progress | None = None, *,
                   stall_timeout: float = STALL_TIMEOUT) -> int:
    """Pump `docker save` from one node into `docker load` on another through this process; bytes moved."""
    before = snapshot(dst)
    watches: list[pipe.Stall] = []
    try:
        return _relay(src, dst, image_id, progress, stall_timeout, watches)
    except BaseException as exc:
        _undo(dst, before, exc, image_id, watches)
        raise


def _direct(src: NodeConnection, dst: NodeConnection | None, dst_host: str, dst_user: str, image_id: str,
            progress: Progress | None, stall_timeout: float, watches: list[pipe.Stall],
            layers: lay.LayerPlan | None = None, send: lay.Send = lay.Send(lay.Producer.SAVE)) -> int:
    total = layers.expected_bytes if layers is not None else image_size(src, image_id)
    target_name = dst.name if dst is not None else dst_host
    copy = pipe.DirectCopy(src, dst, target_name, total, progress, stall_timeout)
    watches.append(copy.watch)
    moved = copy.run(image_id, f"{dst_user}@{dst_host}", send.producer.value, send.program, send.argument)
    copy.watch.left_out = copy.left_out[1]
    return moved


def _relay(src: NodeConnection, dst: NodeConnection, image_id: str, progress: Progress | None,
           stall_timeout: float, watches: list[pipe.Stall], layers: lay.LayerPlan | None = None,
           send: lay.Send = lay.Send(lay.Producer.SAVE)) -> int:
    total = layers.expected_bytes if layers is not None else image_size(src, image_id)
    save = src.exec_channel(pipe.source_argv(image_id, send.producer.value, send.program, send.argument))
    try:
        load = dst.exec_channel(["docker", "load"])
    except BaseException:
        save.close()
        raise
    save_err, load_err = pipe.Collector(save), pipe.Collector(load)
    watch = pipe.Stall(src, dst, dst.name, total, progress, stall_timeout)
    watches.append(watch)
    target_gone = False
    try:
        save.settimeout(STEP)
        load.settimeout(STEP)
        while True:
            watch.check(f"{src.name}'s docker save sent nothing")
            try:
                chunk = save.recv(CHUNK)
            except socket.timeout:
                continue
            if not chunk:
                break
            view = memoryview(chunk)
            while view and not target_gone:
                watch.check(f"{dst.name} accepted nothing")
                try:
                    sent = load.send(view)
                except socket.timeout:
                    continue
                except (OSError, EOFError):
                    sent = 0
                if sent == 0:
                    target_gone = True
                    break
                view = view[sent:]
                watch.advance(sent)
            if target_gone:
                break
        watch.cancelled()  # a cancel kills `docker save`, which ends the stream too: not a whole image sent
        if not target_gone:
            load.shutdown_write()
        watch.received_all()
        load_code = pipe.wait_exit(load, watch)
        save_code = pipe.wait_exit(save, watch) if not target_gone else -1
    finally:
        save.close()
        load.close()
    if save_code == 0 and load_code == 0:
        watch.left_out = pipe.left_out(save_err.lines())[1]
        return watch.moved
    watch.cancelled()
    load_text, save_text = load_err.lines(), save_err.lines()
    reading = (f"reading {image_id[:19]} from the engine's layer store" if send.producer is lay.Producer.STORE
               else f"docker save of {image_id[:19]}")
    if load_code != 0:
        if save_code not in (0, -1) and not pipe.broken_pipe(save_text) and pipe.truncated(load_text):
            raise TransferFailed(Side.SOURCE, src.name, dst.name,
                                 f"{reading} failed: {pipe.cause(save_text, save_code)}")
        raise TransferFailed(Side.TARGET, src.name, dst.name,
                             f"cannot load the image relayed from {src.name}: {pipe.cause(load_text, load_code)}")
    raise TransferFailed(Side.SOURCE, src.name, dst.name,
                         f"{reading} failed: {pipe.cause(save_text, save_code)}")


def _undo(dst: NodeConnection, before: ImageSnapshot, exc: BaseException, image_id: str,
          watches: list[pipe.Stall]) -> None:
    """Put the destination's images back as they were; say so on the exception if that failed.

    dockerd finishes a load whose whole stream it has received even when the `docker load` client is
    killed, so an image can appear after this restore: then a bounded remover on the node deletes it."""
    try:
        restore(dst, before)
        delivered = bool(watches) and watches[0].delivered
        we_killed_it = isinstance(exc, (Cancelled, KeyboardInterrupt, TransferStalled))
        if delivered and we_killed_it and image_id not in before.ids:
            dst.run_script(LATE_REMOVER, image_id, str(int(LATE_REMOVER_BOUND)), timeout=15, check=True, shield=True)
            exc.add_note(f"{dst.name}: its Docker engine had the whole image stream and may still register it; "
                         f"a remover there (`sdlate`) deletes {image_id[:19]} if it appears, and ends once the "
                         f"engine is idle for {LATE_REMOVER_IDLE} s (at most {LATE_REMOVER_BOUND:g} s)")
        elif we_killed_it:
            exc.add_note(f"{dst.name}: the image copy was ended on both nodes; its images are as they were")
    except Exception as problem:  # noqa: BLE001 - reported with the original failure
        exc.add_note(f"{dst.name}: could not check what the failed image copy left there: {problem}")


def tag(conn: NodeConnection, image_id: str, ref: str) -> None:
    if taggable(ref):
        conn.run(["docker", "tag", image_id, ref], timeout=30, check=True)


def verify(conn: NodeConnection, image_id: str, expected: ImageIdentity) -> ImageIdentity:
    """After a load: the node must report the same identity (ID, or layer DiffIDs across backends)."""
    got = inspect_image(conn, image_id)
    if got is None or not got.same_content(expected):
        raise NodeError(conn.name, f"after loading, the image does not match: expected {expected.short()}, got "
                                   f"{got.short() if got else 'nothing'}")
    return got

