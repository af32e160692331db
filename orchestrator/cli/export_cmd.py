"""`export k8s`: the plan `up` runs, written as Kubernetes objects. Reads files only; contacts no node."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_deployment
from ..deploy.context import UpOptions
from ..export.lws import K8sOptions, export_k8s
from ..export.lws_ranks import ExportError
from ..export.options import check_options
from .common import BadInput, ClusterOpt, InventoryOpt, JsonOpt, RecipeArg, emit_json, err, exit_codes
from .conventions import sub_app

app = sub_app(help="Write a deployment for another launcher (today: Kubernetes).")


def _version() -> str:
    try:
        return version("spark-deploy")
    except PackageNotFoundError:
        return "unknown"


@app.command("k8s")
def k8s(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The namespace of the objects.")] = "default",
    out_dir: Annotated[Optional[Path], typer.Option("--output", "-o", metavar="DIR",
                                                    help="Write DIR/RECIPE.k8s.yaml (default: stdout).")] = None,
    image_ref: Annotated[Optional[str], typer.Option(
        "--image-ref", metavar="REPO@sha256:DIGEST",
        help="The registry reference of the pinned image (default: the recipe's ref when it is a digest).")] = None,
    secret_name: Annotated[Optional[str], typer.Option("--secret-name", metavar="NAME",
                                                       help="The Secret holding the recipe's secrets.")] = None,
    hf_cache_claim: Annotated[Optional[str], typer.Option(
        "--hf-cache-claim", metavar="PVC", help="Mount this PersistentVolumeClaim as the HF cache instead of "
                                                "each node's hf_cache directory.")] = None,
    rdma_resource: Annotated[Optional[str], typer.Option(
        "--rdma-resource", metavar="RESOURCE",
        help="A device plugin resource for the HCA (e.g. rdma/rdma_shared_device_a) instead of a privileged "
             "hostPath /dev/infiniband.")] = None,
    ready_timeout: Annotated[float, typer.Option("--ready-timeout", metavar="SECONDS",
                                                 help="The leader's startup probe allows this long to serve.")]
    = UpOptions.ready_timeout,
    as_json: JsonOpt = False,
) -> None:
    """Export RECIPE as a LeaderWorkerSet (one pod per rank) and a Service for its leader.

    Example: spark-deploy export k8s recipes/dspark-0731-b12x.yaml -i inventory.yaml -o k8s/
    """
    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory)
        opts = K8sOptions(namespace=namespace, image_ref=image_ref, secret_name=secret_name,
                          hf_cache_claim=hf_cache_claim, rdma_resource=rdma_resource, ready_timeout=ready_timeout,
                          version=_version())
        checked = check_options(dep, opts)
        errors = list(checked.errors)
        if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
            errors.append(f"--output {out_dir} is a file: it names the directory to write RECIPE.k8s.yaml in")
        if errors:
            raise BadInput("export k8s: " + "; ".join(errors) + " (nothing written)")
        try:
            export = export_k8s(dep, opts)
        except ExportError as exc:
            raise BadInput(f"{recipe}: {exc}") from None
        if not as_json:
            for why in checked.ignored:
                err.print(f"[yellow]warning[/]: {escape(why)}")
        text = export.yaml()
        path = None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / f"{export.plan.recipe}.k8s.yaml"
            path.write_text(text)
        if as_json:
            emit_json({"plan_hash": export.plan.plan_hash, "recipe_digest": export.plan.recipe_digest,
                       "name": export.name, "file": str(path) if path else None, "manifests": export.manifests,
                       "substitutions": {role: [vars(s) for s in subs] for role, subs in export.substitutions.items()},
                       "header": export.header, "warnings": checked.ignored})
        elif path is None:
            typer.echo(text, nl=False)
        else:
            err.print(f"wrote {path}: LeaderWorkerSet {export.name} ({len(export.plan.ranks)} pods) and its Service")
