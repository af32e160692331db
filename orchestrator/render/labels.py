"""The label vocabulary on every container spark-deploy starts: rendered as pairs, parsed back typed.

Containers are recognised by these labels, never by name alone: a container named like ours without
`spark-deploy.managed=true` is someone else's and is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum


class Label(StrEnum):
    MANAGED = "spark-deploy.managed"
    CLUSTER = "spark-deploy.cluster"
    RECIPE = "spark-deploy.recipe"
    RECIPE_DIGEST = "spark-deploy.recipe-hash"  # provenance: the recipe model's digest (descriptions included)
    PLAN_HASH = "spark-deploy.plan-hash"  # identity: what runs (image, argv, env, env-file paths)
    RUN = "spark-deploy.run"  # the `up` that created the container
    RANK = "spark-deploy.rank"
    WORLD = "spark-deploy.world"  # how many ranks the plan has: a missing one is visible from the others
    NODE = "spark-deploy.node"
    SERVE_PORT = "spark-deploy.serve-port"
    MASTER_PORT = "spark-deploy.master-port"
    SERVED_MODEL = "spark-deploy.served-model"


MANAGED_FILTER = f"label={Label.MANAGED}=true"


@dataclass(frozen=True)
class ContainerLabels:
    """What our labels say about one container. Field order is the rendered order."""

    cluster: str
    recipe: str
    recipe_digest: str
    plan_hash: str
    run: str
    rank: int
    world: int
    node: str
    serve_port: int
    master_port: int
    served_model: str

    _KEYS = {
        "cluster": Label.CLUSTER, "recipe": Label.RECIPE, "recipe_digest": Label.RECIPE_DIGEST,
        "plan_hash": Label.PLAN_HASH, "run": Label.RUN, "rank": Label.RANK, "world": Label.WORLD, "node": Label.NODE,
        "serve_port": Label.SERVE_PORT, "master_port": Label.MASTER_PORT, "served_model": Label.SERVED_MODEL,
    }

    def pairs(self) -> list[tuple[str, str]]:
        """(key, value) pairs for `docker run --label`, `managed` first."""
        return [(str(Label.MANAGED), "true")] + [
            (str(self._KEYS[f.name]), str(getattr(self, f.name))) for f in fields(self)]

    @classmethod
    def parse(cls, labels: dict[str, str] | None) -> "ContainerLabels | None":
        """Our labels from a container's `Config.Labels`; None when it is not a container of ours.

        A container of an older spark-deploy (no plan hash, no run) still parses, with empty values."""
        labels = labels or {}
        if labels.get(Label.MANAGED) != "true":
            return None
        raw = {name: labels.get(key, "") for name, key in cls._KEYS.items()}
        numbers = ("rank", "world", "serve_port", "master_port")
        return cls(**{**raw, **{name: _int(raw[name]) for name in numbers}})


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1
