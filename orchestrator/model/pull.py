"""`model pull`: the recipe's model on every node, downloaded once, copied node to node as verified blobs.

1. the revision must be a commit (a branch moves: two nodes downloading `main` a day apart can hold two
   models); `--revision BRANCH` is resolved by the download and the commit written into the recipe;
2. the source node (default the head) downloads it unless it already holds that snapshot (model/download);
3. every other node gets the blobs it lacks or holds damaged from the source, over the fabric (model/copy),
   all targets at once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..checks.model_cache import revision_on
from ..config.edit import set_model_revision
from ..config.inventory import Inventory
from ..config.recipe import Recipe
from ..operation import AuditAction, Locking, Operation, Outcome, Reach
from ..runner.events import Events
from ..transport.group import Cluster
from ..transport.node import NodeConnection, NodeError
from . import copy as blobcopy
from .download import download_on
from .scripts import LIST_SH, Listing, parse_listing

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


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
               source: str, events: Events, *, streams: int = 2, ref: str = "") -> dict[str, blobcopy.CopyResult]:
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
                                   ref=ref, on_progress=report)

    targets = [c for name, c in conns.items() if name != source]
    return cluster.each(one, targets) if targets else {}


def _reporter(events: Events) -> Callable[[str, int, int, float], None]:
    def report(target: str, done: int, total: int, rate: float) -> None:
        eta = (total - done) / rate if rate > 0 else 0.0
        events.progress(f"model → {target} ({rate / 1e6:.1f} MB/s, ETA {eta:.0f} s)", done, max(total, done))
    return report


def pull(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, *, node: str | None = None,
         revision: str | None = None, streams: int = 2, endpoint: str | None = None,
         events: Events | None = None) -> PullResult:
    """The command: every node must answer (a node left out would serve another model or none)."""
    events = events or Events()
    want = wanted_revision(recipe, revision)
    source = node or inventory.head
    repo = recipe.model.repo
    with Operation(inventory, events, AuditAction.MODEL_PULL, reach=Reach.ALL, lock=Locking.NONE) as op:
        conns = {c.name: c for c in op.alive}
        src_node = inventory.node(source)
        commit = revision_on(conns[source], src_node.hf_cache, repo, want) if _COMMIT.match(want) else ""
        downloaded = False
        if not commit:
            image = recipe.image.id or recipe.image.ref
            uid = conns[source].run(["id", "-u"], check=True).stdout.strip() + ":" + \
                conns[source].run(["id", "-g"], check=True).stdout.strip()
            events.note(f"downloading {repo}@{want} with huggingface_hub in {image[:19]}", source)
            got = download_on(conns[source], image_id=image, hf_cache=src_node.hf_cache, repo=repo, revision=want,
                              endpoint=endpoint or os.environ.get("HF_ENDPOINT"), token=os.environ.get("HF_TOKEN"),
                              uid=uid)
            commit, downloaded = got.commit, True
        result = PullResult(commit, source, downloaded)
        if revision and recipe.model.revision != commit:
            set_model_revision(recipe_path, commit)
            result.recipe_updated = True
            events.note(f"{recipe_path}: model.revision = {commit} (was {recipe.model.revision})")
        ref = want if not _COMMIT.match(want) else ""
        result.copies = sync_model(op.cluster, conns, inventory, repo, commit, source, events, streams=streams, ref=ref)
        op.done(Outcome.OK, f"{repo}@{commit[:12]} on every node; {result.bytes} bytes copied from {source}",
                nodes={n: f"{c.bytes} bytes" for n, c in result.copies.items()})
        return result
