"""One rank's launch as data: what runs where, free of Docker-CLI syntax.

The same spec renders the `docker run` argv today and can render other targets later (a systemd unit, a
Kubernetes LeaderWorkerSet). Built purely from the recipe and the inventory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..config.inventory import Interconnect, Inventory, Node
from ..config.load import Deployment
from ..config.recipe import Recipe
from .templates import render_tokens


@dataclass(frozen=True)
class Mount:
    source: str  # on the node
    target: str  # in the container
    read_only: bool = False


@dataclass(frozen=True)
class LaunchSpec:
    node: Node
    rank: int
    world: int  # number of ranks
    container: str
    image_id: str  # the pinned ID (the reference only for display when unpinned)
    serve_entrypoint: bool  # the image's entrypoint already is `vllm serve`
    model: str
    serve_args: tuple[str, ...]  # `vllm serve MODEL` arguments, rank-specific ones last
    env: tuple[tuple[str, str], ...]
    env_file: str | None  # secrets live here on the node (mode 0600), never in argv
    mounts: tuple[Mount, ...]
    devices: tuple[str, ...]
    ulimits: tuple[str, ...]
    gpus: str | None
    network: str
    ipc: str | None
    shm_size: str | None
    privileged: bool
    restart: str | None  # e.g. "on-failure:3"; None: never restarted by the engine
    serve_port: int
    master_port: int

    @property
    def is_head(self) -> bool:
        return self.rank == 0


def base_name(recipe: str, rank: int) -> str:
    """`sd-RECIPE-rN`: what the plan hash is computed over (the name itself carries the hash) and the whole
    name containers had before names carried their plan."""
    return f"sd-{recipe}-r{rank}"


def container_name(recipe: str, rank: int, plan_hash: str, run: str | None = None) -> str:
    """`sd-RECIPE-rN-HASH8`: the plan is readable from the name, and two plans of one recipe never share a
    name, so a kept container is never renamed. `run` only when that name is already held on the node by an
    earlier container of the same plan (`up --redeploy`, or an `up` of a plan kept from before)."""
    name = f"{base_name(recipe, rank)}-{plan_hash[:8]}"
    return f"{name}-{run}" if run else name


def secrets_dir(node: Node) -> str:
    """Where env-files live on a node (one per recipe, `RECIPE.env`, mode 0600)."""
    return f"{node.state_dir}/secrets"


def secrets_env_file(recipe: Recipe, node: Node) -> str | None:
    return f"{secrets_dir(node)}/{recipe.name}.env" if recipe.secrets else None


def interconnect_env(link: Interconnect) -> list[tuple[str, str]]:
    if link.profile == "roce":  # NCCL_DEBUG=INFO (INIT and NET only): the transport line up's check reads
        return [("NCCL_IB_DISABLE", "0"), ("NCCL_IB_HCA", link.hca), ("NCCL_IB_GID_INDEX", str(link.gid_index)),
                ("NCCL_SOCKET_IFNAME", link.socket_ifname), ("GLOO_SOCKET_IFNAME", link.socket_ifname),
                ("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET")]
    return [("NCCL_IB_DISABLE", "1"), ("NCCL_SOCKET_IFNAME", link.socket_ifname),
            ("GLOO_SOCKET_IFNAME", link.socket_ifname)]


def _merged_env(recipe: Recipe, inventory: Inventory, node: Node) -> tuple[tuple[str, str], ...]:
    """Mount-derived, then fabric, then recipe, then per-node overrides (later wins, first position kept)."""
    merged: dict[str, str] = {"HF_HOME": recipe.mounts.hf_cache, "VLLM_CACHE_ROOT": recipe.mounts.jit_cache}
    for key, value in [*interconnect_env(inventory.interconnect), *recipe.env.items(), *node.env.items()]:
        merged[key] = value
    return tuple(merged.items())


def _mounts(recipe: Recipe, node: Node) -> tuple[Mount, ...]:
    spec = [Mount(node.hf_cache, recipe.mounts.hf_cache), Mount(node.jit_cache, recipe.mounts.jit_cache)]
    spec += [Mount(m.source, m.target, m.read_only) for m in [*recipe.mounts.overlays, *recipe.mounts.extra]]
    return tuple(spec)


def _extra_args(recipe: Recipe) -> list[tuple[str, str | bool]]:
    out: list[tuple[str, str | bool]] = []
    for flag, value in recipe.vllm.extra.items():
        if value is False:  # vLLM's BooleanOptionalAction: the negative form is --no-FLAG (preflight checks it exists)
            out.append((f"no-{flag}", True))
            continue
        out.append((flag, True if value is True else str(value)))
    return out


def build_spec(dep: Deployment, node: Node, rank: int) -> LaunchSpec:
    recipe, inventory = dep.recipe, dep.inventory
    roce = inventory.interconnect.profile == "roce"
    spec = recipe.vllm.speculative_config
    serve_args = render_tokens(
        "vllm-args.j2",
        model=recipe.model, serve=recipe.serve, vllm=recipe.vllm,
        served_name=recipe.serve.served_model_name,
        speculative_json=json.dumps(spec.model_dump(mode="json"), separators=(",", ":")) if spec else None,
        extra=_extra_args(recipe), nnodes=len(inventory.nodes), rank=rank,
        master_addr=inventory.node(inventory.head).fabric_ip,
    )
    restart = recipe.docker.restart
    return LaunchSpec(
        node=node, rank=rank, world=len(inventory.nodes), container=base_name(recipe.name, rank),
        image_id=recipe.image.id or recipe.image.ref, serve_entrypoint=recipe.image.serve_entrypoint,
        model=recipe.model.repo, serve_args=tuple(serve_args), env=_merged_env(recipe, inventory, node),
        env_file=secrets_env_file(recipe, node), mounts=_mounts(recipe, node),
        devices=("/dev/infiniband:/dev/infiniband",) if roce else (), ulimits=("memlock=-1",) if roce else (),
        gpus=recipe.docker.gpus, network=recipe.docker.network, ipc=recipe.docker.ipc,
        shm_size=recipe.docker.shm_size, privileged=recipe.docker.privileged,
        restart=f"on-failure:{restart.max_retries}" if restart.policy == "on-failure" else None,
        serve_port=recipe.serve.port, master_port=recipe.vllm.master_port,
    )


def docker_run_argv(spec: LaunchSpec, labels: list[tuple[str, str]]) -> tuple[str, ...]:
    """The `docker run` argv of a spec (templates/docker-run.j2): one token each, never joined."""
    mounts = [f"{m.source}:{m.target}" + (":ro" if m.read_only else "") for m in spec.mounts]
    return tuple(render_tokens(
        "docker-run.j2", container_name=spec.container, labels=labels, spec=spec, mounts=mounts,
        env=list(spec.env), image_id=spec.image_id, model=spec.model, vllm_args=list(spec.serve_args),
    ))
