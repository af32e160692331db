"""`overlay hash`: print each overlay target's sha256 in the pinned image (to fill `base_sha256`)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_inventory, load_recipe
from ..facts.overlay_hash import HashRefused, image_hashes
from ..transport.node import NodeError
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, emit_json, exit_codes, out
from .conventions import sub_app

app = sub_app(help="Files mounted over the image (mounts.overlays): what they were written against.")


@app.command("hash")
def hash_(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    node: Annotated[Optional[str], typer.Option("--node", help="Run the image on this node (default: the head).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the sha256 of each overlay target in the pinned image (a throwaway container, nothing left
    behind), next to the recipe's base_sha256: copy it there when the patch was written against this image.
    Exit 1 when a target is not in the image.

    Example: spark-deploy overlay hash recipes/dspark-0731-b12x.yaml
    """
    with exit_codes(as_json):
        spec, _ = load_recipe(recipe)
        inv, _ = load_inventory(inventory)
        if node is not None and node not in {n.name for n in inv.nodes}:
            raise BadInput(f"--node {node!r} is not in {inventory}")
        try:
            name, found = image_hashes(spec, inv, node)
        except HashRefused as exc:
            raise BadInput(str(exc)) from exc
        except NodeError as exc:
            raise Failed(str(exc)) from exc
        rows = [{"source": o.source, "target": o.target, "sha256": g.sha256, "in_image": g.exists,
                 "base_sha256": o.base_sha256, "matches": o.base_sha256 is not None and o.base_sha256 == g.sha256}
                for o, g in zip(spec.mounts.overlays, found)]
        gone = [r["target"] for r in rows if not r["in_image"]]
        if as_json:
            emit_json({"ok": not gone, "node": name, "image": spec.image.id, "overlays": rows})
        else:
            out.print(f"{escape(name)}: image {spec.image.id}")
            for r in rows:
                if not r["in_image"]:
                    out.print(f"  {escape(r['target'])}: [bold red]not in the image[/] (renamed or removed upstream?)")
                    continue
                said = ("same as base_sha256" if r["matches"] else "no base_sha256 yet" if r["base_sha256"] is None
                        else f"[yellow]differs[/] from base_sha256 {r['base_sha256']}")
                out.print(f"  {escape(r['target'])}: {r['sha256'] or 'not a readable file'}  ({said})")
        if gone:
            raise Failed(f"not in image {spec.image.id}: {', '.join(gone)}")
