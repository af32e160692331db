"""The stand-in's speed model and its truth: the figures a benchmark run against it must measure.

The model (field notes 14-19, the seeds' numbers):
- a verification step of a batch of n decoding requests takes
  `step_seconds(n) = (1 + draft_cost * k) / decode_tps * (1 + batch_alpha * (n - 1))`; without
  speculation k = 0, so SIM_DECODE_TPS stays the plain single-request decode rate, and concurrency
  grows aggregate throughput sublinearly (n / (1 + alpha (n - 1)); 0.19 gives the seeds' 67.6 -> ~260
  at 12);
- a profile's steps can be made slower (SIM_PROFILE_SLOW 'zh=0.8': a zh request decodes at 0.8x, every
  step it shares lasting `step_seconds / 0.8`): an image variant slower on one workload only, the truth
  an upgrade gate (`up --gate`) has to find;
- a step emits 1 + accepted tokens; accepted = clip(floor(x + 0.5), 0, k), x ~ N(level, step_sd), the
  request's level ~ N(mean, request_sd) drawn once per request (so speculative runs spread across
  requests while plain runs do not);
- or, per profile, an acceptance curve (SIM_ACCEPT_CURVE 'code=0.98:0.96:0.9,prose=0.8:0.5:0.2'): the
  rate at which draft position i is accepted, non-increasing (a later position is only accepted after the
  earlier ones); a step draws u ~ U(0, 1) and accepts the positions i < k whose rate exceeds u, so position
  i is accepted at exactly curve[i] and positions past the curve never are. With the linear step cost
  (SIM_DRAFT_COST) each profile then has a best budget of its own, the truth `spark-deploy tune` has to find;
- the first token comes `ttft + uncached prompt tokens / prefill_tps` after arrival; with speculation
  and first_merge the first chunk also carries the first verification step (tokens 1 + (1 + accepted));
  without speculation it does with probability first_chunk_p (the detokenizer holding a token back);
- timing like an engine's: each step lasts its formula time x (1 + N(0, step_jitter)), and each busy
  period of the engine (a sitting: from idle to idle) runs at a pace x N(1, pace_sd) of its own, so plain
  shots spread at field note 16's level (0.67-0.96% over ten shots: pace_sd 0.003) while the mean rate
  stays the formula's (the jitter averages out; 1/pace adds pace_sd^2, 1e-5); /metrics shows the
  counters as they were up to metrics_lag engine steps before the scrape (vLLM's API server records an
  iteration's stats after it has sent its outputs).

Truth = what these formulas yield, not the configured numbers: rounding and clipping make the realised
mean acceptance differ from SIM_ACCEPT's mean (code 3.2:0.8:0.25 at k 4 gives 3.14; zh 0.25 gives 0.11), so
`expected()` computes the clipped expectation exactly:
E[accepted] = sum_{j=1..k} P(x >= j - 0.5), with x ~ N(mean, sqrt(step_sd^2 + request_sd^2)) over the
population of requests (the level and the step noise add), and P(x >= i + 0.5) is the acceptance rate
of draft position i (a profile with a curve: E[accepted] = sum of curve[:k]).  It ignores the shorter
last step of a request cut by max_tokens.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from .base import SimError, env_float, read_count, write_count

TRUTH_PREFIX = "SIM truth: "
TRUTH_RE = re.compile(re.escape(TRUTH_PREFIX) + r"(\{.*\})\s*$", re.MULTILINE)
# profile -> (mean accepted per step, per-step sd, per-request sd of the level)
DEFAULT_ACCEPT = {"code": (3.2, 0.8, 0.25), "prose": (1.25, 1.0, 0.1), "zh": (0.25, 0.2, 0.05)}  # seeds: 3.15/1.23/0.11
DEFAULT_REQUEST_SD = 0.2  # for a SIM_ACCEPT entry given as mean:sd only
DEFAULT_STEP_JITTER = 0.04  # sd of one step's duration, relative (not measured: a scheduler's noise)
DEFAULT_PACE_SD = 0.003  # sd of a sitting's pace: ~0.9% max-min over ten plain shots (field note 16)
DEFAULT_FIRST_RUN_STATE = "/tmp/sim-first-run.count"  # in the container's own filesystem (see FirstRunFast)
DEFAULT_FIRST_CHUNK_P = 0.2  # plain first chunk carrying two tokens (not measured: a held-back token)


class Expected(NamedTuple):
    """Expected figures for one profile, draft budget k and batch size."""

    accepted_per_step: float  # mean accepted draft tokens per verification step
    tokens_per_step: float  # 1 + accepted_per_step (what 1 + accepted/drafts from /metrics estimates)
    per_position: tuple[float, ...]  # acceptance rate of draft position 0..k-1
    step_seconds: float  # one verification step at this batch size
    decode_tps: float  # per request: tokens_per_step / step_seconds
    aggregate_tps: float  # batch * decode_tps


@dataclass(frozen=True)
class Truth:
    """The configured speed of one stand-in, read from SIM_* (and printed as one `SIM truth:` line)."""

    decode_tps: float
    accept: dict[str, tuple[float, float, float]]
    draft_cost: float
    prefill_tps: float
    ttft: float
    batch_alpha: float
    spec_k: int
    first_merge: bool
    seed: int
    step_jitter: float = 0.0
    pace_sd: float = 0.0
    metrics_lag: float = 0.0
    first_chunk_p: float = 0.0
    quickack: bool = False  # ACK request headers at once (uvicorn does not: a two-writes client waits ~40 ms)
    profile_speed: dict[str, float] = field(default_factory=dict)  # profile -> rate factor (SIM_PROFILE_SLOW)
    curves: dict[str, tuple[float, ...]] = field(default_factory=dict)  # profile -> per-position rates (SIM_ACCEPT_CURVE)

    @classmethod
    def from_env(cls, env, spec_k: int = 0) -> Truth:
        truth = cls(decode_tps=env_float(env, "SIM_DECODE_TPS", 50.0),
                    accept=parse_accept(env.get("SIM_ACCEPT", "")),
                    draft_cost=env_float(env, "SIM_DRAFT_COST", 0.05),
                    prefill_tps=env_float(env, "SIM_PREFILL_TPS", 3000.0),
                    ttft=env_float(env, "SIM_TTFT", 0.05),
                    batch_alpha=env_float(env, "SIM_BATCH_ALPHA", 0.19),
                    spec_k=int(spec_k), first_merge=env.get("SIM_FIRST_MERGE", "1") != "0",
                    seed=int(env_float(env, "SIM_SEED", 0)),
                    step_jitter=env_float(env, "SIM_STEP_JITTER", DEFAULT_STEP_JITTER),
                    pace_sd=env_float(env, "SIM_PACE_SD", DEFAULT_PACE_SD),
                    metrics_lag=env_float(env, "SIM_METRICS_LAG", 1.0),
                    first_chunk_p=env_float(env, "SIM_FIRST_CHUNK_P", DEFAULT_FIRST_CHUNK_P),
                    quickack=env.get("SIM_QUICKACK", "0") == "1",
                    profile_speed=parse_profile_slow(env.get("SIM_PROFILE_SLOW", "")),
                    curves=parse_curves(env.get("SIM_ACCEPT_CURVE", "")))
        for name, value in (("SIM_DECODE_TPS", truth.decode_tps), ("SIM_PREFILL_TPS", truth.prefill_tps)):
            if value <= 0:
                raise SimError(f"ValueError: {name} must be > 0, got {value}")
        for name, value in (("SIM_DRAFT_COST", truth.draft_cost), ("SIM_TTFT", truth.ttft),
                            ("SIM_BATCH_ALPHA", truth.batch_alpha), ("SIM_METRICS_LAG", truth.metrics_lag)):
            if value < 0:
                raise SimError(f"ValueError: {name} must be >= 0, got {value}")
        for name, value, top in (("SIM_STEP_JITTER", truth.step_jitter, 0.3), ("SIM_PACE_SD", truth.pace_sd, 0.3),
                                 ("SIM_FIRST_CHUNK_P", truth.first_chunk_p, 1)):
            if not 0 <= value <= top:
                raise SimError(f"ValueError: {name} must be in [0, {top}], got {value}")
        return truth

    def line(self) -> str:
        """`SIM truth: {json}`: the knobs plus the expected figures per profile at k = spec_k, batch 1."""
        data = asdict(self)
        data["accept"] = {p: list(v) for p, v in self.accept.items()}
        data["curves"] = {p: list(v) for p, v in self.curves.items()}
        data["expected"] = {p: {"tokens_per_step": round(e.tokens_per_step, 6),
                                "decode_tps": round(e.decode_tps, 6)}
                            for p in {**self.accept, **self.curves} for e in [expected(self, p)]}
        return TRUTH_PREFIX + json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_line(cls, text: str) -> Truth:
        """The truth from a stand-in's log (the `SIM truth:` line anywhere in `text`)."""
        m = TRUTH_RE.search(text)
        if not m:
            raise ValueError("no 'SIM truth: {...}' line in the stand-in's output")
        data = json.loads(m.group(1))
        data.pop("expected", None)
        data["accept"] = {p: tuple(v) for p, v in data["accept"].items()}
        data["curves"] = {p: tuple(v) for p, v in data.get("curves", {}).items()}
        return cls(**data)

    def step_seconds(self, batch: int = 1, k: int | None = None) -> float:
        k = self.spec_k if k is None else k
        return (1 + self.draft_cost * k) / self.decode_tps * (1 + self.batch_alpha * (max(batch, 1) - 1))

    def speed(self, profiles) -> float:
        """The rate factor of a step shared by requests of these profiles: the slowest one's (a batch steps
        together, so one slow request holds every other one back)."""
        return min((self.profile_speed.get(p, 1.0) for p in profiles), default=1.0)

    def prefill_seconds(self, prompt_tokens: int, cached_tokens: int = 0) -> float:
        """Arrival to the first token (without the merged first verification step)."""
        return self.ttft + max(prompt_tokens - cached_tokens, 0) / self.prefill_tps

    def jitter(self, rng) -> float:
        """One step's duration factor (mean 1)."""
        return max(0.2, rng.gauss(1.0, self.step_jitter)) if self.step_jitter > 0 else 1.0

    def pace(self, rng) -> float:
        """One sitting's pace factor on the step time (mean 1)."""
        return max(0.5, rng.gauss(1.0, self.pace_sd)) if self.pace_sd > 0 else 1.0

    def level(self, profile: str, rng) -> float:
        """One request's acceptance level: its mean accepted per step before rounding and clipping."""
        mean, _, request_sd = self.accept.get(profile, (0.0, 0.0, 0.0))
        return rng.gauss(mean, request_sd) if request_sd > 0 else mean

    def draw(self, profile: str, level: float, rng, k: int) -> int:
        """Accepted draft tokens of one verification step of a request at `level` (a profile with a curve:
        the positions whose rate exceeds one uniform draw)."""
        curve = self.curves.get(profile)
        if curve is not None:
            u = rng.random()
            return sum(1 for rate in curve[:k] if rate > u)
        sd = self.accept.get(profile, (0.0, 0.0, 0.0))[1]
        x = rng.gauss(level, sd) if sd > 0 else level
        return min(k, max(0, math.floor(x + 0.5)))


