"""A stdlib-only stand-in for `vllm serve`, used by spark-deploy's simulated cluster.

It accepts the real flags (and fails on bad ones exactly like vLLM's argparse), prints the log lines
that spark-deploy parses (docs/vllm-reference.md), runs a real TCP rendezvous between ranks, and
serves the OpenAI-style HTTP API (/v1/completions, /v1/chat/completions, /tokenize, /metrics) at a
known, vLLM-like speed, so deploy checks and the benchmark can be tested without GPUs.  Run as
`python3 -m orchestrator.sim.standin serve MODEL [flags]` (the image's `vllm` is that line, and the image
holds this package and the option table it imports, orchestrator/vllm_table, at their places in the
package: sim/images_spec.py), or on this machine `python -m orchestrator.sim.standin.local` (local.py: a
single node on loopback).

Speed (environment, defaults in brackets; the model and its exact expectation are in speed.py):
  SIM_DECODE_TPS [50]        plain decode rate of one request, tokens/s (a step without drafts: 1/rate s)
  SIM_DRAFT_COST [0.05]      a speculative step costs (1 + DRAFT_COST * k) plain steps (k draft tokens)
  SIM_BATCH_ALPHA [0.19]     a step of n running requests costs (1 + ALPHA * (n - 1)) single steps
  SIM_ACCEPT [code=3.2:0.8:0.25,prose=1.25:1.0:0.1,zh=0.25:0.2:0.05]  accepted drafts per step:
                             mean : per-step sd : per-request sd (of the request's level), by profile
                             (code: `def `/`{`/`;`/`import ` in the prompt; zh: CJK; else prose)
  SIM_ACCEPT_CURVE []        profile=r0:r1:...[,...]: that profile accepts draft position i at rate ri
                             (non-increasing; none past the curve) instead of SIM_ACCEPT's draw
  SIM_PREFILL_TPS [3000]     prefill rate: the first token comes SIM_TTFT + uncached tokens / rate after arrival
  SIM_TTFT [0.05]            fixed part of the time to first token, seconds
  SIM_FIRST_MERGE [1]        with speculation the first chunk also carries the first verification step (0: not)
  SIM_SEED [0]               seed of the acceptance draws (plus a request counter: every request differs)
  SIM_STEP_JITTER [0.04]     relative sd of each engine step's duration (0: every step the formula's)
  SIM_PACE_SD [0.003]        relative sd of each sitting's pace (idle to idle): plain shots spread ~0.9%
  SIM_METRICS_LAG [1]        /metrics shows the counters as they were up to this many steps ago (0: live)
  SIM_FIRST_CHUNK_P [0.2]    without speculation, chance the first chunk also carries the first decode step
  SIM_PROFILE_SLOW []        profile=factor[,...]: that profile decodes at factor x the rate (zh=0.8: 20%
                             slower on zh only; a step shared with it is as slow): a slower image variant
  SIM_QUICKACK [0]           1: ACK request headers at once (uvicorn does not; a Nagle client waits ~40 ms)
The head prints `SIM truth: {json}` (speed.Truth.line) before it serves; speed.Truth.from_line reads it
back and speed.expected(truth, profile, k, batch) gives the expected tok/s and tokens per step.
Other knobs:
  SIM_LOAD_SECONDS [2.0]     time every rank spends "loading weights"
  SIM_PEER_TIMEOUT [600]     rendezvous timeout (torch TCPStore), seconds
  SIM_COLLECTIVE_TIMEOUT [600]  a head whose peer's connection dropped stalls this long (the NCCL process
                             group's timeout), then its watchdog aborts the worker and the server exits 1
  SIM_RINGBUFFER_INTERVAL [60]  period of the head's "No available shared memory broadcast block"
  SIM_AUTO_BACKEND [DEEPGEMM_MXFP4]  what `--moe-backend auto` picks
Faults: SIM_FAULT_JIT_ASSERT, SIM_FAULT_CRASH_AT_START, SIM_FAULT_HANG_LOAD, SIM_FAULT_OOM,
SIM_FAULT_COMPLETIONS_HANG (=1), SIM_FAULT_CUDA_GRAPH_RANK (=<rank>),
SIM_FAULT_RANK_BACKEND (=<rank>:<attention backend>, e.g. 1:TRITON_ATTN).
SIGUSR1 (the `stall` fault, `sim fault NODE stall`): the scheduler stuck from then on; /health still 200.
SIM_FAULT_FIRST_RUN_FAST=<factor>: the first SIM_FAULT_FIRST_RUN_REQUESTS [20] fixed-length (ignore_eos)
requests a deployment serves decode factor x faster, then normal (readiness and acceptance requests do not
count); the count is kept in SIM_FAULT_FIRST_RUN_STATE [/tmp/sim-first-run.count], in the container's own
filesystem, so `docker start` of the same container goes on counting (a GPU still warm after a restart) and
a new container starts afresh. speed.FirstRunFast; `bench --replicates` finds it.
Answers for the acceptance checks (answers.py, docs/acceptance.md) and their faults: SIM_FAULT_LOGPROBS_NAN,
SIM_FAULT_FORGET_BEYOND (=<tokens>), SIM_FAULT_TOOL_PLAIN, SIM_FAULT_SIMPLIFIED, SIM_FAULT_REASONING_INLINE,
SIM_FAULT_PERTURB (=1 each).
SIM_FAULT_OOM=1: after "Model loading took", the server really allocates memory in 8 MiB steps.
In a container with a memory limit below SIM_FAULT_OOM_MIB [128] the kernel's OOM killer kills it
(Docker: OOMKilled=true); otherwise the supervisor (the process's parent, PID 1 in a container)
SIGKILLs it once its RSS passes SIM_FAULT_OOM_MIB. Either way no last words and exit 137.
SIM_FAULT_OOM_RANK=<rank> limits the fault to one rank.
SIM_FAULT_CRASH_AFTER_STARTS=N: a crash loop — a container's first N starts run, every later one exits 1
at once (count in SIM_FAULT_START_STATE [/tmp/sim-starts.count], in the container's own filesystem);
SIM_FAULT_CRASH_RANK=<rank> limits it to one rank. crash_loop.py.
Exit codes: 0 after SIGTERM/SIGINT, 1 on a startup/runtime failure, 2 on bad flags, 137 (SIGKILL)
for the OOM fault; in general 128+N when the server dies by signal N.

Where real vLLM differs from a naive reading, the real shape wins: tqdm shard lines and uvicorn lines
carry only the `(<proc> pid=N)` prefix (no `INFO <date> [file:line]`), the headless launch line has no
prefix at all, `GPU KV cache size`/`init engine` come from EngineCore and so only from the head, and the
ring-buffer message always names VLLM_RINGBUFFER_WARNING_INTERVAL (60) whatever SIM_RINGBUFFER_INTERVAL.
"""

VERSION = "0.33.0"
