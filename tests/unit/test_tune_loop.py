"""`tune`'s loop: a variant the stop rule skips is never made to serve (and a note says why), the run's first
block takes as many extra warm-up shots as it keeps (the JIT cache warm before anything counts), and no
block sends bench's TTFT-when-cached probe. The cluster side (operation, deploys, shots) is replaced by
recorders: this is the loop's logic only; tests/bench/test_tune.py runs it on the simulated cluster."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

from orchestrator.bench import runner
from orchestrator.bench import tune as tune_mod
from orchestrator.bench.tune_plan import expand, order, parse_set
from orchestrator.runner.events import Events

RECIPE = "name: r\nvllm:\n  speculative_config:\n    method: mtp\n    num_speculative_tokens: 8\n"
KEY = "vllm.speculative_config.num_speculative_tokens"


class FakeOp:
    def __init__(self, *a, **kw):
        self.state = SimpleNamespace(serving=None, serving_known=False)
        self.said = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def done(self, outcome, detail="", **kw):
        self.said = (outcome, detail)


def test_a_skipped_variant_is_never_started_and_the_first_block_warms_up(monkeypatch):
    variants = expand(RECIPE, [parse_set(f"{KEY}=2,4,6")])  # 0 k2, 1 k4, 2 k6, 3 k8 (original), 4 baseline
    served, plans = [], []
    monkeypatch.setattr(tune_mod, "Operation", FakeOp)
    monkeypatch.setattr(tune_mod, "bind_variants", lambda vs, dep: [None] * len(vs))
    monkeypatch.setattr(tune_mod, "_lint", lambda op, deps, vs: [])
    monkeypatch.setattr(tune_mod, "_side", lambda op, i, *a: served.append(i) or SimpleNamespace(
        url="http://x", model="m", release=10 + i, draft_budget=None))
    monkeypatch.setattr(tune_mod, "open_client", lambda url: nullcontext(None))
    monkeypatch.setattr(tune_mod, "run", lambda http, model, plan, on_shot: plans.append(plan) or [])
    # the rule, as measured after k4's block: k6 cannot win (k8 is the original: kept)
    monkeypatch.setattr(tune_mod, "cannot_win", lambda tables, line, labels, started, keep:
                        {2: "k4 is below k2"} if 1 in started else {})
    monkeypatch.setattr(tune_mod, "_profile_tables", lambda result: [])
    monkeypatch.setattr(tune_mod, "_settle", lambda *a: "settled")
    monkeypatch.setattr(tune_mod, "_write", lambda op, result: None)
    events = Events()
    dep = SimpleNamespace(inventory=None, recipe_path="r.yaml", inventory_path="i.yaml")
    seams = SimpleNamespace(options=SimpleNamespace(ready_timeout=1, listen_timeout=1), connector=None)
    plan = runner.Plan(prompts={"code": ["p"]}, shots=3)
    result = tune_mod.tune(dep, variants, order(len(variants), 2, last=3), lambda tgt: plan, events, seams=seams)
    assert order(len(variants), 2, last=3) == [3, 0, 1, 2, 4, 4, 2, 1, 0, 3]
    assert served == [3, 0, 1, 4, 4, 1, 0, 3]  # k6 never, in either round
    assert result.skipped == {2: "k4 is below k2"}
    assert [p.warmup for p in plans] == [1 + 3] + [1] * 7 and not any(p.warm_probe for p in plans)
    notes = [e.message for e in events.history if "skipped: cannot win" in e.message]
    assert notes == ["tune: num_speculative_tokens=6 skipped: cannot win (k4 is below k2)"]
    assert result.record()["skipped"] == {"num_speculative_tokens=6": "k4 is below k2"}
