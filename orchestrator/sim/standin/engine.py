"""Generation: a deterministic tokenizer, prefix cache, Prometheus metrics and a paced engine."""
from __future__ import annotations

import hashlib
import random
import re
import threading
import time
import zlib

from .base import FINISH_REASONS, Life, SimError, Stopped, env_float
from .config import parse_accept

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
TOKEN_RE = re.compile(rf"[{CJK}]|[^\W{CJK}]+|[^\w\s]")
PROSE = [" the", " model", " runs", " on", " two", " nodes", " and", " each", " rank", " loads",
         " its", " shard", " of", " weights", ",", " then", " serves", " tokens", " quickly", "."]
CODE = [" def", " return", " x", " =", " +", " 1", "(", ")", ":", " if", " for", " in", " range",
        " value", ",", " self", "."]
ZH = list("的是在一了不和有大这中人上为们地个用时要动国产以我到他会作来分生对于学下")


def tokenize(text: str) -> list[str]:
    """Deterministic tokenizer: words, single punctuation marks, and one token per CJK character."""
    return TOKEN_RE.findall(text)


def token_id(tok: str) -> int:
    return zlib.crc32(tok.encode()) % 151_000 + 100


def profile_of(prompt: str) -> str:
    if any(s in prompt for s in ("def ", "{", ";", "import ")):
        return "code"
    if re.search(f"[{CJK}]", prompt):
        return "zh"
    return "prose"


class PrefixCache:
    """vLLM-style block hashing: cached = full blocks of the prompt already seen, in a chain."""

    def __init__(self, block_size: int, enabled: bool):
        self.block, self.enabled = block_size, enabled
        self.blocks: set[int] = set()
        self.lock = threading.Lock()

    def match_and_insert(self, ids: list[int]) -> int:
        if not self.enabled:
            return 0
        hits, h, matching = 0, 0, True
        with self.lock:
            if len(self.blocks) > 1_000_000:
                self.blocks.clear()  # crude eviction
            for start in range(0, len(ids) // self.block * self.block, self.block):
                h = hash((h, tuple(ids[start:start + self.block])))
                # the last prompt token is always recomputed, so a block ending on it cannot hit
                if matching and h in self.blocks and start + self.block < len(ids):
                    hits += self.block
                else:
                    matching = False
                self.blocks.add(h)
        return hits


class Metrics:
    """The Prometheus counters/gauges the bench reads, updated per engine step."""

    def __init__(self, model: str, spec_k: int):
        self.model, self.spec_k = model, spec_k
        self.lock = threading.Lock()
        self.c = {"prompt_tokens": 0, "generation_tokens": 0, "prefix_cache_queries": 0,
                  "prefix_cache_hits": 0, "spec_decode_num_drafts": 0,
                  "spec_decode_num_draft_tokens": 0, "spec_decode_num_accepted_tokens": 0}
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.per_pos = [0] * spec_k
        self.running = self.waiting = 0

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

    def step(self, tokens: int, accepted: int | None) -> None:
        with self.lock:
            self.c["generation_tokens"] += tokens
            if accepted is not None:
                self.c["spec_decode_num_drafts"] += 1
                self.c["spec_decode_num_draft_tokens"] += self.spec_k
                self.c["spec_decode_num_accepted_tokens"] += accepted
                for pos in range(accepted):
                    self.per_pos[pos] += 1

    def finish(self, reason: str) -> None:
        with self.lock:
            self.success[reason] += 1

    def render(self) -> str:
        lab = f'model_name="{self.model}",engine="0"'
        out = []

        def metric(name, kind, help_, samples):
            full = name + ("_total" if kind == "counter" else "")
            out.extend([f"# HELP {full} {help_}", f"# TYPE {full} {kind}"])
            out.extend(f"{full}{{{lab}{extra}}} {float(v)!r}" for extra, v in samples)

        with self.lock:
            metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [("", self.running)])
            metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", self.waiting)])
            metric("vllm:request_success", "counter", "Count of successfully processed requests.",
                   [(f',finished_reason="{r}"', n) for r, n in self.success.items()])
            metric("vllm:prefix_cache_queries", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.",
                   [("", self.c["prefix_cache_queries"])])
            metric("vllm:prefix_cache_hits", "counter",
                   "Prefix cache hits, in terms of number of cached tokens.", [("", self.c["prefix_cache_hits"])])
            if self.spec_k:
                for key, help_ in (("spec_decode_num_drafts", "Number of spec decoding drafts."),
                                   ("spec_decode_num_draft_tokens", "Number of draft tokens."),
                                   ("spec_decode_num_accepted_tokens", "Number of accepted tokens.")):
                    metric("vllm:" + key, "counter", help_, [("", self.c[key])])
                metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
                       "Accepted tokens per draft position.",
                       [(f',position="{i}"', n) for i, n in enumerate(self.per_pos)])
            metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
                   [("", self.c["prompt_tokens"])])
            metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
                   [("", self.c["generation_tokens"])])
        return "\n".join(out) + "\n"


