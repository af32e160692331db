"""Per-node `docker run` argv for a deployment: one NodeLaunch per rank, rendered, never executed here."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from ..config.inventory import Interconnect, Inventory, Node
from ..config.load import Deployment
from ..config.recipe import Recipe
from .templates import render_tokens

LABEL_PREFIX = "spark-deploy"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_RECIPE = f"{LABEL_PREFIX}.recipe"
LABEL_HASH = f"{LABEL_PREFIX}.recipe-hash"
LABEL_RANK = f"{LABEL_PREFIX}.rank"
LABEL_NODE = f"{LABEL_PREFIX}.node"
LABEL_CLUSTER = f"{LABEL_PREFIX}.cluster"
LABEL_PORT = f"{LABEL_PREFIX}.serve-port"
LABEL_MODEL = f"{LABEL_PREFIX}.served-model"


@dataclass(frozen=True)
class NodeLaunch:
    """What one node runs. `argv` is the truth; `printed` is only its shell-quoted display."""

    node: Node
    rank: int
    container: str
    argv: tuple[str, ...]
    env_file: str | None  # secrets live here on the node (mode 0600), never in argv

    @property
    def printed(self) -> str:
        return shlex.join(self.argv)

    @property
    def is_head(self) -> bool:
        return self.rank == 0


def container_name(recipe: Recipe, rank: int) -> str:
    return f"sd-{recipe.name}-r{rank}"


def secrets_env_file(recipe: Recipe, node: Node) -> str | None:
    return f"{node.state_dir}/secrets/{recipe.name}.env" if recipe.secrets else None


def interconnect_env(link: Interconnect) -> list[tuple[str, str]]:
    if link.profile == "roce":
        return [("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", link.hca), ("NCCL_IB_GID_INDEX", str(link.gid_index)),
                ("NCCL_SOCKET_IFNAME", link.socket_ifname), ("GLOO_SOCKET_IFNAME", link.socket_ifname)]
    return [("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", link.socket_ifname),
            ("GLOO_SOCKET_IFNAME", link.socket_ifname)]


def _merged_env(recipe: Recipe, inventory: Inventory, node: Node) -> list[tuple[str, str]]:
    """Mount-derived, then fabric, then recipe, then per-node overrides (later wins, first position kept)."""
    merged: dict[str, str] = {"HF_HOME": recipe.mounts.hf_cache, "VLLM_CACHE_ROOT": recipe.mounts.jit_cache}
    for key, value in [*interconnect_env(inventory.interconnect), *recipe.env.items(), *node.env.items()]:
        merged[key] = value
    return list(merged.items())


def _mounts(recipe: Recipe, node: Node) -> list[str]:
    spec = [f"{node.hf_cache}:{recipe.mounts.hf_cache}", f"{node.jit_cache}:{recipe.mounts.jit_cache}"]
    for mount in [*recipe.mounts.overlays, *recipe.mounts.extra]:
        spec.append(f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else ""))
    return spec


def _extra_args(recipe: Recipe) -> list[tuple[str, str | bool]]:
    out: list[tuple[str, str | bool]] = []
    for flag, value in recipe.vllm.extra.items():
        if value is False:
            continue
        out.append((flag, True if value is True else str(value)))
    return out


def render_node(dep: Deployment, node: Node, rank: int) -> NodeLaunch:
    recipe, inventory = dep.recipe, dep.inventory
    roce = inventory.interconnect.profile == "roce"
    spec = recipe.vllm.speculative_config
    vllm_args = render_tokens(
        "vllm-args.j2",
        model=recipe.model, serve=recipe.serve, vllm=recipe.vllm,
        served_name=recipe.serve.served_model_name,
        speculative_json=json.dumps(spec.model_dump(mode="json"), separators=(",", ":")) if spec else None,
        extra=_extra_args(recipe), nnodes=len(inventory.nodes), rank=rank,
        master_addr=inventory.node(inventory.head).fabric_ip,
    )
    name = container_name(recipe, rank)
    env_file = secrets_env_file(recipe, node)
    labels = [(LABEL_MANAGED, "true"), (LABEL_CLUSTER, inventory.cluster), (LABEL_RECIPE, recipe.name),
              (LABEL_HASH, recipe.digest()), (LABEL_RANK, str(rank)), (LABEL_NODE, node.name),
              (LABEL_PORT, str(recipe.serve.port)), (LABEL_MODEL, recipe.served_name)]
    argv = render_tokens(
        "docker-run.j2",
        container_name=name, labels=labels, docker=recipe.docker,
        ulimits=["memlock=-1"] if roce else [], devices=["/dev/infiniband:/dev/infiniband"] if roce else [],
        mounts=_mounts(recipe, node), env=_merged_env(recipe, inventory, node), env_file=env_file,
        image_id=recipe.image.id or recipe.image.ref, serve_entrypoint=recipe.image.serve_entrypoint,
        model=recipe.model, vllm_args=vllm_args,
    )
    return NodeLaunch(node=node, rank=rank, container=name, argv=tuple(argv), env_file=env_file)


def render_plan(dep: Deployment) -> list[NodeLaunch]:
    """Every rank's launch, head first."""
    return [render_node(dep, node, rank) for rank, node in enumerate(dep.inventory.ranked)]