@dataclass
class FirstRunFast:
    """The fault SIM_FAULT_FIRST_RUN_FAST=<factor>: the first SIM_FAULT_FIRST_RUN_REQUESTS fixed-length
    (ignore_eos) requests a deployment serves decode `factor` x faster, then normal (field note 16: a first
    run said 69.3 tok/s, four re-runs 38-42). Like a GPU that boosts while cold and is still warm after a
    restart, the count lives in a file in the container's own filesystem (SIM_FAULT_FIRST_RUN_STATE), so a
    `docker start` of the same container goes on counting and only a new container starts afresh.
    Readiness probes and acceptance checks are not fixed-length, so they do not use it up. Not part of the
    Truth: it is the lie a measurement must catch."""

    factor: float = 1.0
    requests: int = 0
    state: str = ""  # the count's file ("" = the fault is off)
    taken: int = 0

    @classmethod
    def from_env(cls, env) -> FirstRunFast:
        factor = env_float(env, "SIM_FAULT_FIRST_RUN_FAST", 1.0)
        requests = int(env_float(env, "SIM_FAULT_FIRST_RUN_REQUESTS", 20))
        if factor <= 0 or requests < 0:
            raise SimError(f"ValueError: SIM_FAULT_FIRST_RUN_FAST must be > 0 and SIM_FAULT_FIRST_RUN_REQUESTS >= 0, "
                           f"got {factor} and {requests}")
        if factor == 1.0:
            return cls()
        state = env.get("SIM_FAULT_FIRST_RUN_STATE", DEFAULT_FIRST_RUN_STATE)
        taken = read_count(state)
        write_count(state, taken, "SIM_FAULT_FIRST_RUN_FAST")  # at start: an unwritable state is said then
        return cls(factor, requests, state, taken)

    def take(self) -> bool:
        """Count one fixed-length request (call under a lock): True while the first run lasts."""
        if self.taken >= self.requests:
            return False
        self.taken += 1
        if self.state:
            write_count(self.state, self.taken, "SIM_FAULT_FIRST_RUN_FAST")
        return True


