"""`overlay hash`: each overlay target's sha256 in the pinned image, to write into `base_sha256`.

The same probe and script (overlays.py) as the `overlay-base` check (preflight's checks_overlays.py), without
sources: one throwaway container of the pinned image on the head (`--rm --pull never --network none`, no GPU,
nothing mounted), so what `overlay hash` prints is exactly what preflight compares.
"""

from __future__ import annotations

from ..config.inventory import Inventory
from ..config.recipe import Recipe
from ..transport.node import NodeConnection, NodeError, SSHTarget
from .overlays import PROBE_SH, InImage, parse_probe, probe_spec


class HashRefused(Exception):
    """Nothing to hash: no overlays, or the recipe is not pinned to an image ID."""


def image_hashes(recipe: Recipe, inventory: Inventory, node: str | None = None) -> tuple[str, list[InImage]]:
    """(the node asked, one InImage per overlay in the recipe's order). Raises HashRefused, NodeError."""
    overlays = recipe.mounts.overlays
    if not overlays:
        raise HashRefused("the recipe has no mounts.overlays")
    if recipe.image.id is None:
        raise HashRefused("image.id is not set: run `spark-deploy pin RECIPE` first (the hash is the pinned image's)")
    name = node or inventory.head
    conn = NodeConnection(SSHTarget.of(inventory, inventory.node(name)))
    try:
        conn.open()
        result = conn.run_script(PROBE_SH, recipe.image.id, probe_spec(overlays, mounted=False), timeout=120)
    finally:
        conn.close()
    if not result.ok:
        raise NodeError(name, f"running python3 in image {recipe.image.id} failed: "
                              f"{(result.stderr or result.stdout).strip()[-300:]}")
    try:
        found = parse_probe(result.stdout) or []
    except ValueError as exc:
        raise NodeError(name, f"unexpected output from the image's probe: {exc}") from exc
    if len(found) != len(overlays):
        raise NodeError(name, f"the probe answered {len(found)} of {len(overlays)} overlays")
    return name, found
