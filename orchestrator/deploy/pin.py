"""`pin`: read the image ID that `image.ref` names on one node and write it into the recipe.

RepoDigests do not survive `docker load` (field note 1): the verified ID is what every node must hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..config.edit import set_image_id
from ..config.inventory import Inventory
from ..config.recipe import Recipe
from ..docker_cli.images import ImageIdentity, inspect_image
from ..releases import audit
from ..releases.lock import DeployLock
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection


class PinOutcome(StrEnum):
    PINNED = "pinned"
    ALREADY = "already pinned"


class PinRefused(Exception):
    """The node does not hold what the recipe names, or pinning would overwrite an ID without --replace."""


@dataclass
class PinResult:
    node: str
    found: ImageIdentity
    outcome: PinOutcome
    digest_verified: bool | None  # None: image.ref is a tag, there is no registry digest to verify


def read_identity(conn: NodeConnection, ref: str) -> ImageIdentity | None:
    return inspect_image(conn, ref)


def pin(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, node: str, replace: bool) -> PinResult:
    """Under the deploy lock (an `up` reading this recipe must not see it change half way), with an
    audit line on the head and the node read from."""
    cluster = Cluster(inventory)
    conns = [cluster[inventory.head]] + ([cluster[node]] if node != inventory.head else [])
    try:
        cluster.each(lambda c: c.open(), conns)
        lock = DeployLock(cluster[inventory.head], inventory, audit.command_line(), ttl=300).acquire()
        try:
            result = _pin(recipe_path, recipe, cluster[node], replace)
            audit.append(cluster, inventory, audit.entry("pin", str(result.outcome), detail=f"{recipe_path}: "
                         f"image.id {result.found.id} (from {node})"), conns)
            return result
        finally:
            lock.release()
    except GroupError as exc:
        raise next(iter(exc.failures.values())) from None
    finally:
        cluster.close()


def _pin(recipe_path: str | Path, recipe: Recipe, conn: NodeConnection, replace: bool) -> PinResult:
    node, ref = conn.name, recipe.image.ref
    found = read_identity(conn, ref)
    if found is None:
        raise PinRefused(f"{node} has no image {ref}: pull or load it there first")
    verified = None
    if "@sha256:" in ref:
        verified = ref in found.repo_digests
        if not verified:
            raise PinRefused(f"{node}'s copy does not carry the registry digest {ref.split('@', 1)[1]} (a loaded "
                             "image has no RepoDigests): pin from a node that pulled it")
    if recipe.image.id == found.id:
        return PinResult(node, found, PinOutcome.ALREADY, verified)
    if recipe.image.id is not None and not replace:
        raise PinRefused(f"{recipe_path} is pinned to {recipe.image.id}, {node} holds {found.id}: use --replace to re-pin")
    set_image_id(recipe_path, found.id)
    return PinResult(node, found, PinOutcome.PINNED, verified)