def position_rate(mean: float, sd: float, i: int) -> float:
    """P(floor(x + 0.5) > i) = P(x >= i + 0.5) for x ~ N(mean, sd): draft position i accepted."""
    if sd <= 0:
        return 1.0 if mean >= i + 0.5 else 0.0
    return 0.5 * math.erfc((i + 0.5 - mean) / (sd * math.sqrt(2)))


def expected(truth: Truth, profile: str, k: int | None = None, batch: int = 1) -> Expected:
    """EXPECTED decode tok/s and tokens per step for `profile` at draft budget k (default the
    server's; 0 = no speculation) and `batch` concurrent requests, computed from the truth."""
    k = truth.spec_k if k is None else k
    curve = truth.curves.get(profile)
    if curve is not None:
        rates = tuple(curve[i] if i < len(curve) else 0.0 for i in range(k))
    else:
        mean, sd, request_sd = truth.accept.get(profile, (0.0, 0.0, 0.0))
        total_sd = math.hypot(sd, request_sd)
        rates = tuple(position_rate(mean, total_sd, i) for i in range(k))
    accepted = sum(rates)
    step = truth.step_seconds(batch, k) / truth.speed([profile])
    per_request = (1 + accepted) / step
    return Expected(accepted, 1 + accepted, rates, step, per_request, per_request * max(batch, 1))