class Engine:
    """Deterministic greedy generation paced at a true decode rate, with simulated speculation.

    Each step emits 1 token (plain decoding) or 1 + accepted draft tokens (speculative decoding);
    a step of k tokens ends k / SIM_DECODE_TPS seconds after the previous one, scheduled against an
    absolute deadline so the rate does not drift.  The prefill step emits 1 token after SIM_TTFT.
    """

    def __init__(self, args, spec: dict | None, env, life: Life):
        self.args, self.life = args, life
        self.spec_k = spec["num_speculative_tokens"] if spec else 0
        self.tps = env_float(env, "SIM_DECODE_TPS", 50.0)
        self.ttft = env_float(env, "SIM_TTFT", 0.05)
        self.seed = int(env_float(env, "SIM_SEED", 0))
        self.accept = parse_accept(env.get("SIM_ACCEPT", ""))
        if self.tps <= 0:
            raise SimError("ValueError: SIM_DECODE_TPS must be > 0")
        self.stalled = threading.Event()  # a peer died / scheduler stuck: /health still says 200
        if env.get("SIM_FAULT_COMPLETIONS_HANG") == "1":
            self.stalled.set()
        self.dead = False
        enabled = args.enable_prefix_caching is not False  # on by default in vLLM V1
        self.cache = PrefixCache(args.block_size, enabled)
        self.metrics = Metrics(args.served_name, self.spec_k)
        self.counter = 0
        self.slots = threading.Condition()

    def _until(self, deadline: float) -> None:
        if self.stalled.is_set():
            self.life.stop.wait()  # never progresses; answers only by process exit
            raise Stopped()
        self.life.sleep(deadline - time.monotonic())

    def _admit(self) -> None:
        """max_num_seqs bounds the running batch; the rest waits (vllm:num_requests_waiting)."""
        m = self.metrics
        with self.slots:
            with m.lock:
                m.waiting += 1
            while m.running >= self.args.max_num_seqs:
                self.slots.wait()
            with m.lock:
                m.waiting -= 1
                m.running += 1

    def _release(self) -> None:
        with self.slots:
            with self.metrics.lock:
                self.metrics.running -= 1
            self.slots.notify()

    def prepare(self, prompt: str) -> dict:
        """Prefill bookkeeping: token ids, prefix-cache hit, profile and the request's RNG."""
        ids = [token_id(t) for t in tokenize(prompt)]
        cached = self.cache.match_and_insert(ids)
        with self.metrics.lock:
            self.counter += 1
            n = self.counter
        self.metrics.add(prompt_tokens=len(ids), prefix_cache_queries=len(ids) if self.cache.enabled else 0,
                         prefix_cache_hits=cached)
        digest = int(hashlib.sha256(prompt.encode()).hexdigest()[:16], 16)
        return {"ids": ids, "cached": cached, "profile": profile_of(prompt), "digest": digest,
                "rng": random.Random(self.seed * 1_000_003 + n)}

    def output_tokens(self, req: dict, max_tokens: int, ignore_eos: bool) -> tuple[list[str], str]:
        """The greedy continuation (text tokens; '' stands for EOS, which counts but prints nothing)."""
        vocab = {"code": CODE, "zh": ZH}.get(req["profile"], PROSE)
        pick = random.Random(req["digest"])
        eos_at = 20 + req["digest"] % 480
        if not ignore_eos and eos_at < max_tokens:
            return [pick.choice(vocab) for _ in range(eos_at)] + [""], "stop"
        return [pick.choice(vocab) for _ in range(max_tokens)], "length"

    def steps(self, req: dict, tokens: list[str]):
        """Yield the token groups of successive engine steps, each at its scheduled time."""
        self._admit()
        try:
            deadline = time.monotonic() + self.ttft
            self._until(deadline)
            self.metrics.step(1, None)
            yield tokens[:1]
            pos = 1
            mean, sd = self.accept.get(req["profile"], (0.0, 0.0))
            while pos < len(tokens):
                accepted = None
                k = 1
                if self.spec_k:
                    drawn = min(self.spec_k, max(0, round(req["rng"].gauss(mean, sd))))
                    k = min(1 + drawn, len(tokens) - pos)
                    accepted = k - 1
                deadline += k / self.tps
                self._until(deadline)
                self.metrics.step(k, accepted)
                yield tokens[pos:pos + k]
                pos += k
        finally:
            self._release()


