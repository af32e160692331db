"""The AcceptContext of a recipe: its flags and settings, and the greedy outputs of the release to compare with."""
from __future__ import annotations

from ..config.recipe import Recipe
from ..releases.record import Release, ReleaseOutcome
from .model import AcceptContext

DEFAULT_MAX_MODEL_LEN = 8192  # when the recipe leaves it to the model's config


def previous_greedy(releases: list[Release], repo: str, before: int | None) -> dict | None:
    """The greedy-digest data of the newest earlier release of the same model that did not fail."""
    for release in releases:  # newest first
        if release.model.repo != repo or release.outcome is ReleaseOutcome.FAILED:
            continue
        if before is not None and release.id >= before:
            continue
        for result in release.acceptance:
            if result.get("name") == "greedy-digest" and (result.get("data") or {}).get("outputs"):
                return {**result["data"], "release": release.id}
    return None


def context_for(recipe: Recipe, releases: list[Release], release_id: int | None = None) -> AcceptContext:
    return AcceptContext(recipe.served_name, recipe.vllm.max_model_len or DEFAULT_MAX_MODEL_LEN,
                         dict(recipe.vllm.extra), recipe.acceptance,
                         previous_greedy(releases, recipe.model.repo, release_id))
