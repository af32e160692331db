"""`demo`: the whole main job on a machine with Docker and no Sparks — a simulated cluster, deployed."""

from __future__ import annotations

import shutil
import sys
from typing import Annotated

import typer
from rich.markup import escape

from ..config.load import load_deployment
from ..deploy import status as status_mod
from ..http_api.endpoint import Endpoint
from ..deploy.up import DeployFailed, UpOptions, up
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..verbosity import Verbosity, level
from .common import Failed, JsonOpt, emit_json, err, exit_codes
from .common import out as _out
from .extras import require_sim


def demo(
    name: Annotated[str, typer.Option("--name", help="Name of the simulated cluster.")] = "demo",
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=8, help="Number of simulated Sparks.")] = 2,
    as_json: JsonOpt = False,
) -> None:
    """Bring up a simulated cluster (real sshd + dockerd per node), deploy the sim recipe, show it serving.
    It shows every check line, as `up -v` does (-q: errors and the result).

    Example: spark-deploy demo --nodes 2
    """
    require_sim("demo")
    from ..sim.cluster import SimCluster
    from ..sim.state import SimError, SimInputError

    out = err if as_json else _out  # --json: the story goes to stderr, stdout holds one JSON object
    with exit_codes(as_json):
        cluster = SimCluster(name)
        try:
            if cluster.info() is None or not cluster.nodes():
                out.print(f"[bold]1. simulated cluster[/] {escape(name)}: starting {nodes} node(s)")
                cluster.up(nodes=nodes)
            else:
                out.print(f"[bold]1. simulated cluster[/] {escape(name)}: already up, reusing it")
        except (SimError, SimInputError) as exc:
            raise Failed(f"simulated cluster: {exc}") from exc
        inventory, recipe = cluster.inventory_path, cluster.recipe_path
        dep = load_deployment(recipe, inventory)
        if len(dep.inventory.nodes) != dep.recipe.vllm.tensor_parallel_size:
            raise Failed(f"cluster {name} has {len(dep.inventory.nodes)} nodes but its recipe wants "
                         f"{dep.recipe.vllm.tensor_parallel_size}; `spark-deploy sim down --name {name}` and retry")
        out.print(f"[bold]2. spark-deploy up[/] {escape(str(recipe))} -i {escape(str(inventory))}")
        shown = Verbosity.VERBOSE if level() is Verbosity.NORMAL else level()  # a demonstration shows its proofs
        events = Events(TerminalSink(out, shown))
        try:
            result = up(dep, events, UpOptions())
        except DeployFailed as exc:
            raise Failed(str(exc)) from exc
        finally:
            events.close()
        out.print("[bold]3. status[/]")
        report = status_mod.collect(dep.inventory, dep.recipe.name)
        for row in report.rows:
            out.print(f"  {row.node}: {row.container} {row.state}, rank {row.rank}, image {row.image_id[:19]}")
        for e in report.endpoints:
            out.print(f"  endpoint {e.url}: {'healthy' if e.healthy else 'NOT healthy'}, models {', '.join(e.models)}")
        out.print("[bold]4. one completion[/]")
        endpoint = Endpoint(dep.inventory.ranked[0].address, dep.recipe.serve.port)
        answer = endpoint.complete(result.model, "Two DGX Sparks walk into a bar and", max_tokens=24)
        usage = answer.get("usage") if isinstance(answer.get("usage"), dict) else {}
        if as_json:
            emit_json({"ok": True, "cluster": name, "inventory": str(inventory), "recipe": str(recipe),
                       "endpoint": endpoint.url, "model": result.model, "release": result.release,
                       "plan_hash": result.plan_hash, "completion": answer["choices"][0]["text"],
                       "completion_tokens": usage.get("completion_tokens")})
            return
        out.print(f"  {escape(answer['choices'][0]['text'])!r}  ({usage.get('completion_tokens')} tokens)")
        sd = "spark-deploy" if shutil.which("spark-deploy") else sys.argv[0]  # what this shell can run
        out.print("\n[bold]Look around[/]:")
        for line in (f"{sd} status -i {inventory}", f"{sd} logs -i {inventory} --tail 20",
                     f"{sd} render {recipe} -i {inventory}",
                     f"curl -s {endpoint.url}/v1/models", f"curl -s {endpoint.url}/metrics | grep spec_decode",
                     f"{sd} sim fault spark-2 stop-dockerd --name {name}   # then try {sd} up again"):
            out.print(f"  {escape(line)}")
        out.print("[bold]Tear down[/]:")
        out.print(f"  {escape(f'{sd} down -i {inventory} && {sd} sim down --name {name}')}")
