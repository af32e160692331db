"""The model's safetensors headers on the head (the same reader bench uses: a few MB, never the weights),
and what they predict per node with its own MemTotal: weights per rank and the tokens the KV cache holds.

The arithmetic is checks/model_fit.py; the model-fit judge is preflight's checks_fit.py, and `up` records the
prediction beside the engine's own figure (deploy/kv_report.py).
"""

from __future__ import annotations

from ..checks.model_fit import FitError, Fit, Settings, fit
from ..checks.safetensors_headers import SCRIPT, HeaderError, Headers, parse
from ..config.load import Deployment
from ..config.recipe import Recipe
from . import memory  # noqa: F401  (registers meminfo, which predict reads)
from .core import FactInput, Seen, fact, in_rank_order
from .replaced import VLLM_DEFAULT_UTILIZATION

FACT = "model_headers"

# "$4" = 1 on the head only: the model is the same on every node (model-files holds them to it).
_SCRIPT = '[ "$4" = 1 ] || { printf \'elsewhere\\n\'; exit 0; }\n' + SCRIPT


def _fact_args(given: FactInput) -> list[str]:
    model = given.dep.recipe.model
    head = "1" if given.node.name == given.dep.inventory.head else "0"
    return [given.node.hf_cache, model.repo, model.revision, head]


@fact(FACT, _SCRIPT, args=_fact_args)
def parse_model_headers(stdout: str) -> Headers | None:
    """The header reader's records -> Headers; None on the nodes that are not the head."""
    if stdout.strip() == "elsewhere":
        return None
    try:
        return parse("", stdout)
    except HeaderError as exc:
        raise ValueError(str(exc).removeprefix(": ")) from None


def _extra_int(recipe: Recipe, flag: str) -> int | None:
    value = recipe.vllm.extra.get(flag)
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


def settings(dep: Deployment) -> Settings:
    """The recipe's numbers vLLM sizes its budget from (its defaults where the recipe is silent)."""
    return recipe_settings(dep.recipe)


def recipe_settings(recipe: Recipe) -> Settings:
    """settings() from the recipe alone (`fit --memory` has no inventory)."""
    v = recipe.vllm
    spec = v.speculative_config
    in_checkpoint = spec is not None and "model" not in (spec.model_extra or {})
    return Settings(v.tensor_parallel_size, v.gpu_memory_utilization or VLLM_DEFAULT_UTILIZATION, v.kv_cache_dtype,
                    v.max_model_len, _extra_int(recipe, "max-num-seqs"), _extra_int(recipe, "max-num-batched-tokens"),
                    _extra_int(recipe, "block-size"), v.enforce_eager, in_checkpoint,
                    spec.method if spec is not None else None, _async(recipe))


def _async(recipe: Recipe) -> bool | None:
    """`async-scheduling: false` (or `no-async-scheduling: true`) in vllm.extra turns it off; else vLLM decides."""
    extra = recipe.vllm.extra
    if extra.get("async-scheduling") is False or extra.get("no-async-scheduling") is True:
        return False
    return True if extra.get("async-scheduling") is True else None


def head_headers(seen: Seen, dep: Deployment) -> tuple[Headers | None, str]:
    """The head's Headers, or why there are none."""
    obs = seen.get(dep.inventory.head, {}).get(FACT)
    if obs is None:
        return None, f"the head {dep.inventory.head} was not read"
    if not obs.ok:
        return None, f"the head's snapshot headers: {obs.error}"
    return obs.value, ""


def predict(seen: Seen, dep: Deployment) -> dict[str, Fit]:
    """Each node's Fit from a gathered preflight (what `up` records as the predicted KV tokens).
    Nodes whose meminfo is missing are left out; FitError/none when the model cannot be sized."""
    headers, why = head_headers(seen, dep)
    if headers is None:
        raise FitError(why)
    s = settings(dep)
    out = {}
    for node, facts in in_rank_order(seen, dep):
        mem = facts.get("meminfo")
        if mem is not None and mem.ok:
            out[node] = fit(headers.headers, headers.config, mem.value.total, s)
    return out
