"""`bench --compare` refuses A and B that would run the same engine configuration (field note: a `sed` that
matched nothing made two "different" experiments identical, and their B/A measured only noise).

What a release resolves is known only once it runs (facts/fingerprint.py); before anything is deployed the
rule is the engine's input: the image ID and, per rank, the `non-default args` vLLM would log for the
rendered argv, the environment the engine reads (facts/fingerprint.ENGINE_ENV_PREFIXES) and the mounts.
When all of that is equal the engine cannot tell A from B. A change the rule cannot see (an overlay
reading a variable of its own) is stated with `--same-engine-ok`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config.load import Deployment
from ..facts.fingerprint import ENGINE_ENV_PREFIXES, predicted_key
from ..render.plan import Plan, build_plan


@dataclass(frozen=True)
class SameEngine:
    key: str  # the shared pre-deploy fingerprint
    ignored: list[str]  # the environment variables A and B differ in (none of them read by the engine)

    def message(self) -> str:
        why = (f"they differ only in {', '.join(self.ignored)}, which the engine does not read "
               f"(it reads {', '.join(p + '*' for p in ENGINE_ENV_PREFIXES[:4])}, ...)" if self.ignored else
               "the same image, non-default args, engine environment and mounts on every rank")
        return (f"A and B run the same engine configuration (fingerprint {self.key}): {why}; their B/A would "
                "measure only noise. Change what the engine is given, or pass --same-engine-ok to measure them "
                "anyway")


def key_of(plan: Plan) -> str:
    return predicted_key(plan.image_id, [(l.spec.model, list(l.spec.serve_args), list(l.spec.env),
                                          [f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}"
                                           for m in l.spec.mounts]) for l in plan.ranks])


def same_engine(a: Deployment, b: Deployment) -> SameEngine | None:
    """Pure: the shared key when A's and B's plans give the engine the same input, else None."""
    plan_a, plan_b = build_plan(a), build_plan(b)
    key = key_of(plan_a)
    if key != key_of(plan_b):
        return None
    env_a = {(l.spec.rank, k, v) for l in plan_a.ranks for k, v in l.spec.env}
    env_b = {(l.spec.rank, k, v) for l in plan_b.ranks for k, v in l.spec.env}
    return SameEngine(key, sorted({k for _r, k, _v in env_a ^ env_b}))
