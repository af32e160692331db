"""model-fit: do the weights fit each node's vLLM budget, and how many tokens does the KV cache hold?

Otherwise only a 20-70 minute load tells (a 235 GB FP8 model on 2 x 128 GB at 0.90 passes validate and
render). The head reads the snapshot's safetensors headers and config.json; every node is judged with its
own MemTotal (the fact and the prediction: facts/fit.py). The arithmetic is checks/model_fit.py;
docs/preflight.md shows the formula.
"""

from __future__ import annotations

from ..checks.model_fit import FitError, FitState, describe, fit, fixes
from ..checks.verdict import Cell, Scope, Status, Verdict
from ..config.load import Deployment
from ..facts.core import Seen, in_rank_order
from ..facts.fit import FACT, head_headers, settings
from ..facts.memory import MemInfo
from .registry import check, missing


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
    short, tight, unjudged, refused, why = [], [], [], [], ""
    for node, facts in in_rank_order(seen, dep):
        if node in cells:
            continue
        mem: MemInfo = facts["meminfo"].value
        try:  # the weights are judged even when the KV layout is not known
            f = fit(headers.headers, headers.config, mem.total, s, kv_optional=True)
        except FitError as exc:
            cells[node] = Cell(Status.SKIP, f"cannot size the model: {exc}")
            continue
        state = f.state
        if state is FitState.WEIGHTS_SHORT:
            cells[node] = Cell(Status.FAIL, describe(f))
            short.append(node)
        elif state is FitState.KV_REFUSED:
            cells[node] = Cell(Status.FAIL, f"{f.kv_unknown}; {describe(f)}")
            refused.append(node)
            why = f.kv_unknown
        elif state is FitState.KV_UNJUDGED:
            cells[node] = Cell(Status.WARN, f"cannot judge the KV cache: {f.kv_unknown}; {describe(f)}")
            unjudged.append(node)
        elif state is FitState.KV_SHORT:
            cells[node] = Cell(Status.FAIL, f"{describe(f)}: not one full-length request fits")
            tight.append(node)
        else:
            cells[node] = Cell(Status.OK, describe(f))
    return Verdict("model-fit", Scope.NODE, cells, " | ".join(fixes(short, tight, unjudged, s.tp, (refused, why))))
