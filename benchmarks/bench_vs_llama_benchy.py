#!/usr/bin/env python3
"""`spark-deploy bench` and llama-benchy against the same stand-in, with known truth (issue 12, acceptance 6;
docs/bench-vs-llama-benchy.md quotes a run of it).

    python3 -m venv /tmp/llama-benchy-venv && /tmp/llama-benchy-venv/bin/pip install llama-benchy==0.4.0
    .venv/bin/python benchmarks/bench_vs_llama_benchy.py [--llama-benchy PATH] [--runs 6] [--tokens 256]

Two stand-ins in turn, one at a time: speculation k=4, then none (SIM_DECODE_TPS 60 by default, 127.0.0.1).
Against each, llama-benchy runs first and bench second, once per level (1, then --concurrency C), so the
/metrics deltas around a run are that tool's alone. The plain stand-in then gets one more short run of
each tool with one foreign request sent into its second measured request: what each does with a
polluted measurement.

Only loopback is used. llama-benchy's --book-url is a generated text on a local HTTP server; its HOME is a
temp dir, so its book cache goes there too. --tokenizer is a local tokenizer.json (WordLevel, built here
with `tokenizers`, which llama-benchy installs). It splits text exactly like the stand-in's `tokenize`, so
both count the same prompt tokens. --skip-coherence is set, since the stand-in does not answer "Paris".
Both tools get the same output length with ignore_eos (llama-benchy --exact-tg) and fresh prompts
(llama-benchy --no-cache). The truth is `orchestrator.sim.standin.speed.expected` for the configured
SIM_* knobs, which the stand-in prints at start. Every number printed is measured in this run.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from orchestrator.bench.metrics import RUNNING, SUCCESS, Delta, delta, scrape
from orchestrator.sim.standin.engine import CJK
from orchestrator.sim.standin.local import LocalStandin
from orchestrator.sim.standin.speed import Truth, expected

PROFILE = "prose"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
INTRUDER_TOKENS = 128
WORDS = ["the", "model", "runs", "on", "two", "nodes", "and", "each", "rank", "loads", "its", "shard", "of",
         "weights", "then", "serves", "tokens", "quickly", "Holmes", "Watson", "street", "night", "door", "letter"]
# The stand-in's tokenizer (engine.TOKEN_RE): one CJK char, a run of word chars, or one punctuation mark.
TOKEN_PATTERN = rf"[{CJK}]|[^\W{CJK}]+|[^\w\s]"
TOKENIZER_SCRIPT = """\
import sys
from tokenizers import Regex, Tokenizer, models, pre_tokenizers
pattern, book, out = sys.argv[1:4]
split = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
pre = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), split])
pieces = [p for p, _ in pre.pre_tokenize_str(open(book, encoding="utf-8").read())]
vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(set(pieces)))}}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre
tok.save(out)
"""


def make_inputs(tmp: Path, llama_python: str) -> None:
    """book.txt (generated prose: no ';', '{' or 'def ', so the stand-in's profile is prose) and
    tokenizer.json, a WordLevel tokenizer whose pre-tokenizer is the stand-in's token regex."""
    rng = random.Random(1)
    book = "\n".join(" ".join(rng.choice(WORDS) for _ in range(15)) + "." for _ in range(3000))
    (tmp / "book.txt").write_text(book, encoding="utf-8")
    subprocess.run([llama_python, "-c", TOKENIZER_SCRIPT, TOKEN_PATTERN, str(tmp / "book.txt"),
                    str(tmp / "tokenizer.json")], check=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def serve_dir(path: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(path)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


class Intruder(threading.Thread):
    """Sends ONE foreign chat request of `tokens` tokens once the server has finished `after` requests
    (counted from start) and is running one: that request then shares the tool's verification steps."""

    def __init__(self, url: str, model: str, after: int, tokens: int = INTRUDER_TOKENS, bound_s: float = 120.0):
        super().__init__(daemon=True)
        self.url, self.model, self.after, self.tokens, self.bound_s = url, model, after, tokens, bound_s
        self.sent_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as http:
            base = scrape(http).get(SUCCESS) or 0.0
            deadline = time.monotonic() + self.bound_s
            while not self.stop.is_set() and time.monotonic() < deadline:
                snap = scrape(http)
                if (snap.get(SUCCESS) or 0.0) - base >= self.after and (snap.get(RUNNING) or 0) >= 1:
                    self.sent_at = time.monotonic()
                    http.post("/v1/chat/completions", json={
                        "model": self.model, "max_tokens": self.tokens, "ignore_eos": True,
                        "messages": [{"role": "user", "content": f"Intruder {random.getrandbits(64):x}. "
                                      "Tell the story of the night Watson found the letter."}]})
                    return
                self.stop.wait(0.01)


@dataclass
class Run:
    """One tool's output against one stand-in, and what the server's /metrics counted around it."""

    data: dict
    delta: Delta
    seconds: float
    prompt_tokens: float  # vllm:prompt_tokens_total's growth

    def drawn_tokens_per_step(self) -> float:
        """1 + accepted / drafts over the tool's whole window (1 without speculation): the steps the
        stand-in actually drew for this tool's requests, where the formula's truth is their expectation."""
        d = self.delta
        return 1 + d.accepted / d.drafts if d.drafts else 1.0


def metered(url: str, fn: Callable[[], dict]) -> Run:
    with httpx.Client(base_url=url, timeout=10) as http:
        before, t0 = scrape(http), time.monotonic()
        data = fn()
        after = scrape(http)
    prompt = (after.get(PROMPT_TOKENS) or 0.0) - (before.get(PROMPT_TOKENS) or 0.0)
    return Run(data, delta(before, after), time.monotonic() - t0, prompt)


@dataclass
class Tools:
    """Where both tools find their inputs."""

    llama_benchy: str
    tmp: Path
    book_url: str
    tokens: int
    pp: int


def run_llama_benchy(t: Tools, srv: LocalStandin, c: int, runs: int) -> dict:
    out = t.tmp / f"lb-{srv.port}-c{c}-{runs}.json"
    argv = [t.llama_benchy, "--base-url", srv.url + "/v1", "--model", srv.model, "--tokenizer", str(t.tmp),
            "--pp", str(t.pp), "--tg", str(t.tokens), "--runs", str(runs), "--exact-tg", "--no-cache",
            "--skip-coherence", "--latency-mode", "none", "--book-url", t.book_url, "--concurrency", str(c),
            "--format", "json", "--save-result", str(out)]
    p = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600, env={**os.environ, "HOME": str(t.tmp)})
    if p.returncode != 0 or not out.exists():
        sys.exit(f"llama-benchy failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    data = json.loads(out.read_text())
    bench = next(b for b in data["benchmarks"] if b["concurrency"] == c and not b["is_context_prefill_phase"])
    # its two warm-up requests print the server's prompt tokens ("Server: 20"): kept to check ours
    return {**bench, "warmup_prompt_tokens": [int(n) for n in re.findall(r"Server: (\d+)", p.stdout)]}


def run_bench(t: Tools, srv: LocalStandin, c: int, shots: int) -> dict:
    exe = str(Path(sys.executable).with_name("spark-deploy"))
    argv = [exe, "bench", "--url", srv.url, "--profile", PROFILE, "--shots", str(shots),
            "--max-tokens", str(t.tokens), "--concurrency", str(c), "--json"]
    p = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if p.returncode != 0:
        sys.exit(f"spark-deploy bench failed ({p.returncode}):\n{p.stderr[-2000:]}")
    data = json.loads(p.stdout)["result"]  # the --json envelope: {ok, result, error}
    group = next(g for g in data["groups"] if g["concurrency"] == c and g["profile"] == PROFILE)
    return {**group, "discarded_list": data["discarded"], "ceiling": data.get("ceiling")}


def shot_truth(truth: Truth, kept: list[dict]) -> list[float]:
    """Per kept c=1 shot: bench's decode tok/s over the exact figure for the steps that shot drew. Its
    first chunk is the prefill token plus step 1, so its decode interval is drafts - 1 steps long."""
    out = []
    for shot in kept:
        (req,) = shot["requests"]
        steps = shot["delta"]["drafts"]
        out.append(shot["decode_tps"] / ((req["completion_tokens"] - req["first_chunk_tokens"])
                                         / ((steps - 1) * truth.step_seconds(1))))
    return out


def ttft_truth(truth: Truth, prompt_tokens: float, cached: int = 0) -> float:
    """Arrival to the first content chunk at c=1: prefill, plus the merged first verification step."""
    merged = truth.step_seconds(1) if truth.spec_k and truth.first_merge else 0.0
    return truth.prefill_seconds(round(prompt_tokens), cached) + merged


def line(name: str, truth: str = "", lb: str = "", sd: str = "") -> str:
    return f"  {name:46} {truth:>9} {lb:>17} {sd:>17}"


def vs(value: float, truth: float, fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(value)} ({value / truth:.3f})"


def report(truth: Truth, runs: int, t: Tools, levels: dict[int, tuple[Run, Run]]) -> None:
    (lb1, sd1), c = levels[1], max(levels)
    (lbc, sdc) = levels[c]
    e1, ec = expected(truth, PROFILE, batch=1), expected(truth, PROFILE, batch=c)
    l1, g1, lc, gc = lb1.data, sd1.data, lbc.data, sdc.data
    kept = [s for s in g1["shots"] if s["ok"] and not s["warmup"]]
    sd_prompt = statistics.mean(r["prompt_tokens"] for s in kept for r in s["requests"])
    name = f"speculation k={truth.spec_k}" if truth.spec_k else "no speculation"
    print(f"\n{name}: SIM_DECODE_TPS={truth.decode_tps:g}, profile {PROFILE}, {runs} runs/shots of {t.tokens} "
          f"tokens per level (each tool run once per level)")
    print(line("figure (ratio to the truth)", "truth", "llama-benchy", "bench"))
    print(line("decode tok/s, c=1 (lb mean, bench median)", f"{e1.decode_tps:.1f}",
               vs(l1["tg_throughput"]["mean"], e1.decode_tps), vs(g1["decode_tps"]["median"], e1.decode_tps)))
    d1 = [r.drawn_tokens_per_step() / truth.step_seconds(1) for r in (lb1, sd1)]
    if truth.spec_k:
        print(line("  truth of the steps drawn in each window", "", f"{d1[0]:.1f}", f"{d1[1]:.1f}"))
        print(line("  ratio to that", "", f"{l1['tg_throughput']['mean'] / d1[0]:.3f}",
                   f"{g1['decode_tps']['median'] / d1[1]:.3f}"))
        exact = shot_truth(truth, kept)
        print(line("  bench per shot / that shot's exact truth", "", "",
                   f"{statistics.median(exact):.3f} ({min(exact):.3f}-{max(exact):.3f})"))
        lb_way = statistics.median((r["completion_tokens"] - 1) / (r["completion_tokens"] - r["first_chunk_tokens"])
                                   for s in kept for r in s["requests"])
        print(line("  llama-benchy's count / bench's, same shots", "", f"{lb_way:.3f}", ""))
    print(line(f"decode tok/s per request, c={c}", f"{ec.decode_tps:.1f}",
               vs(lc["tg_req_throughput"]["mean"], ec.decode_tps), vs(gc["decode_tps"]["median"], ec.decode_tps)))
    print(line(f"aggregate tok/s, c={c}", f"{ec.aggregate_tps:.1f}",
               vs(lc["tg_throughput"]["mean"], ec.aggregate_tps), vs(gc["aggregate_tps"]["median"], ec.aggregate_tps)))
    if truth.spec_k:
        dc = [c * r.drawn_tokens_per_step() / truth.step_seconds(c) for r in (lbc, sdc)]
        print(line("  aggregate truth of the steps drawn", "", f"{dc[0]:.1f}", f"{dc[1]:.1f}"))
        print(line("  ratio to that", "", f"{lc['tg_throughput']['mean'] / dc[0]:.3f}",
                   f"{gc['aggregate_tps']['median'] / dc[1]:.3f}"))
    lt, st = ttft_truth(truth, t.pp), ttft_truth(truth, sd_prompt)
    warm_n = l1["warmup_prompt_tokens"]
    per_req = (lb1.prompt_tokens - sum(warm_n)) / (lb1.delta.success - len(warm_n))
    print(line("server's prompt tokens per llama-benchy request", f"{t.pp}", f"{per_req:.1f}", ""))
    print(line(f"TTFT c=1, ms: llama-benchy's {t.pp}-token prompts", f"{1000 * lt:.1f}",
               vs(l1["e2e_ttft"]["mean"], 1000 * lt), ""))
    print(line(f"TTFT c=1, ms: bench's {sd_prompt:.0f}-token prompts", f"{1000 * st:.1f}", "",
               vs(1000 * g1["ttft_cold_s"]["median"], 1000 * st)))
    d = g1["decode_tps"]
    print(line("scatter of decode tok/s, c=1", "", f"std {l1['tg_throughput']['std'] / l1['tg_throughput']['mean']:.1%}",
               f"spread {d['spread']:.1%}"))
    print(line(f"requests the server counted (c=1 / c={c})", "", f"{lb1.delta.success:g} / {lbc.delta.success:g}",
               f"{sd1.delta.success:g} / {sdc.delta.success:g}"))
    print(line(f"prefix-cache hit tokens (c=1 / c={c})", "", f"{lb1.delta.cache_hits:g} / {lbc.delta.cache_hits:g}",
               f"{sd1.delta.cache_hits:g} / {sdc.delta.cache_hits:g}"))
    print(line(f"wall time, s (c=1 / c={c})", "", f"{lb1.seconds:.0f} / {lbc.seconds:.0f}",
               f"{sd1.seconds:.0f} / {sdc.seconds:.0f}"))
    print("  only llama-benchy reports:")
    print(f"    pp tok/s, c=1: {l1['pp_throughput']['mean']:.0f} = prompt tokens / TTFT (that ratio's truth "
          f"{t.pp / lt:.0f}; the stand-in's configured prefill rate is {truth.prefill_tps:g})")
    print(f"    peak tok/s in a 1 s window: c=1 {l1['peak_throughput']['mean']:.1f}, c={c} {lc['peak_throughput']['mean']:.1f}")
    print("  only bench reports:")
    spec = g1.get("speculation")
    if spec:
        print(f"    tokens per verification step {vs(spec['tokens_per_step'], e1.tokens_per_step, '{:.3f}')}; "
              f"drawn in its window {sd1.drawn_tokens_per_step():.3f}; per shot spread "
              f"{g1['tokens_per_step_per_shot']['spread']:.1%}")
        print(f"    acceptance rate {spec['acceptance_rate']:.1%} (truth {e1.accepted_per_step / truth.spec_k:.1%})")
        print("    accepted per draft position " + " ".join(f"{r:.0%}" for r in spec["per_pos_rates"])
              + " (truth " + " ".join(f"{r:.0%}" for r in e1.per_position) + ")")
        print(f"    saturation {spec['saturation']:.0%} of k={spec['draft_budget']} (truth "
              f"{e1.tokens_per_step / truth.spec_k:.0%}; k from {spec['draft_budget_source']})")
    else:
        print("    speculation: none (the server exports no spec_decode_* counters)")
    tpe = g1["tokens_per_event"]["median"]
    print(f"    tokens per SSE content event {tpe:.2f}: counting events would say {d['median'] / tpe:.1f} tok/s")
    ci = d["ci95"]
    print(f"    headline {'PROVISIONAL: ' + str(d['advice']) if d['provisional'] else 'final'}; decode "
          f"{d['min']:.1f}-{d['max']:.1f}; 95% CI of the median "
          + (f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "n/a (needs 6 shots)"))
    warm = g1["ttft_warm"]
    if warm and warm.get("ttft_s") is not None:
        print(f"    TTFT warm (the same prompt again): {1000 * warm['ttft_s']:.1f} ms, {warm['cached_tokens']} of "
              f"{warm['prompt_tokens']} prompt tokens cached (truth {1000 * ttft_truth(truth, warm['prompt_tokens'], warm['cached_tokens'] or 0):.1f} ms)")
    n_disc = len(g1["discarded_list"]) + len(gc["discarded_list"])
    print(f"    discarded shots: {n_disc}; ceiling: "
          + ("n/a with --url (it needs a recipe: the safetensors headers on its node)" if not g1["ceiling"]
             else json.dumps(g1["ceiling"])[:200]))


def intruded(srv: LocalStandin, after: int, fn: Callable[[], dict]) -> tuple[Run, bool]:
    """`fn` metered while an Intruder waits for its moment; also whether it found one."""
    spy = Intruder(srv.url, srv.model, after)
    spy.start()
    try:
        run = metered(srv.url, fn)
    finally:
        spy.stop.set()
        spy.join(30)
    return run, spy.sent_at is not None


def report_polluted(truth: Truth, lb: Run, sd: Run, spies: list[bool]) -> None:
    l1, g1 = lb.data, sd.data
    print(f"\none foreign {INTRUDER_TOKENS}-token request sent into each tool's second measured request "
          f"(no speculation, c=1, truth {truth.decode_tps:.1f} tok/s)")
    print("  llama-benchy runs: " + " ".join(f"{v:.1f}" for v in l1["tg_throughput"]["values"])
          + f" -> mean {vs(l1['tg_throughput']['mean'], truth.decode_tps)}, std {l1['tg_throughput']['std']:.1f}")
    kept = [s["decode_tps"] for s in g1["shots"] if s["ok"] and not s["warmup"]]
    print("  bench kept shots: " + " ".join(f"{v:.1f}" for v in kept)
          + f" -> median {vs(g1['decode_tps']['median'], truth.decode_tps)}, spread {g1['decode_tps']['spread']:.1%}")
    for s in g1["discarded_list"]:
        print(f"  bench discarded shot {s['shot']}: {s['reason']}: {s['why']}")
    print(f"  requests the server counted: llama-benchy {lb.delta.success:g}, bench {sd.delta.success:g}"
          + ("" if all(spies) else "  (an intruder found no moment to send)"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-benchy", default=shutil.which("llama-benchy") or "/tmp/llama-benchy-venv/bin/llama-benchy")
    p.add_argument("--runs", type=int, default=6, help="llama-benchy --runs = bench --shots, per level, speculation")
    p.add_argument("--runs-plain", type=int, default=3, help="the same without speculation (no spread to sample)")
    p.add_argument("--tokens", type=int, default=256, help="output tokens per request (both tools)")
    p.add_argument("--pp", type=int, default=128, help="llama-benchy prompt tokens")
    p.add_argument("--concurrency", type=int, default=4, help="the level compared besides 1")
    p.add_argument("--rate", default="60", help="SIM_DECODE_TPS")
    p.add_argument("--no-intrude", action="store_true", help="skip the polluted-run demonstration")
    a = p.parse_args()
    if not Path(a.llama_benchy).exists():
        sys.exit(f"llama-benchy not found at {a.llama_benchy}: see this script's docstring")
    started = time.monotonic()
    version = subprocess.run([a.llama_benchy, "--version"], capture_output=True, text=True, check=False).stdout.split()[-1]
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, llama-benchy {version}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-vs-lb-") as tmp_s:
        tmp = Path(tmp_s)
        make_inputs(tmp, str(Path(a.llama_benchy).with_name("python")))
        files, files_url = serve_dir(tmp)
        t = Tools(a.llama_benchy, tmp, files_url + "/book.txt", a.tokens, a.pp)
        try:
            for k, runs in ((4, a.runs), (0, a.runs_plain)):
                with LocalStandin(spec_k=k, env={"SIM_DECODE_TPS": a.rate}) as srv:
                    levels = {c: (metered(srv.url, functools.partial(run_llama_benchy, t, srv, c, runs)),
                                  metered(srv.url, functools.partial(run_bench, t, srv, c, runs)))
                              for c in (1, a.concurrency)}
                    report(srv.truth, runs, t, levels)
                    if not k and not a.no_intrude:
                        # llama-benchy: 2 warm-up requests, its warm-up run, run 1; bench: its warm-up shot, shot 1
                        lb, s1 = intruded(srv, 4, functools.partial(run_llama_benchy, t, srv, 1, runs))
                        sd, s2 = intruded(srv, 2, functools.partial(run_bench, t, srv, 1, runs))
                        report_polluted(srv.truth, lb, sd, [s1, s2])
        finally:
            files.shutdown()
    print(f"\nwall time {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