def parse_accept(spec: str) -> dict[str, tuple[float, float, float]]:
    """SIM_ACCEPT 'code=3.2:0.8:0.25,prose=1.25:1.0' -> {profile: (mean, step sd, request sd)}."""
    out = dict(DEFAULT_ACCEPT)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            name, rest = part.split("=")
            nums = [float(x) for x in rest.split(":")]
            if len(nums) not in (2, 3) or min(nums[1:]) < 0:
                raise ValueError
        except ValueError:
            raise SimError(f"ValueError: bad SIM_ACCEPT entry {part!r} "
                           "(want profile=mean:step_sd[:request_sd], sds >= 0)") from None
        out[name.strip()] = (nums[0], nums[1], nums[2] if len(nums) == 3 else DEFAULT_REQUEST_SD)
    return out


def parse_curves(spec: str) -> dict[str, tuple[float, ...]]:
    """SIM_ACCEPT_CURVE 'code=0.98:0.9:0.6,prose=0.8:0.5' -> {profile: per-position acceptance rates}, each
    in [0, 1] and non-increasing (position i is accepted only after position i - 1)."""
    out: dict[str, tuple[float, ...]] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            name, rest = part.split("=")
            rates = tuple(float(x) for x in rest.split(":"))
            if not name.strip() or any(not 0 <= r <= 1 for r in rates) or any(b > a for a, b in zip(rates, rates[1:])):
                raise ValueError
        except ValueError:
            raise SimError(f"ValueError: bad SIM_ACCEPT_CURVE entry {part!r} (want profile=r0:r1:..., "
                           "rates in [0, 1], non-increasing)") from None
        out[name.strip()] = rates
    return out


def parse_profile_slow(spec: str) -> dict[str, float]:
    """SIM_PROFILE_SLOW 'zh=0.8,code=0.9' -> {profile: rate factor in (0, 1]}: that profile decodes slower."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            name, value = part.split("=")
            factor = float(value)
            if not 0 < factor <= 1:
                raise ValueError
        except ValueError:
            raise SimError(f"ValueError: bad SIM_PROFILE_SLOW entry {part!r} (want profile=factor, 0 < factor <= 1)"
                           ) from None
        out[name.strip()] = factor
    return out
