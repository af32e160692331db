"""`pin`: read the image ID that `image.ref` names on one node and write it into the recipe, and cache
that image's own `vllm serve` parser by its ID.

RepoDigests do not survive `docker load` (field note 1): the verified ID is what every node must hold. The
parser is read once per image ID (an ID names immutable content) on the node that holds it, so validate,
render and up judge the recipe's flags and typed choices by the pinned image's vLLM from then on
(config/flag_table.py), not by the table shipped with spark-deploy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..config.edit import set_image_id
from ..config.inventory import Inventory
from ..config.recipe import Recipe
from ..docker_cli.images import ImageIdentity, inspect_image
from ..facts.vllm import HELP_SCRIPT, cache_file, cache_help, help_cached, parse_image_help
from ..operation import AuditAction, Operation, Outcome, Reach
from ..runner.events import Events
from ..transport.group import Cluster, Connector
from ..transport.node import NodeConnection, NodeError


class PinOutcome(StrEnum):
    PINNED = "pinned"
    ALREADY = "already pinned"


class ParserCache(StrEnum):
    """What `pin` did about the pinned image's parser."""
    READ = "read and cached"
    ALREADY = "already cached"
    FAILED = "not cached"


class PinRefused(Exception):
    """The node does not hold what the recipe names, or pinning would overwrite an ID without --replace."""


@dataclass
class PinResult:
    node: str
    found: ImageIdentity
    outcome: PinOutcome
    digest_verified: bool | None  # None: image.ref is a tag, there is no registry digest to verify
    parser: ParserCache = ParserCache.FAILED
    parser_note: str = ""  # the cache file, or why the image's parser could not be read


def read_identity(conn: NodeConnection, ref: str) -> ImageIdentity | None:
    return inspect_image(conn, ref)


def pin(recipe_path: str | Path, recipe: Recipe, inventory: Inventory, node: str, replace: bool,
        events: Events | None = None, connector: Connector | None = None) -> PinResult:
    """Under the deploy lock (an `up` reading this recipe must not see it change half way), with an
    audit line; the head (the lock) and the node read from must answer, the others need not.
    `connector` makes the nodes' connections (default: SSH)."""
    with Operation(inventory, events or Events(), AuditAction.PIN, reach=Reach.HEAD, ttl=300,
                   cluster_factory=lambda inv: Cluster(inv, connector=connector)) as op:
        if node in op.unreachable:
            raise NodeError(node, f"unreachable: {op.unreachable[node]}")
        try:
            result = _pin(recipe_path, recipe, op.cluster[node], replace)
        except PinRefused as exc:
            op.done(Outcome.REFUSED, str(exc))
            raise
        result.parser, result.parser_note = cache_parser(op.cluster[node], result.found.id)
        op.done(result.outcome, f"{recipe_path}: image.id {result.found.id} (from {node}); its vLLM parser "
                                f"{result.parser}")
        return result


def cache_parser(conn: NodeConnection, image_id: str) -> tuple[ParserCache, str]:
    """The image's `vllm serve --help=all` (the same script as preflight's image_help fact), cached on this
    machine by image ID. A failure is said, not raised: the pin holds, and the shipped table stays the judge."""
    if help_cached(image_id):
        return ParserCache.ALREADY, str(cache_file("vllm-help", image_id))
    result = conn.run_script(HELP_SCRIPT, image_id, timeout=180)
    if not result.ok:
        why = (result.stderr.strip() or result.stdout.strip() or f"exit {result.exit_code}").splitlines()[-1][:300]
        return ParserCache.FAILED, f"`vllm serve --help=all` in the image failed on {conn.name}: {why}"
    try:
        got = parse_image_help(result.stdout)
    except ValueError as exc:
        return ParserCache.FAILED, f"the image's `vllm serve --help` could not be read: {exc}"
    return ParserCache.READ, str(cache_help(image_id, got))


def _pin(recipe_path: str | Path, recipe: Recipe, conn: NodeConnection, replace: bool) -> PinResult:
    node, ref = conn.name, recipe.image.ref
    found = read_identity(conn, ref)
    if found is None:
        raise PinRefused(f"{node} has no image {ref}: pull or load it there first")
    verified = None
    if "@sha256:" in ref:
        verified = ref in found.repo_digests
        if not verified:
            raise PinRefused(f"{node}'s copy does not carry the registry digest {ref.split('@', 1)[1]} (a loaded "
                             "image has no RepoDigests): pin from a node that pulled it")
    if recipe.image.id == found.id:
        return PinResult(node, found, PinOutcome.ALREADY, verified)
    if recipe.image.id is not None and not replace:
        raise PinRefused(f"{recipe_path} is pinned to {recipe.image.id}, {node} holds {found.id}: use --replace to re-pin")
    set_image_id(recipe_path, found.id)
    return PinResult(node, found, PinOutcome.PINNED, verified)
