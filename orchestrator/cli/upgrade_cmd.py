"""`upgrade`: a new image for a recipe in one command; what it changes shown (and refused) before anything stops."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_inventory
from ..deploy.up import UpOptions, up as run_up
from ..deploy.upgrade import UpgradeRefused, prepare
from ..transport.node import NodeError
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, err, exit_codes, out
from .deploy_cmds import _events, _signals_for_up, _up_and_report
from .gate_cmd import (GateBlocksOpt, GateFlag, GateMaxTokensOpt, GateProfileOpt, GateShotsOpt, GateToleranceOpt,
                       refuse_gate_options_without_gate, run_gate)


def upgrade(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    image: Annotated[Optional[str], typer.Option("--image", help="The new image reference (registry/name:tag or "
                                                                 "@sha256:); required.")] = None,
    node: Annotated[Optional[str], typer.Option("--node", help="Hold and ask the image on this node (default: "
                                                               "the head).")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the recipe naming the new image "
                                                   "here (default: in place, the old file kept as "
                                                   "RECIPE.before-upgrade).")] = None,
    gate: GateFlag = False,
    profile: GateProfileOpt = "",
    shots: GateShotsOpt = 10,
    tolerance: GateToleranceOpt = 0.03,
    blocks: GateBlocksOpt = "ABAB",
    max_tokens: GateMaxTokensOpt = 800,
    as_json: JsonOpt = False,
) -> None:
    """Move a recipe to a new image: hold it on one node (pulled when absent), pin its ID into the recipe,
    show the vLLM versions and refuse (exit 2, nothing stopped) listing every rendered flag the new parser
    rejects and every overlay whose base the new image changed, and show the defaults it changed for flags
    the recipe leaves unset; when nothing is to fix, `up` (preflight first) — with --gate, `up --gate`: the new
    release stays only if it measures no slower than the serving one. The release records the old and new
    vLLM versions.

    Example: spark-deploy upgrade recipes/dspark-0731-b12x.yaml --image ghcr.io/org/vllm:0.34.0 -o new.yaml
    Example: spark-deploy upgrade r.yaml --image ghcr.io/org/vllm:0.34.0 -o new.yaml --gate --profile code,zh
    """
    with _signals_for_up(), exit_codes(as_json):
        refuse_gate_options_without_gate(gate, profile=profile, shots=shots, tolerance=tolerance, blocks=blocks,
                                         max_tokens=max_tokens)
        if not image:
            raise BadInput("--image REF is required: the image to move the recipe to")
        inv, _ = load_inventory(inventory)
        if node is not None and node not in {n.name for n in inv.nodes}:
            raise BadInput(f"--node {node!r} is not in {inventory}")
        try:
            found, dep = prepare(recipe, inventory, image, node, output)
        except UpgradeRefused as exc:
            raise BadInput(str(exc)) from exc
        except NodeError as exc:
            raise Failed(str(exc)) from exc
        say = err if as_json else out
        say.print(f"{escape(found.node)}: vLLM {escape(found.old_version or 'unknown')} "
                  f"({(found.old_image or 'none')[:19]}) -> {escape(found.new_version)} ({found.new_image[:19]}); "
                  f"recipe {escape(str(found.recipe))}" + (f" (the old one kept as {escape(str(found.backup))})"
                                                           if found.backup else ""))
        if found.defaults_changed:
            say.print(f"defaults the new vLLM changed for flags this recipe leaves unset ({len(found.defaults_changed)}):")
            for line in found.defaults_changed:
                say.print(f"  {escape(line)}")
        else:
            say.print("no default changed for the flags this recipe leaves unset")
        if found.problems:
            raise BadInput("the new image needs changes to this recipe: " + "; ".join(found.problems)
                           + f". Fix them in {found.recipe}, then: spark-deploy upgrade {found.recipe} --image {image}")
        say.print(f"{found.flags_checked} rendered flag(s) known to the new parser; overlays' bases unchanged")
        opts = UpOptions(upgrade=found.record())
        if gate:  # the recipe already names the new image: a rejected one stays in the file, A serves again
            run_gate(dep, str(inventory), opts, profile=profile, shots=shots, tolerance=tolerance, blocks=blocks,
                     max_tokens=max_tokens, as_json=as_json)
            return
        events = _events(as_json)
        _up_and_report(lambda: run_up(dep, events, opts), events, as_json)
