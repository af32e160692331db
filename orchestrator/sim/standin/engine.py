"""Generation: a deterministic tokenizer, the prefix cache, and the engine that paces requests."""
from __future__ import annotations

import hashlib
import random
import re
import threading
import time
import zlib

from .answers import CJK, TOKEN_RE, Faults, Features, salt
from .base import Life, Stopped
from .batch import Batch, Member
from .metrics import Metrics
from .speed import FirstRunFast, Truth

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


class Engine:
    """Deterministic greedy generation, paced by the speed model in speed.py.

    A request is admitted (max_num_seqs), prefilled on its own (SIM_TTFT + uncached prompt tokens /
    SIM_PREFILL_TPS), emits its first token, then joins the shared batch (batch.py), whose steps emit
    1 (plain) or 1 + accepted (speculative) tokens per request.  The request counts as finished (the
    slot freed, request_success_total counted) before its last group is handed out, as in vLLM, where
    the engine finishes a request before the API server sends its last chunk.
    """

    def __init__(self, args, spec: dict | None, env, life: Life):
        self.args, self.life = args, life
        self.spec_k = spec["num_speculative_tokens"] if spec else 0
        self.truth = Truth.from_env(env, self.spec_k)
        self.stalled = threading.Event()  # a peer died / scheduler stuck: /health still says 200
        if env.get("SIM_FAULT_COMPLETIONS_HANG") == "1":
            self.stalled.set()
        self.dead = False
        self.faults, self.features = Faults.from_env(env), Features.from_args(args)
        enabled = args.enable_prefix_caching is not False  # on by default in vLLM V1
        self.cache = PrefixCache(args.block_size, enabled)
        self.metrics = Metrics(args.served_name, self.spec_k, self._metrics_lag, self.truth.seed)
        self.first_run = FirstRunFast.from_env(env)
        self.batch = Batch(self.truth, self.metrics, life, self.stalled, self.first_run.factor)
        self.counter = 0
        self.slots = threading.Condition()

    def _metrics_lag(self, running: int) -> float:
        """How far a scrape may look back: SIM_METRICS_LAG steps of the batch as it runs now."""
        return self.truth.metrics_lag * self.truth.step_seconds(max(running, 1)) * self.batch.pace

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
                m.changed()
            while m.running >= self.args.max_num_seqs:
                self.slots.wait()
            with m.lock:
                m.waiting -= 1
                m.running += 1
                m.changed()

    def _release(self, reason: str) -> None:
        with self.slots:
            with self.metrics.lock:
                self.metrics.running -= 1
                self.metrics.success[reason] += 1
                self.metrics.changed()
            self.slots.notify()

    def prepare(self, prompt: str) -> dict:
        """Arrival bookkeeping: token ids, prefix-cache hit, profile, the request's RNG and acceptance level."""
        ids = [token_id(t) for t in tokenize(prompt)]
        cached = self.cache.match_and_insert(ids)
        with self.metrics.lock:
            self.counter += 1
            n = self.counter
        self.metrics.add(prefix_cache_queries=len(ids) if self.cache.enabled else 0, prefix_cache_hits=cached)
        digest = salt(int(hashlib.sha256(prompt.encode()).hexdigest()[:16], 16), self.faults)
        rng = random.Random(self.truth.seed * 1_000_003 + n)
        profile = profile_of(prompt)
        return {"ids": ids, "cached": cached, "profile": profile, "digest": digest, "rng": rng,
                "level": self.truth.level(profile, rng)}

    def output_tokens(self, req: dict, max_tokens: int, ignore_eos: bool,
                      forced: list[str] | None = None) -> tuple[list[str], str]:
        """The greedy continuation (text tokens; '' stands for EOS, which counts but prints nothing);
        `forced`: an answer's own pieces (answers.py), cut at max_tokens, then EOS."""
        if forced is not None:
            if len(forced) + 1 > max_tokens:
                return forced[:max_tokens], "length"
            return forced + [""], "stop"
        if ignore_eos:  # a benchmark's fixed-length request: the first run after a start may be fast
            with self.metrics.lock:
                req["fast"] = self.first_run.take()
        vocab = {"code": CODE, "zh": ZH}.get(req["profile"], PROSE)
        pick = random.Random(req["digest"])
        eos_at = 20 + req["digest"] % 480
        if not ignore_eos and eos_at < max_tokens:
            return [pick.choice(vocab) for _ in range(eos_at)] + [""], "stop"
        return [pick.choice(vocab) for _ in range(max_tokens)], "length"

    def steps(self, req: dict, tokens: list[str], reason: str):
        """Yield the token groups of the request's successive engine steps, each when its step ends.

        The first group is the prefill's token; with speculation and SIM_FIRST_MERGE (default) it also
        carries the first verification step's tokens, so the first chunk holds more than one token;
        without speculation it carries the first decode step's token with probability SIM_FIRST_CHUNK_P.
        """
        self._admit()
        member, finished = Member(req, tokens, 1), False
        held = len(req["ids"]) + len(tokens)
        self.metrics.add(kv_used=held)
        try:
            self._until(time.monotonic() + self.truth.prefill_seconds(len(req["ids"]), req["cached"]))
            self.metrics.add(prompt_tokens=len(req["ids"]))
            self.metrics.step(1, None)
            group = tokens[:1]
            self.batch.join(member)
            merge = self.truth.first_merge if self.spec_k else req["rng"].random() < self.truth.first_chunk_p
            if merge and member.left:
                group = group + self.batch.next_group(member)
            while True:
                if self.batch.done(member):
                    finished = True
                    self._release(reason)
                    yield group
                    return
                yield group
                group = self.batch.next_group(member)
        finally:
            self.batch.leave(member)
            self.metrics.add(kv_used=-held)
            if not finished:
                self._release("abort")
