"""`fit`: does the recipe's model fit the nodes? Answered from the headers, before any download."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..checks.hub_headers import HubError
from ..config.load import load_deployment, load_recipe
from ..model.fit import FitAnswer, FitUnknown, fit_given, fit_inventory, parse_memory
from ..transport.node import NodeError
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, emit_json, exit_codes, out, FailedAsShown, only_node

GIB = 1 << 30
_STYLE = {"fits": "green", "kv-not-judged": "yellow"}


def fit(
    ctx: typer.Context,
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    memory: Annotated[Optional[str], typer.Option(
        "--memory", metavar="SIZE", help="Each node's MemTotal, e.g. 128GB (10^9 bytes) or 119.7GiB (a DGX Spark "
                                         "reports about 119.7 GiB); no inventory is read.")] = None,
    nodes: Annotated[Optional[int], typer.Option(
        "--nodes", min=1, help="With --memory: how many nodes (default: vllm.tensor_parallel_size).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Does the recipe's model fit? Weights per rank, KV bytes per token, the tokens that fit at
    gpu_memory_utilization and the concurrency at max_model_len, per node, by preflight's model-fit
    arithmetic. The model is sized from config.json and the safetensors headers: the head's cache when it
    holds the snapshot, else the Hub (HF_ENDPOINT, HF_TOKEN) by range requests, never a weight file.
    Memory: each node's MemTotal (read over SSH), or --memory for every node. Exit 1 when it cannot fit.

    Example: spark-deploy fit recipes/dspark-0731-b12x.yaml -i inventory.yaml
    Example: spark-deploy fit recipes/dspark-0731-b12x.yaml --memory 119.7GiB --nodes 2
    """
    with exit_codes(as_json):
        if nodes is not None and memory is None:
            raise BadInput("--nodes is for --memory (without an inventory): give --memory SIZE too")
        try:
            if memory is not None:
                if getattr(ctx.get_parameter_source("inventory"), "name", "") == "COMMANDLINE" or cluster:
                    raise BadInput("--memory replaces the inventory: give --memory SIZE or -i/-c, not both")
                try:
                    total = parse_memory(memory)
                except ValueError as exc:
                    raise BadInput(str(exc)) from exc
                spec, _ = load_recipe(recipe)
                answer = fit_given(spec, total, nodes or spec.vllm.tensor_parallel_size, memory)
            else:
                answer = fit_inventory(load_deployment(recipe, inventory))
        except (HubError, FitUnknown, NodeError) as exc:
            raise Failed(f"cannot answer: {exc}") from exc
        if as_json:
            emit_json(answer.as_dict())
        else:
            show(answer)
        if not answer.ok:
            raise FailedAsShown(answer.summary(),
                                node=only_node(n.node for n in answer.nodes if n.fit is None or n.state.fails))


def _g(n: int) -> str:
    return f"{n / GIB:.1f}"


def show(answer: FitAnswer) -> None:
    table = Table(title=f"fit: {answer.repo}@{answer.revision[:12]} at TP {answer.tp}")
    for col in ("node", "MemTotal GiB", "budget GiB", "weights/rank GiB", "KV memory GiB", "KV B/token",
                "tokens", "concurrency", "answer"):
        table.add_column(col, justify="left" if col in ("node", "answer") else "right")
    for n in answer.nodes:
        f = n.fit
        if f is None:
            table.add_row(escape(n.node), _g(n.mem_total), "-", "-", "-", "-", "-", "-", f"[red]{escape(n.error)}[/]")
            continue
        judged = f.kv is not None and f.weights_fit
        style = _STYLE.get(str(f.state), "bold red")
        table.add_row(escape(n.node), _g(f.mem_total), f"{_g(f.budget)} ({f.utilization:g})", _g(f.weights),
                      _g(f.kv_memory), f"{f.kv.bytes_per_token:,}" if f.kv else "cannot judge",
                      f"{f.tokens:,}" if judged else "-",
                      f"{f.concurrency:.2f}x at {f.max_model_len:,}" if judged else "-",
                      f"[{style}]{f.state}[/]")
    out.print(table)
    out.print(f"headers: {escape(answer.source)}")
    out.print(f"memory: {escape(answer.memory_from)}")
    for f in {n.fit.kv.formula() for n in answer.nodes if n.fit and n.fit.kv}:
        out.print(f"KV bytes per token: {escape(f)}")
    for fix in answer.fixes():
        out.print(f"[bold]{'fix' if not answer.ok else 'note'}[/]: {escape(fix)}")
    out.print("[green]ok[/]: fits on every node" if answer.ok else f"[bold red]does not fit[/]: {escape(answer.summary())}")
