"""`validate` and `render`: read-only commands that never contact a node."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.hints import suggest
from ..config.load import load_deployment
from ..config.local_checks import local_problems
from ..config.source import ConfigError
from ..config.vllm_flags import flag_issues, judged_against
from ..verbosity import Verbosity, level
from .common import (BadInput, ClusterOpt, InventoryOpt, JsonOpt, NodeOpt, RecipeArg, SetOpt, emit_json, err, exit_codes,
                     out)


def validate(recipe: RecipeArg, inventory: InventoryOpt = None, cluster: ClusterOpt = None,
             overrides: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Check a recipe against an inventory, and this machine's SSH key, known_hosts and the recipe's
    secrets, without contacting any node.

    Example: spark-deploy validate recipes/dspark-0731-b12x.yaml -i inventory.yaml
    Example: spark-deploy validate recipes/dspark-0731-b12x.yaml --set vllm.max_model_len=8192
    """
    from ..acceptance.problems import acceptance_problems

    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory, overrides or ())
        problems = local_problems(dep, os.environ) + acceptance_problems(dep)
        problems += flag_issues(dep.recipe, dep.recipe_doc)
        if problems:
            raise ConfigError(problems)
        unpinned = "image.id is not pinned; `up` will refuse to start an unpinned image"
        if as_json:
            emit_json({"ok": True, "recipe": str(recipe), "name": dep.recipe.name, "inventory": str(inventory),
                       "overrides": list(dep.overrides),
                       "nodes": [{"node": n.name, "rank": r} for r, n in enumerate(dep.inventory.ranked)],
                       "warnings": [unpinned] if dep.recipe.image.id is None else [],
                       "flag_table": judged_against(dep.recipe)})
            return
        nodes = ", ".join(f"{n.name} (rank {r})" for r, n in enumerate(dep.inventory.ranked))
        out.print(f"[green]ok[/] {escape(str(recipe))}: {escape(dep.recipe.name)} on {nodes}")
        out.print(f"  vLLM flags judged against {escape(judged_against(dep.recipe))}")
        if dep.recipe.image.id is None:
            err.print(f"[yellow]warning[/]: {unpinned}")


def render(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    node: NodeOpt = None,
    overrides: SetOpt = None,
    one_line: Annotated[bool, typer.Option("--one-line", help="Each command on one line instead of one argument "
                                                              "per line.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Print each node's `docker run` command (head first) without running anything: one argument per line,
    continued with `\\`, quoted so it pastes into a shell as it is (--one-line: one line each).

    Example: spark-deploy render recipes/dspark-0731-b12x.yaml --node spark-2
    Example: spark-deploy render recipes/dspark-0731-b12x.yaml --one-line
    """
    from ..render.plan import PREVIEW_RUN, build_plan  # jinja2: only `render` needs it
    from ..render.shell import continued

    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory, overrides or ())
        problems = flag_issues(dep.recipe, dep.recipe_doc)  # the verdict validate and up give
        if problems:
            raise ConfigError(problems)
        full = build_plan(dep, PREVIEW_RUN)
        plan = list(full.ranks)
        if node is not None:
            plan = [launch for launch in plan if launch.node.name == node]
            if not plan:
                names = ", ".join(n.name for n in dep.inventory.nodes)
                raise BadInput(f"--node {node!r} is not in {inventory}{suggest(node, [n.name for n in dep.inventory.nodes])} "
                               f"(nodes: {names})")
        if as_json:
            emit_json([{"node": l.node.name, "rank": l.rank, "container": l.container, "plan_hash": full.plan_hash,
                        "recipe_digest": full.recipe_digest, "argv": list(l.argv), "printed": l.printed,
                        "secrets_env_file": l.env_file} for l in plan])
        else:
            if level() is not Verbosity.QUIET:
                err.print(f"plan {full.plan_hash} (recipe {escape(full.recipe)} digest {full.recipe_digest}); "
                          f"`up` labels its containers with a fresh run ID where this shows {PREVIEW_RUN!r}")
                err.print(f"vLLM flags judged against {escape(judged_against(dep.recipe))}")
            for launch in plan:
                role = "head" if launch.is_head else "peer"
                out.print(f"# {escape(launch.node.name)}: rank {launch.rank} ({role}), container {launch.container}")
                out.print(launch.printed if one_line else continued(launch.argv), markup=False)
                out.print()
        if dep.recipe.image.id is None:
            err.print("[yellow]warning[/]: image.id is not pinned: shown with the reference; `up` refuses to run it")
