"""model-fit: do the weights fit each node's vLLM budget, and how many tokens does the KV cache hold?

Otherwise only a 20-70 minute load tells (a 235 GB FP8 model on 2 x 128 GB at 0.90 passes validate and
render). The head reads the snapshot's safetensors headers and config.json (the same reader bench uses:
a few MB, never the weights); every node is judged with its own MemTotal. The arithmetic is
checks/model_fit.py; docs/preflight.md shows the formula.
"""

from __future__ import annotations

from ..checks.model_fit import FitError, Fit, Settings, describe, fit
from ..checks.safetensors_headers import SCRIPT, HeaderError, Headers, parse
from ..config.load import Deployment
from ..facts.memory import MemInfo
from .checks_memory import in_rank_order, utilization
from ..facts.core import FactInput, Observed, fact
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]
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


def _extra_int(dep: Deployment, flag: str) -> int | None:
    value = dep.recipe.vllm.extra.get(flag)
    return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None


def settings(dep: Deployment) -> Settings:
    """The recipe's numbers vLLM sizes its budget from (its defaults where the recipe is silent)."""
    v = dep.recipe.vllm
    spec = v.speculative_config
    in_checkpoint = spec is not None and "model" not in (spec.model_extra or {})
    return Settings(v.tensor_parallel_size, utilization(dep), v.kv_cache_dtype, v.max_model_len,
                    _extra_int(dep, "max-num-seqs"), _extra_int(dep, "max-num-batched-tokens"),
                    _extra_int(dep, "block-size"), v.enforce_eager, in_checkpoint)


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


@check("model-fit", (FACT, "meminfo"), Scope.NODE)
def model_fit(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("meminfo",))
    headers, why = head_headers(seen, dep)
    if headers is None:
        return Verdict("model-fit", Scope.NODE, {n: Cell(Status.SKIP, why) for n in seen},
                       "fix the model-files / model-shards findings on the head first" if seen else "")
    if not headers.config:
        return Verdict("model-fit", Scope.NODE, {n: Cell(Status.SKIP, f"no config.json in {headers.snapshot}")
                                                 for n in seen}, "")
    s = settings(dep)
    short, tight = [], []
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        mem: MemInfo = facts["meminfo"].value
        try:
            f = fit(headers.headers, headers.config, mem.total, s)
        except FitError as exc:
            cells[node] = Cell(Status.SKIP, f"cannot size the model: {exc}")
            continue
        if not f.weights_fit:
            cells[node] = Cell(Status.FAIL, describe(f))
            short.append(node)
        elif f.tokens < f.max_model_len:
            cells[node] = Cell(Status.WARN, f"{describe(f)}: not one full-length request fits")
            tight.append(node)
        else:
            cells[node] = Cell(Status.OK, describe(f))
    fixes = []
    tp = s.tp
    if short:
        fixes.append(f"{', '.join(short)}: the weights do not fit vLLM's share (loading would fail after the "
                     f"whole load): raise vllm.tensor_parallel_size (now {tp}) over more nodes, pick a smaller "
                     "quantization, or raise vllm.gpu_memory_utilization within the memory-headroom check")
    if tight:
        fixes.append(f"{', '.join(tight)}: fewer tokens fit than max_model_len (vLLM refuses to start: "
                     "'To serve at least one request with the models's max seq len ...'): lower "
                     "vllm.max_model_len, use vllm.kv_cache_dtype fp8, or raise vllm.gpu_memory_utilization")
    return Verdict("model-fit", Scope.NODE, cells, " | ".join(fixes))
