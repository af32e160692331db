"""`accept`: the acceptance checks against the release serving now (read only: an Observation, nothing
recorded). The recipe is the release's own as recorded, or the one given, which must be the one serving."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable

from ..config.load import load_deployment, load_inventory, load_kept_recipe
from ..config.recipe import Recipe
from ..http_api.endpoint import Endpoint
from ..operation import Observation, OperationRefused, Reach
from ..transport.group import Cluster, Connector
from ..transport.node import NodeError
from .context import context_for
from .model import Result
from .run import blocking, run_checks


class AcceptError(Exception):
    """Nothing to check: no release serves, another recipe serves, or the cluster cannot be read (exit 1)."""


@dataclass
class AcceptReport:
    release: int
    recipe: str
    endpoint: str
    results: list[Result]

    @property
    def ok(self) -> bool:
        return not blocking(self.results)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "release": self.release, "recipe": self.recipe, "endpoint": self.endpoint,
                "results": [r.as_dict() for r in self.results]}


def accept(inventory_path: Path, recipe_path: Path | None = None, only: list[str] | None = None, *,
           connector: Connector | None = None, endpoint_at: Callable[[str, int], Endpoint] = Endpoint,
           on_result=None) -> AcceptReport:
    dep = load_deployment(recipe_path, inventory_path) if recipe_path else None
    inv = dep.inventory if dep else load_inventory(inventory_path)[0]
    try:
        with Observation(inv, reach=Reach.ALL, what="accept (finding the serving release)",
                         cluster_factory=partial(Cluster, connector=connector)) as seen:
            state = seen.state
    except (OperationRefused, NodeError) as exc:
        raise AcceptError(str(exc)) from None
    if not state.serving_known:
        raise AcceptError("cannot tell what serves: " + "; ".join(state.problems()))
    now = state.serving
    if now is None:
        raise AcceptError(f"no release serves on {inv.cluster}: nothing to accept (`spark-deploy up` first)")
    if dep is not None and now.recipe != dep.recipe.name:
        raise AcceptError(f"release {now.id} of recipe {now.recipe!r} serves on {inv.cluster}, not {dep.recipe.name!r}")
    recipe: Recipe = dep.recipe if dep else load_kept_recipe(
        now.recipe_text, f"spark-deploy-releases/{now.cluster}", f"release-{now.id:06d}-{now.recipe}.yaml",
        inventory_path).recipe
    endpoint = endpoint_at(inv.ranked[0].address, recipe.serve.port)
    # greedy outputs compared with what this release answered at its `up` (or, unrecorded, the one before)
    results = run_checks(endpoint, context_for(recipe, state.history.releases, now.id + 1), only, on_result)
    return AcceptReport(now.id, recipe.name, endpoint.url, results)
