"""`model pull`: the recipe's model on every node: downloaded once, copied node to node as verified blobs."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_inventory, load_recipe
from ..model.copy import CopyFailed
from ..model.download import DownloadFailed
from ..model.pull import DoesNotFit, PullRefused, pull as pull_model
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.cancel import Cancelled, interrupt_reason, signals_interrupt
from ..transport.group import GroupError
from ..transport.node import NodeError
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, emit_json, err, exit_codes, out
from .conventions import sub_app

app = sub_app(help="The model's weights on every node: download once, copy blobs over the fabric.")


@app.command()
def pull(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    node: Annotated[Optional[str], typer.Option("--node", help="Download on this node (default: the head).")] = None,
    revision: Annotated[Optional[str], typer.Option(
        "--revision", help="Resolve this branch/tag/commit and write the commit into the recipe.")] = None,
    streams: Annotated[int, typer.Option("--streams", min=1, max=8, help="Blobs copied at once per node (4: the "
                                                                         "fastest measured, docs/performance.md).")] = 4,
    offline: Annotated[bool, typer.Option(
        "--offline", help="Do not ask the Hub: take the commit the source node's cache names for --revision, "
                          "and download nothing.")] = False,
    no_fit: Annotated[bool, typer.Option(
        "--no-fit", help="Do not run `fit` first (it refuses, before any download, a model that cannot fit the "
                         "nodes' memory): for a model meant for other nodes.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Download the recipe's model.repo@revision once (huggingface_hub in the pinned image; HF_TOKEN from the
    environment, never argv), then copy to every other node only the blobs it lacks or holds damaged, node
    to node over the fabric, each verified by its hash before the snapshot links to it.

    A branch or tag is resolved by the Hub (HF_ENDPOINT, its answer waited for at most 15 s): when the Hub
    does not answer, nothing is downloaded and the recipe is left as it was.

    First `fit` sizes the model from its headers (the head's cache, else the Hub: no weights) with each node's
    MemTotal, and a model that cannot fit is refused (exit 1) before a byte moves; --no-fit skips it.

    Example: spark-deploy model pull recipes/dspark-0731-b12x.yaml --revision main
    Example: spark-deploy model pull recipes/dspark-0731-b12x.yaml --revision main --offline
    """
    with exit_codes(as_json):
        spec, _ = load_recipe(recipe)
        inv, _ = load_inventory(inventory)
        if node is not None and node not in {n.name for n in inv.nodes}:
            raise BadInput(f"--node {node!r} is not in {inventory}")
        try:
            with signals_interrupt():  # SIGTERM as Ctrl-C: the remote copies are killed, what arrived is kept
                result = pull_model(recipe, spec, inv, node=node, revision=revision, streams=streams,
                                    events=Events(TerminalSink(err if as_json else out)), offline=offline,
                                    fit=not no_fit)
        except (KeyboardInterrupt, Cancelled) as exc:
            why = interrupt_reason(exc) if isinstance(exc, KeyboardInterrupt) else str(exc)
            raise Failed(f"{why}: what had arrived stays as .incomplete blobs (never linked); run the same "
                         "command again to resume") from exc
        except PullRefused as exc:
            raise BadInput(str(exc)) from exc
        except (DoesNotFit, DownloadFailed, CopyFailed, NodeError, GroupError) as exc:
            raise Failed(str(exc)) from exc
        if as_json:
            emit_json({"ok": True, "repo": spec.model.repo, "commit": result.commit, "source": result.source,
                       "downloaded": result.downloaded, "recipe_updated": result.recipe_updated, "offline": offline,
                       "bytes": result.bytes,
                       "nodes": {n: {"bytes": c.bytes, "blobs": sorted(c.verified), "linked": c.linked}
                                 for n, c in result.copies.items()}})
            return
        for name, copy in sorted(result.copies.items()):
            out.print(f"{escape(name)}: {len(copy.verified)} blob(s) fetched and verified, {copy.bytes} bytes; "
                      f"{copy.linked} snapshot link(s) made or mended")
        out.print(f"[green]ok[/]: {escape(spec.model.repo)}@{result.commit} on every node "
                  f"({result.bytes} bytes copied from {escape(result.source)})")
