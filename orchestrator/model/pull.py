"""`model pull`: the recipe's model on every node, downloaded once, copied node to node as verified blobs.

1. the revision must be a commit (a branch moves: two nodes downloading `main` a day apart can hold two
   models); `--revision BRANCH` is resolved by the Hub (never silently by a cache: the download fails when
   the Hub does not answer) and the commit written into the recipe; `--offline` resolves it from the
   source node's cache instead, and says so;
2. the source node (default the head) downloads it unless it already holds that snapshot (model/download);
3. every other node gets the blobs it lacks or holds damaged from the source, over the fabric (model/copy),
   all targets at once.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..checks.hub_headers import HubError
from ..checks.model_cache import revision_on
from ..config.load import Deployment
from ..config.edit import set_model_revision
from ..config.inventory import Inventory
from ..config.recipe import Recipe
from ..operation import AuditAction, Locking, Operation, Outcome, Reach
from ..runner.events import Events
from ..transport.group import Cluster
from ..transport.node import NodeConnection, NodeError
from . import copy as blobcopy
from .download import HUB_WAIT, download_on
from .fit import FitUnknown, fit_on
from .scripts import LIST_SH, Listing, parse_listing

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
SOURCE_STREAMS = 8  # SSH connections opened to the source at once: sshd's MaxStartups drops past 10


class DoesNotFit(Exception):
    """`fit` said the model cannot fit the nodes: nothing was downloaded or copied."""


class PullRefused(Exception):
    """Nothing was moved: the input does not say what to pull (a branch without --revision, a local path)."""


@dataclass
class PullResult:
    commit: str
    source: str
    downloaded: bool
    recipe_updated: bool = False
    copies: dict[str, blobcopy.CopyResult] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.copies.values())


def wanted_revision(recipe: Recipe, revision: str | None) -> str:
    """Pure: what to download. The recipe's revision must be a commit unless --revision is given."""
    if recipe.model.repo.startswith("/"):
        raise PullRefused(f"model.repo {recipe.model.repo} is a local path: there is nothing to pull from the Hub")
    if revision:
        return revision
    if not _COMMIT.match(recipe.model.revision):
        raise PullRefused(f"model.revision {recipe.model.revision!r} is a branch or tag, which can name another "
                          "commit tomorrow: run `spark-deploy model pull RECIPE --revision "
                          f"{recipe.model.revision}` to resolve it and write the commit into the recipe")
    return recipe.model.revision


def listing_on(conn: NodeConnection, hf_cache: str, repo: str, commit: str) -> Listing:
    result = conn.run_script(LIST_SH, hf_cache, repo, commit, timeout=120, check=True)
    listing = parse_listing(result.stdout)
    broken = [f.name for f in listing.files if f.size < 0]
    if listing.absent or not listing.files or broken:
        why = listing.absent or (f"{', '.join(broken)} link to missing blobs" if broken else "an empty snapshot")
        raise NodeError(conn.name, f"cannot copy {repo}@{commit[:12]} from here: {why}")
    return listing


