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
from ..transport.node import NodeConnection, SSHTarget


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


def read_identity(inventory: Inventory, node: str, ref: str) -> ImageIdentity | None:
    conn = NodeConnection(SSHTarget.of(inventory, inventory.node(node)))
    try:
        conn.open()
        return inspect_image(conn, ref)
    finally:
        conn.close()


def pin(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, node: str, replace: bool) -> PinResult:
    ref = recipe.image.ref
    found = read_identity(inventory, node, ref)
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
