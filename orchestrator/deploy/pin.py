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
from ..operation import AuditAction, Operation, Outcome, Reach
from ..runner.events import Events
from ..transport.node import NodeConnection, NodeError


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


def pin(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, node: str, replace: bool,
        events: Events | None = None) -> PinResult:
    """Under the deploy lock (an `up` reading this recipe must not see it change half way), with an
    audit line; the head (the lock) and the node read from must answer, the others need not."""
    with Operation(inventory, events or Events(), AuditAction.PIN, reach=Reach.HEAD, ttl=300) as op:
        if node in op.unreachable:
            raise NodeError(node, f"unreachable: {op.unreachable[node]}")
        try:
            result = _pin(recipe_path, recipe, op.cluster[node], replace)
        except PinRefused as exc:
            op.done(Outcome.REFUSED, str(exc))
            raise
        op.done(result.outcome, f"{recipe_path}: image.id {result.found.id} (from {node})")
        return result


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
