"""A deployment as a value: every rank's launch spec and argv, the image identity, and the plan hash.

The plan hash is the identity of "this exact launch": it covers everything that shapes what runs (the image
ID, every rank's argv — env, mounts, env-file paths, vLLM args included) and nothing that does not (the
recipe's description, log-expectation patterns, the hash label itself, the run ID). "Already serving" means
the running containers carry this plan hash; the recipe digest stays on them as provenance.

A container's name carries its plan (`sd-RECIPE-rN-HASH8`, render/spec.container_name), so the hash is
computed over the argv with the plan-free base name `sd-RECIPE-rN` in its place: the hashes of releases
deployed before names carried their plan are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shlex
import time
from dataclasses import dataclass, replace

from ..config.load import Deployment
from ..config.inventory import Node
from .labels import ContainerLabels
from .spec import LaunchSpec, build_spec, container_name, docker_run_argv


@dataclass(frozen=True)
class RankLaunch:
    """What one node runs. `argv` is the truth; `printed` is only its shell-quoted display."""

    spec: LaunchSpec
    labels: ContainerLabels
    argv: tuple[str, ...]

    @property
    def node(self) -> Node:
        return self.spec.node

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def container(self) -> str:
        return self.spec.container

    @property
    def env_file(self) -> str | None:
        return self.spec.env_file

    @property
    def is_head(self) -> bool:
        return self.spec.is_head

    @property
    def printed(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Plan:
    recipe: str
    cluster: str
    image_id: str
    image_ref: str
    plan_hash: str
    recipe_digest: str
    run_id: str
    ranks: tuple[RankLaunch, ...]

    @property
    def head(self) -> RankLaunch:
        return self.ranks[0]

    @property
    def peers(self) -> tuple[RankLaunch, ...]:
        return self.ranks[1:]

    def named_for_run(self) -> "Plan":
        """The same plan with every name suffixed by the run ID: for an `up` whose plan's names are already
        held by earlier containers of this same plan (kept for undo and rollback, never renamed)."""
        ranks = tuple(_launch(replace(l.spec, container=container_name(self.recipe, l.rank, self.plan_hash,
                                                                       self.run_id)), l.labels) for l in self.ranks)
        return replace(self, ranks=ranks)

    def for_cluster(self, key: str) -> "Plan":
        """The same plan labelled for the cluster whose identity the head holds (releases/identity.py): the
        argv changes only in its label, the plan hash (over the argv without labels) not at all."""
        if key == self.cluster:
            return self
        ranks = tuple(_launch(l.spec, replace(l.labels, cluster=key)) for l in self.ranks)
        return replace(self, cluster=key, ranks=ranks)

    def on(self, node: str) -> RankLaunch:
        for launch in self.ranks:
            if launch.node.name == node:
                return launch
        raise KeyError(node)

    @property
    def ports(self) -> list[int]:
        """Ports the head binds: the API, and the rendezvous when there are peers."""
        return [self.head.spec.serve_port] + ([self.head.spec.master_port] if self.peers else [])


def new_run_id() -> str:
    """Sortable and unique per `up`: UTC time plus randomness."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(3)


def plan_hash(specs: list[LaunchSpec], image_id: str) -> str:
    """sha256 over the image ID and each rank's argv rendered with no labels (so no hash, run or digest) and
    the base name `sd-RECIPE-rN` (the specs as build_spec makes them, before the name takes the hash)."""
    canonical = json.dumps({"image": image_id, "ranks": [list(docker_run_argv(s, [])) for s in specs]},
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def build_plan(dep: Deployment, run_id: str | None = None) -> Plan:
    """Every rank's launch, head first. Pure: reads only the two models."""
    recipe, inventory = dep.recipe, dep.inventory
    specs = [build_spec(dep, node, rank) for rank, node in enumerate(inventory.ranked)]
    image_id = recipe.image.id or recipe.image.ref
    digest, run = plan_hash(specs, image_id), run_id or new_run_id()
    ranks = []
    for spec in specs:
        labels = ContainerLabels(
            cluster=inventory.key, recipe=recipe.name, recipe_digest=recipe.digest(), plan_hash=digest,
            run=run, rank=spec.rank, world=spec.world, node=spec.node.name, serve_port=spec.serve_port,
            master_port=spec.master_port, served_model=recipe.served_name)
        ranks.append(_launch(replace(spec, container=container_name(recipe.name, spec.rank, digest)), labels))
    return Plan(recipe=recipe.name, cluster=inventory.key, image_id=image_id, image_ref=recipe.image.ref,
                plan_hash=digest, recipe_digest=recipe.digest(), run_id=run, ranks=tuple(ranks))


def _launch(spec: LaunchSpec, labels: ContainerLabels) -> RankLaunch:
    return RankLaunch(spec, labels, docker_run_argv(spec, labels.pairs()))


PREVIEW_RUN = "preview"  # the run label `render` shows; `up` puts a fresh run ID there


def render_plan(dep: Deployment) -> list[RankLaunch]:
    """The ranks of a plan as `render` shows it (deterministic: the run label is a placeholder)."""
    return list(build_plan(dep, PREVIEW_RUN).ranks)