def sync_model(cluster: Cluster, conns: dict[str, NodeConnection], inventory: Inventory, repo: str, commit: str,
               source: str, events: Events, *, streams: int = 4, ref: str = "") -> dict[str, blobcopy.CopyResult]:
    """Copy the snapshot from `source` to every other node in `conns`, at once. Each target is surveyed
    (its present blobs hashed) and gets only what it lacks or holds damaged."""
    src = inventory.node(source)
    listing = listing_on(conns[source], src.hf_cache, repo, commit)
    user = (src.ssh and src.ssh.user) or inventory.ssh.user
    port = (src.ssh and src.ssh.port) or inventory.ssh.port
    blobs_dir = f"{src.hf_cache}/hub/models--{repo.replace('/', '--')}/blobs"
    report = _reporter(events)

    def one(conn: NodeConnection) -> blobcopy.CopyResult:
        node = inventory.node(conn.name)
        held = blobcopy.survey(conn, node.hf_cache, repo, listing)
        todo = blobcopy.to_fetch(listing, held)
        if todo:
            need = sum(listing.blobs()[b] for b in todo)
            events.note(f"{len(todo)} of {len(listing.blobs())} blobs to fetch from {source} ({need / 1e6:.1f} MB)",
                        conn.name)
        route = blobcopy.Route(source, conn.name, blobs_dir, f"{user}@{src.fabric_ip}", port)
        return blobcopy.copy_blobs(conn, route, node.hf_cache, repo, commit, listing, held, streams=streams,
                                   ref=ref, on_progress=report, on_note=lambda text, node: events.note(text, node))

    targets = [c for name, c in conns.items() if name != source]
    if targets and streams * len(targets) > SOURCE_STREAMS:
        streams = max(1, SOURCE_STREAMS // len(targets))
        events.note(f"{streams} stream(s) per node: {len(targets)} nodes fetch from {source} at once, and its sshd "
                    f"takes at most {SOURCE_STREAMS} new connections at a time (MaxStartups)")
    return cluster.each(one, targets) if targets else {}


def _reporter(events: Events, every: float = 2.0) -> Callable[[str, int, int, float], None]:
    """Per target: the bar (bytes) on every report, and a line with bytes, rate and ETA every `every` s."""
    said: dict[str, float] = {}

    def report(target: str, done: int, total: int, rate: float) -> None:
        events.progress(f"model → {target}", done, max(total, done))
        now = time.monotonic()
        if now - said.get(target, 0.0) >= every or done >= total:
            said[target] = now
            eta = "done" if done >= total else f"ETA {(total - done) / rate:.0f} s" if rate > 0 else "ETA unknown"
            events.note(f"{done / 1e6:.1f} of {total / 1e6:.1f} MB, {rate / 1e6:.1f} MB/s, {eta}", target)
    return report


def holder(conns: dict[str, NodeConnection], inventory: Inventory, repo: str, revision: str,
           prefer: str) -> tuple[str, str] | None:
    """(node, commit) of a node whose cache resolves `revision` to a snapshot: `prefer` first, then rank order."""
    order = [prefer] + [n.name for n in inventory.ranked if n.name != prefer]
    for name in order:
        if name in conns:
            commit = revision_on(conns[name], inventory.node(name).hf_cache, repo, revision)
            if commit:
                return name, commit
    return None


def download(conn: NodeConnection, inventory: Inventory, recipe: Recipe, revision: str, events: Events,
             endpoint: str | None = None) -> str:
    """The download on `conn`'s node, in the pinned image, as the login user; returns the commit."""
    image = recipe.image.id or recipe.image.ref
    uid = f"{conn.run(['id', '-u'], check=True).stdout.strip()}:{conn.run(['id', '-g'], check=True).stdout.strip()}"
    endpoint = endpoint or os.environ.get("HF_ENDPOINT")
    if not _COMMIT.match(revision):
        events.note(f"asking the Hub at {endpoint or 'https://huggingface.co'} which commit {revision} names "
                    f"(waiting at most {HUB_WAIT:g} s for its answer), then downloading it", conn.name)
    events.note(f"downloading {recipe.model.repo}@{revision} with huggingface_hub in {image[:19]}", conn.name)
    got = download_on(conn, image_id=image, hf_cache=inventory.node(conn.name).hf_cache, repo=recipe.model.repo,
                      revision=revision, endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None, uid=uid)
    return got.commit


def offline_commit(conn: NodeConnection, inventory: Inventory, repo: str, want: str, events: Events) -> str:
    """`--offline`: the commit `source`'s cache names for `want`, the Hub not asked; NodeError when it names
    none (nothing to copy from)."""
    commit = revision_on(conn, inventory.node(conn.name).hf_cache, repo, want)
    if not commit:
        raise NodeError(conn.name, f"--offline: this node's cache holds no snapshot of {repo}@{want} (no refs/{want} "
                                   "or no snapshot directory): nothing to copy without the Hub")
    if not _COMMIT.match(want):
        events.note(f"{want} resolved from {conn.name}'s cache to {commit}, the Hub was not reached (--offline): "
                    "the Hub may name a newer commit", conn.name)
    return commit


def pull_on(cluster: Cluster, conns: dict[str, NodeConnection], inventory: Inventory, recipe: Recipe,
            events: Events, *, source: str, revision: str | None, streams: int = 4,
            endpoint: str | None = None, offline: bool = False) -> PullResult:
    """Download on `source` unless it already holds the commit (an explicit branch is always resolved by
    the Hub: it may have moved; with `offline`, by `source`'s cache, and nothing is downloaded), then copy
    to every other node."""
    want = wanted_revision(recipe, revision)
    repo = recipe.model.repo
    if offline:
        commit = offline_commit(conns[source], inventory, repo, want, events)
    else:
        commit = revision_on(conns[source], inventory.node(source).hf_cache, repo, want) if _COMMIT.match(want) else ""
    downloaded = not commit
    if not commit:
        commit = download(conns[source], inventory, recipe, want, events, endpoint)
    result = PullResult(commit, source, downloaded)
    ref = "" if _COMMIT.match(want) else want
    result.copies = sync_model(cluster, conns, inventory, repo, commit, source, events, streams=streams, ref=ref)
    return result


def check_fit(op: Operation, recipe_path: str | Path, recipe: Recipe, inventory: Inventory, want: str,
              events: Events, offline: bool) -> None:
    """`fit` before the download, with each node's MemTotal: DoesNotFit (nothing moved) when the model cannot
    fit. When it cannot be sized (the Hub not reached from here, no headers) the pull goes on, saying so:
    the download then meets the same Hub and says what it found."""
    dep = Deployment(recipe, inventory, str(recipe_path), "")
    try:
        answer = fit_on(op.cluster, list(op.alive), dep, revision=want, hub=not offline)
    except (FitUnknown, HubError) as exc:
        events.note(f"fit not judged ({exc}): going on; `spark-deploy fit RECIPE` answers once the headers can "
                    "be read")
        return
    if not answer.ok:
        raise DoesNotFit(f"{recipe.model.repo}@{want} cannot fit: {answer.summary()} (headers: {answer.source}; "
                         f"memory: {answer.memory_from}). Nothing was downloaded. {' | '.join(answer.fixes())} "
                         "(`spark-deploy fit RECIPE` shows every node; --no-fit pulls anyway)")
    first = answer.nodes[0].fit if answer.nodes else None
    if first is not None:
        kv = (f"{first.tokens:,} KV tokens ({first.concurrency:.2f}x max_model_len)" if first.kv is not None
              else "KV not judged")
        events.note(f"fit: {first.weights / (1 << 30):.1f} GiB of weights per rank, {kv} on {answer.nodes[0].node} "
                    f"(headers: {answer.source})")


def pull(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, *, node: str | None = None,
         revision: str | None = None, streams: int = 4, endpoint: str | None = None,
         events: Events | None = None, offline: bool = False, fit: bool = True) -> PullResult:
    """The command: every node must answer (a node left out would serve another model or none). The
    deploy lock is not taken: a pull of hundreds of GB must not block `status`/`down` for an hour, and it
    never touches what serves (a blob is renamed into place only whole and verified). With `fit`, `fit`
    runs first and a model that cannot fit is refused before a byte moves."""
    events = events or Events()
    wanted_revision(recipe, revision)  # refused before any connection
    source = node or inventory.head
    with Operation(inventory, events, AuditAction.MODEL_PULL, reach=Reach.ALL, lock=Locking.NONE) as op:
        conns = {c.name: c for c in op.alive}
        if fit:
            check_fit(op, recipe_path, recipe, inventory, wanted_revision(recipe, revision), events, offline)
        result = pull_on(op.cluster, conns, inventory, recipe, events, source=source, revision=revision,
                         streams=streams, endpoint=endpoint, offline=offline)
        if revision and recipe.model.revision != result.commit:
            set_model_revision(recipe_path, result.commit)
            result.recipe_updated = True
            whence = (f", resolved from {source}'s cache (the Hub was not reached)" if offline
                      and not _COMMIT.match(revision) else "")
            events.note(f"{recipe_path}: model.revision = {result.commit} (was {recipe.model.revision}){whence}")
        op.done(Outcome.OK, f"{recipe.model.repo}@{result.commit[:12]} on every node; {result.bytes} bytes copied "
                f"from {source}", nodes={n: f"{c.bytes} bytes" for n, c in result.copies.items()})
        return result
