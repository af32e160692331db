"""`pin`: write the verified image ID of the recipe's image, as a node holds it, into the recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_inventory, load_recipe
from ..deploy.pin import ParserCache, PinOutcome, PinRefused, pin as pin_image
from ..releases.lock import LockError
from ..transport.node import NodeError
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, emit_json, err, exit_codes, out


def pin(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    node: Annotated[Optional[str], typer.Option("--node", help="The node to read the image from (default: the head).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace an image.id that is already set.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Pin the recipe to the image ID that `image.ref` names on a node (RepoDigests do not survive docker load),
    and cache that image's own `vllm serve` parser by its ID: validate, render and up then judge the
    recipe's flags by it.

    Example: spark-deploy pin recipes/dspark-0731-b12x.yaml --node spark-1
    """
    with exit_codes(as_json):
        spec, _ = load_recipe(recipe)
        inv, _ = load_inventory(inventory)
        name = node or inv.head
        if name not in {n.name for n in inv.nodes}:
            raise BadInput(f"--node {name!r} is not in {inventory}")
        try:
            result = pin_image(recipe, spec, inv, name, replace)
        except (NodeError, PinRefused, LockError) as exc:
            raise Failed(str(exc)) from exc
        found = result.found
        if as_json:
            emit_json({"ok": True, "recipe": str(recipe), "node": name, "ref": spec.image.ref, "image_id": found.id,
                       "diff_ids": list(found.diff_ids), "repo_digests": list(found.repo_digests),
                       "digest_verified": result.digest_verified, "outcome": str(result.outcome),
                       "parser": {"state": str(result.parser), "detail": result.parser_note}})
            return
        out.print(f"{escape(name)}: {escape(spec.image.ref)} is {found.id}")
        out.print(f"  layers (DiffIDs): {len(found.diff_ids)}; RepoDigests: {', '.join(found.repo_digests) or 'none'}")
        if result.digest_verified:
            out.print("  [green]verified[/]: this image is the one the registry digest in image.ref names")
        else:
            err.print(f"[yellow]note[/]: {escape(spec.image.ref)} is a tag, not a digest: the ID is what {escape(name)} "
                      "holds under that tag today")
        if result.parser is ParserCache.FAILED:
            err.print(f"[yellow]warning[/]: the image's vLLM parser is not cached ({escape(result.parser_note)}): "
                      "validate, render and up judge flags by the table shipped with spark-deploy")
        else:
            out.print(f"  vLLM parser {result.parser}: {escape(result.parser_note)} (validate, render and up "
                      "judge the recipe's flags by it)")
        if result.outcome is PinOutcome.ALREADY:
            out.print(f"already pinned: {escape(str(recipe))} image.id is {found.id}")
        else:
            out.print(f"[green]pinned[/] {escape(str(recipe))}: image.id = {found.id}")
