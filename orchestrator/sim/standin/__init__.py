"""A stdlib-only stand-in for `vllm serve`, used by spark-deploy's simulated cluster.

It accepts the real flags (and fails on bad ones exactly like vLLM's argparse), prints the log lines
that spark-deploy parses (docs/vllm-reference.md), runs a real TCP rendezvous between ranks, and
serves the OpenAI-style HTTP API at a known decode rate, so deploy checks and the benchmark can be
tested without GPUs.  Run as `python3 -m standin serve MODEL [flags]`
(the image's `vllm` is `exec python3 -m standin "$@"`).

Simulation knobs (environment, defaults in brackets):
  SIM_LOAD_SECONDS [2.0]     time every rank spends "loading weights"
  SIM_PEER_TIMEOUT [600]     rendezvous timeout (torch TCPStore), seconds
  SIM_DECODE_TPS [50]        true decode rate, tokens/s per request
  SIM_TTFT [0.05]            prefill time before the first token, seconds
  SIM_ACCEPT [code=3.0:0.8,prose=2.0:1.0,zh=0.2:0.2]  accepted draft tokens per step, mean:stddev
  SIM_SEED [0]               seed of the acceptance draws (plus a request counter)
  SIM_RINGBUFFER_INTERVAL [60]  period of the head's "No available shared memory broadcast block"
  SIM_AUTO_BACKEND [DEEPGEMM_MXFP4]  what `--moe-backend auto` picks
Faults: SIM_FAULT_JIT_ASSERT, SIM_FAULT_CRASH_AT_START, SIM_FAULT_HANG_LOAD, SIM_FAULT_OOM,
SIM_FAULT_COMPLETIONS_HANG (=1), SIM_FAULT_CUDA_GRAPH_RANK (=<rank>).
SIM_FAULT_OOM=1: after "Model loading took", the server really allocates memory in 8 MiB steps.
In a container with a memory limit below SIM_FAULT_OOM_MIB [128] the kernel's OOM killer kills it
(Docker: OOMKilled=true); otherwise the supervisor (the process's parent, PID 1 in a container)
SIGKILLs it once its RSS passes SIM_FAULT_OOM_MIB. Either way no last words and exit 137.
SIM_FAULT_OOM_RANK=<rank> limits the fault to one rank.
Exit codes: 0 after SIGTERM/SIGINT, 1 on a startup/runtime failure, 2 on bad flags, 137 (SIGKILL)
for the OOM fault; in general 128+N when the server dies by signal N.

Where real vLLM differs from a naive reading, the real shape wins: tqdm shard lines and uvicorn lines
carry only the `(<proc> pid=N)` prefix (no `INFO <date> [file:line]`), the headless launch line has no
prefix at all, `GPU KV cache size`/`init engine` come from EngineCore and so only from the head, and the
ring-buffer message always names VLLM_RINGBUFFER_WARNING_INTERVAL (60) whatever SIM_RINGBUFFER_INTERVAL.
"""

VERSION = "0.33.0"
