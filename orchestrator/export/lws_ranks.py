"""What each LeaderWorkerSet pod runs, read from the Plan `up` runs: the argv after the image, with the few
values that only Kubernetes knows (group size, this pod's index, the leader's address) put in as LWS's
injected variables. Everything else is the plan's own tokens, so an export can never drift from `up`.

Kubernetes expands `$(VAR)` in `args` and `env` values; a literal `$(` in a plan token is written `$$(` so
it reaches vLLM unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..render.plan import Plan, RankLaunch

LWS_GROUP_SIZE = "$(LWS_GROUP_SIZE)"
LWS_WORKER_INDEX = "$(LWS_WORKER_INDEX)"
LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"
# the rank-specific flags of vllm-args.j2 and what LWS injects in their place; --master-port stays explicit
RANK_FLAGS = {"--nnodes": LWS_GROUP_SIZE, "--node-rank": LWS_WORKER_INDEX, "--master-addr": LWS_LEADER_ADDRESS}


class ExportError(ValueError):
    """The plan cannot be expressed as one LeaderWorkerSet without changing what runs."""


@dataclass(frozen=True)
class Substitution:
    flag: str
    planned: str  # the plan's value for this rank
    exported: str  # the LWS variable in its place


@dataclass(frozen=True)
class PodCommand:
    """A pod's container args (the image's entrypoint is kept, as `docker run IMAGE ARGS` keeps it) and env."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    substitutions: tuple[Substitution, ...]


def after_image(launch: RankLaunch) -> tuple[str, ...]:
    """The tokens `docker run` passes to the image: `[vllm serve] MODEL ARGS`, exactly as the plan has them."""
    spec = launch.spec
    return (() if spec.serve_entrypoint else ("vllm", "serve")) + (spec.model,) + spec.serve_args


def escape(token: str) -> str:
    return token.replace("$(", "$$(")


def pod_command(launch: RankLaunch) -> PodCommand:
    tokens, subs, out = after_image(launch), [], []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in RANK_FLAGS and i + 1 < len(tokens):
            out += [token, RANK_FLAGS[token]]
            subs.append(Substitution(token, tokens[i + 1], RANK_FLAGS[token]))
            i += 2
            continue
        out.append(escape(token))
        i += 1
    env = tuple((key, escape(value)) for key, value in launch.spec.env)
    return PodCommand(tuple(out), env, tuple(subs))


def leader_and_worker(plan: Plan) -> tuple[PodCommand, PodCommand | None]:
    """The leader's command (rank 0) and the one worker template's (rank 1). Every further rank must come
    out identical to rank 1 — LWS has one worker template — or the export is refused, naming what differs."""
    leader = pod_command(plan.head)
    if not plan.peers:
        return leader, None
    worker = pod_command(plan.peers[0])
    first = plan.peers[0]
    for other in plan.peers[1:]:
        mine = pod_command(other)
        if mine.args != worker.args:
            raise ExportError(f"{other.node.name} (rank {other.rank}) runs other vLLM arguments than "
                              f"{first.node.name} (rank 1); one worker template cannot hold both")
        if mine.env != worker.env:
            keys = sorted({k for k, _ in set(mine.env) ^ set(worker.env)})
            raise ExportError(f"{other.node.name} (rank {other.rank}) and {first.node.name} (rank 1) differ in "
                              f"env {', '.join(keys)} (inventory `nodes[].env`); one worker template cannot hold "
                              "both: make them equal, or label those nodes and export one set per group")
        if host_paths(other) != host_paths(first):
            raise ExportError(f"{other.node.name} (rank {other.rank}) and {first.node.name} (rank 1) keep their "
                              "caches at different host paths (inventory `hf_cache`/`jit_cache`); one worker "
                              "template mounts one path: make them equal")
    return leader, worker


def host_paths(launch: RankLaunch) -> tuple[str, ...]:
    return tuple(m.source for m in launch.spec.mounts)
