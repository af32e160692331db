"""What bench measures: a URL given by hand, or the serving release of a recipe on its cluster.

With a recipe, the release that serves now is judged from the running containers (releases/serving.py),
the endpoint is the head's serve port, the draft budget k comes from the recipe, and the ceiling's
headers are read from the head node's model snapshot (headers.py: a few KB, never the weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from ..config.inventory import Inventory
from ..config.load import Deployment
from ..http_api.endpoint import Endpoint
from ..operation import Observation, OperationRefused, Reach
from ..transport.group import Cluster, Connector
from ..transport.node import NodeError
from ..checks.safetensors_headers import HeaderError, Headers, read_headers


class TargetError(Exception):
    """No release of this recipe serves, or the cluster cannot be read (exit 1)."""


@dataclass
class Target:
    url: str
    model: str
    draft_budget: int | None = None
    nodes: int = 1
    recipe: str | None = None
    release: int | None = None
    headers: Headers | None = None
    headers_error: str | None = None

    def as_dict(self) -> dict:
        return {"url": self.url, "model": self.model, "draft_budget": self.draft_budget, "nodes": self.nodes,
                "recipe": self.recipe, "release": self.release}


def _serving(seen) -> object:
    """The serving release as the observation read it (every node must have answered)."""
    state = seen.state
    if not state.serving_known:
        raise TargetError("cannot tell what serves: " + "; ".join(state.problems()))
    return state.serving


def serving_now(inv: Inventory, connector: Connector | None = None):
    """The release serving on the inventory's cluster now (releases.record.Release), or None."""
    try:
        with Observation(inv, reach=Reach.ALL, what="bench (finding the serving release)",
                         cluster_factory=partial(Cluster, connector=connector)) as seen:
            return _serving(seen)
    except (OperationRefused, NodeError) as exc:
        raise TargetError(str(exc)) from None


def of_recipe(dep: Deployment, want_headers: bool = True, connector: Connector | None = None) -> Target:
    recipe, inv = dep.recipe, dep.inventory
    head = inv.ranked[0]
    spec = recipe.vllm.speculative_config
    target = Target(url=Endpoint(head.address, recipe.serve.port).url, model=recipe.served_name,
                    draft_budget=spec.num_speculative_tokens if spec else None,
                    nodes=recipe.vllm.tensor_parallel_size, recipe=recipe.name)
    try:
        with Observation(inv, reach=Reach.ALL, what="bench (finding the serving release)",
                         cluster_factory=partial(Cluster, connector=connector)) as seen:
            now = _serving(seen)
            if now is None:
                raise TargetError(f"no release serves on {inv.cluster}: deploy {recipe.name} with `spark-deploy up` "
                                  "first")
            if now.recipe != recipe.name:
                raise TargetError(f"release {now.id} of recipe {now.recipe!r} serves on {inv.cluster}, "
                                  f"not {recipe.name!r}")
            target.release = now.id
            if want_headers:
                try:
                    target.headers = read_headers(seen.cluster.head, head.hf_cache, recipe.model.repo,
                                                  recipe.model.revision)
                except (HeaderError, NodeError) as exc:
                    target.headers_error = str(exc)
    except (OperationRefused, NodeError) as exc:
        raise TargetError(str(exc)) from None
    return target
