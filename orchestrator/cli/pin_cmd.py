"""`pin`: write the verified image ID of the recipe's image, as a node holds it, into the recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.edit import set_image_id
from ..config.load import load_recipe, load_inventory
from ..docker_cli.images import inspect_image
from ..transport.node import NodeConnection, NodeError, SSHTarget
from .common import BadInput, Failed, InventoryOpt, RecipeArg, err, exit_codes, out


def pin(
    recipe: RecipeArg,
    inventory: InventoryOpt = Path("inventory.yaml"),
    node: Annotated[Optional[str], typer.Option("--node", help="The node to read the image from (default: the head).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace an image.id that is already set.")] = False,
) -> None:
    """Pin the recipe to the image ID that `image.ref` names on a node (RepoDigests do not survive docker load).

    Example: spark-deploy pin recipes/dspark-0731-b12x.yaml --node spark-1
    """
    with exit_codes():
        spec, _ = load_recipe(recipe)
        inv, _ = load_inventory(inventory)
        name = node or inv.head
        if name not in {n.name for n in inv.nodes}:
            raise BadInput(f"--node {name!r} is not in {inventory}")
        conn = NodeConnection(SSHTarget.of(inv, inv.node(name)))
        try:
            conn.open()
            found = inspect_image(conn, spec.image.ref)
        except NodeError as exc:
            raise Failed(str(exc)) from None
        finally:
            conn.close()
        if found is None:
            raise Failed(f"{name} has no image {spec.image.ref}: pull or load it there first")
        out.print(f"{escape(name)}: {escape(spec.image.ref)} is {found.id}")
        out.print(f"  layers (DiffIDs): {len(found.diff_ids)}; RepoDigests: {', '.join(found.repo_digests) or 'none'}")
        if "@sha256:" in spec.image.ref:
            if spec.image.ref in found.repo_digests:
                out.print("  [green]verified[/]: this image is the one the registry digest in image.ref names")
            else:
                raise Failed(f"{name}'s copy does not carry the registry digest {spec.image.ref.split('@', 1)[1]} "
                             "(a loaded image has no RepoDigests): pin from a node that pulled it")
        else:
            err.print(f"[yellow]note[/]: {escape(spec.image.ref)} is a tag, not a digest: the ID is what {escape(name)} "
                      "holds under that tag today")
        if spec.image.id == found.id:
            out.print(f"already pinned: {escape(str(recipe))} image.id is {found.id}")
            return
        if spec.image.id is not None and not replace:
            raise Failed(f"{recipe} is pinned to {spec.image.id}, {name} holds {found.id}: use --replace to re-pin")
        set_image_id(recipe, found.id)
        out.print(f"[green]pinned[/] {escape(str(recipe))}: image.id = {found.id}")
