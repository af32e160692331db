#!/usr/bin/env python3
"""`spark-deploy bench` and llama-benchy on ONE stand-in run: where both measure the same thing, and
what only bench reports (issue 12, acceptance 6; docs/bench.md quotes the output).

    python3 -m venv /tmp/lb && /tmp/lb/bin/pip install llama-benchy      # once, outside the project venv
    .venv/bin/python benchmarks/bench_vs_llama_benchy.py [--llama-benchy /tmp/lb/bin/llama-benchy] [--runs 5]

Everything stays on loopback: a local stand-in (speculation k=4, SIM_DECODE_TPS 100 by default), a local
HTTP server for llama-benchy's --book-url (a generated text, so nothing is downloaded), a local
tokenizer.json (WordLevel, built with `tokenizers`, which llama-benchy brings) and --skip-coherence.
llama-benchy runs with HOME in a temp dir, so its book cache goes there. Both tools get the same
output length with ignore_eos (llama-benchy --exact-tg) and fresh prompts (llama-benchy --no-cache).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from orchestrator.sim.standin.local import LocalStandin  # noqa: E402
from orchestrator.sim.standin.speed import expected  # noqa: E402

WORDS = ("the model runs on two nodes and each rank loads its shard of weights then serves tokens quickly "
         "Holmes Watson street night door letter").split()


def make_inputs(tmp: Path, llama_python: str) -> None:
    """book.txt (prose) and tokenizer.json (a WordLevel tokenizer over its words) in `tmp`."""
    rng = random.Random(1)
    book = "\n".join(" ".join(rng.choice(WORDS) for _ in range(15)) + "." for _ in range(3000))
    (tmp / "book.txt").write_text(book)
    script = ("import sys\nfrom tokenizers import Tokenizer, models, pre_tokenizers\n"
              "words = sorted(set(open(sys.argv[1]).read().replace('.', ' . ').split()))\n"
              "vocab = {'[UNK]': 0, **{w: i + 1 for i, w in enumerate(words)}}\n"
              "t = Tokenizer(models.WordLevel(vocab=vocab, unk_token='[UNK]'))\n"
              "t.pre_tokenizer = pre_tokenizers.Whitespace()\nt.save(sys.argv[2])\n")
    subprocess.run([llama_python, "-c", script, str(tmp / "book.txt"), str(tmp / "tokenizer.json")], check=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def serve_dir(path: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(path))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-benchy", default=shutil.which("llama-benchy") or "/tmp/lb/bin/llama-benchy")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--rate", default="100", help="SIM_DECODE_TPS")
    a = p.parse_args()
    if not Path(a.llama_benchy).exists():
        sys.exit(f"llama-benchy not found at {a.llama_benchy}: see this script's docstring")
    spark_deploy = str(Path(sys.executable).with_name("spark-deploy"))
    with tempfile.TemporaryDirectory(prefix="bench-vs-lb-") as tmp_s:
        tmp = Path(tmp_s)
        make_inputs(tmp, str(Path(a.llama_benchy).with_name("python")))
        files, files_url = serve_dir(tmp)
        try:
            with LocalStandin(spec_k=4, env={"SIM_DECODE_TPS": a.rate}) as srv:
                lb = subprocess.run([a.llama_benchy, "--base-url", srv.url + "/v1", "--model", srv.model,
                                     "--tokenizer", str(tmp), "--pp", "128", "--tg", str(a.tokens),
                                     "--runs", str(a.runs), "--exact-tg", "--no-cache", "--skip-coherence",
                                     "--latency-mode", "none", "--book-url", files_url + "/book.txt",
                                     "--format", "json", "--save-result", str(tmp / "lb.json")],
                                    capture_output=True, text=True, timeout=900,
                                    env={**os.environ, "HOME": str(tmp)})
                if lb.returncode != 0:
                    sys.exit(f"llama-benchy failed:\n{lb.stdout[-2000:]}\n{lb.stderr[-2000:]}")
                sd = subprocess.run([spark_deploy, "bench", "--url", srv.url, "--profile", "prose",
                                     "--shots", str(a.runs), "--max-tokens", str(a.tokens), "--json"],
                                    capture_output=True, text=True, timeout=900)
                if sd.returncode != 0:
                    sys.exit(f"spark-deploy bench failed:\n{sd.stderr[-2000:]}")
                truth = expected(srv.truth, "prose")
        finally:
            files.shutdown()
        lbj = json.loads((tmp / "lb.json").read_text())["benchmarks"][0]
    g = json.loads(sd.stdout)["groups"][0]
    d, spec = g["decode_tps"], g["speculation"]
    lb_tg = lbj["tg_throughput"]
    print(f"stand-in: k=4, SIM_DECODE_TPS={a.rate}, prose; {a.runs} runs/shots of {a.tokens} tokens each\n")
    print(f"{'figure':44} {'llama-benchy':>16} {'spark-deploy bench':>20} {'truth':>10}")
    print(f"{'decode tok/s per request (center)':44} {lb_tg['mean']:>11.1f} mean {d['median']:>13.1f} median"
          f" {truth.decode_tps:>10.1f}")
    print(f"{'  scatter':44} {'± %.1f std' % lb_tg['std']:>16} "
          f"{'%.1f-%.1f (%.1f%%)' % (d['min'], d['max'], 100 * d['spread']):>20}")
    print(f"{'  off the truth':44} {100 * (lb_tg['mean'] / truth.decode_tps - 1):>+15.1f}% "
          f"{100 * (d['median'] / truth.decode_tps - 1):>+19.1f}%")
    print(f"{'time to first token, ms':44} {lbj['ttfr']['mean']:>16.1f} {1000 * g['ttft_cold_s']['median']:>20.1f}")
    print("\nonly bench reports:")
    print(f"  tokens per verification step   {spec['tokens_per_step']:.3f} (truth {truth.tokens_per_step:.3f})")
    print(f"  acceptance rate                {spec['acceptance_rate']:.1%}")
    print("  accepted per draft position    " + " ".join(f"{r:.0%}" for r in spec["per_pos_rates"])
          + "  (truth " + " ".join(f"{r:.0%}" for r in truth.per_position) + ")")
    print(f"  saturation (tokens/step / k)   {spec['saturation']:.0%} of k={spec['draft_budget']}")
    print(f"  tokens per SSE event           {g['tokens_per_event']['median']:.2f} "
          "(what counting events would be off by)")
    print(f"  headline                       {'provisional' if d['provisional'] else 'final'}; "
          f"95% CI of the median {d['ci95']}")
    print(f"  TTFT warm (same prompt again)  {1000 * g['ttft_warm']['ttft_s']:.1f} ms, "
          f"{g['ttft_warm']['cached_tokens']} cached tokens")
    print("  with a RECIPE: the ceiling from the safetensors headers, % of it, the hypothesis table")


if __name__ == "__main__":
    main()
