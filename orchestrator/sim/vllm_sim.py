#!/usr/bin/env python3
"""A stdlib-only stand-in for `vllm serve`, used by spark-deploy's simulated cluster.

It accepts the real flags (and fails on bad ones exactly like vLLM's argparse), prints the log lines
that spark-deploy parses (docs/vllm-reference.md), runs a real TCP rendezvous between ranks, and
serves the OpenAI-style HTTP API at a known decode rate, so deploy checks and the benchmark can be
tested without GPUs.  Run as `python3 vllm_sim.py serve MODEL [flags]`.

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
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
import zlib
import socketserver
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.33.0"
TOP_USAGE = "vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."
GPU_TOTAL_GIB = 119.70  # what torch reports as total memory on a GB10
MODEL_GIB = 61.18  # weights of the simulated checkpoint, split evenly across ranks
JIT_FRESH_SECONDS = 5.0
RINGBUFFER_MSG = (
    "No available shared memory broadcast block found in {} seconds. This typically happens when "
    "some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv "
    "cache quantization).")
OFFLINE_MSG = (
    "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
    "them in the cached files. Checkout your internet connection or see how to run the library in "
    "offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.")

MOE_BACKENDS = {  # --moe-backend choice -> the enum value printed in "Using '...' Mxfp4 MoE backend."
    "auto": None, "triton": "TRITON", "batched_triton": "TRITON_UNFUSED",
    "deep_gemm": "DEEPGEMM_MXFP4", "cutlass": "CUTLASS_MXFP4_MXFP4",
    "flashinfer_trtllm": "FLASHINFER_TRTLLM_MXFP4_MXFP8",
    "flashinfer_cutlass": "FLASHINFER_CUTLASS_MXFP4_MXFP8",
    "flashinfer_cutedsl": "FLASHINFER_CUTLASS_MXFP4_BF16", "flashinfer_b12x": "B12X_MXFP4_MXFP8",
    "b12x": "B12X_MXFP4_MXFP8", "marlin": "MARLIN", "emulation": "EMULATION",
}
SPEC_KEYS = ("method", "num_speculative_tokens", "model", "rejection_sample_method",
             "draft_tensor_parallel_size", "prompt_lookup_max", "prompt_lookup_min")
DEFAULT_ACCEPT = {"code": (3.0, 0.8), "prose": (2.0, 1.0), "zh": (0.2, 0.2)}
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


class SimError(Exception):
    """A failure real vLLM reports as an uncaught exception: `final` is the traceback's last line(s)."""

    def __init__(self, final: str, code: int = 1, frames: tuple = ()):
        super().__init__(final)
        self.final, self.code, self.frames = final, code, frames


class Stopped(Exception):
    """Raised in the main thread when the process must wind down (signal or a watcher's verdict)."""


# ----------------------------------------------------------------------------- logging
class Log:
    """Writes vLLM-shaped lines, flushed at once so a tailing deployer sees them immediately."""

    def __init__(self):
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self.quiet_uvicorn = False

    def write(self, text: str, stream=None) -> None:
        stream = stream or sys.stdout
        with self._lock:
            try:
                stream.write(text + "\n")
                stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def prefix(self, proc: str | None) -> str:
        return f"({proc} pid={self.pid}) " if proc else ""

    def info(self, proc: str | None, src: str, msg: str, level: str = "INFO") -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.write(f"{self.prefix(proc)}{level} {stamp} [{src}] {msg}")

    def raw(self, proc: str | None, msg: str) -> None:
        """A line not produced by vLLM's logger (tqdm, uvicorn, tracebacks): prefix only."""
        self.write(self.prefix(proc) + msg)

    def uvicorn(self, msg: str) -> None:
        if not self.quiet_uvicorn:
            self.raw("APIServer", f"INFO:     {msg}")

    def traceback(self, proc: str | None, final: str, frames=(), stream=None) -> None:
        lines = ["Traceback (most recent call last):"]
        for path, line, func, code in frames:
            lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
        lines += final.splitlines()
        self.write("\n".join(self.prefix(proc) + ln for ln in lines), stream or sys.stderr)


# ----------------------------------------------------------------------------- command line
def _choice(value: str) -> str:
    """vLLM normalises enum flags: lower-case, '-' -> '_'."""
    return value.lower().replace("-", "_")


def _human_int(value: str) -> int:
    """vLLM accepts 32768, 32k (x1000) or 32K (x1024) for sizes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", value.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"Invalid value: {value!r}")
    mult = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    return int(float(m.group(1)) * mult[m.group(2)])


def _json_arg(value: str):
    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"Value {value} cannot be converted to <function loads>.") from exc


def build_parser() -> argparse.ArgumentParser:
    """The `vllm` parser: top-level usage is overridden to the real one so errors read the same."""
    top = argparse.ArgumentParser(prog="vllm", usage=TOP_USAGE, description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version=VERSION)
    subs = top.add_subparsers(dest="subparser", required=True, prog="vllm")
    for name in ("chat", "complete"):
        subs.add_parser(name)
    s = subs.add_parser("serve", usage="vllm serve [model_tag] [options]", allow_abbrev=False,
                        description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.")
    for name in ("bench", "collect-env", "run-batch"):
        subs.add_parser(name)
    add = s.add_argument
    add("model_tag", nargs="?", default=None)
    add("--model", default="Qwen/Qwen3-0.6B")
    add("--served-model-name", nargs="+", default=None)
    add("--host", default="0.0.0.0")
    add("--port", type=int, default=8000)
    add("--trust-remote-code", action="store_true")
    add("--tensor-parallel-size", "-tp", type=int, default=1)
    add("--pipeline-parallel-size", "-pp", type=int, default=1)
    add("--kv-cache-dtype", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16"])
    add("--block-size", type=int, default=16)
    add("--max-model-len", type=_human_int, default=None)
    add("--max-num-seqs", type=int, default=256)
    add("--max-num-batched-tokens", type=_human_int, default=8192)
    add("--gpu-memory-utilization", type=float, default=0.9)
    add("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    add("--moe-backend", type=_choice, default="auto", choices=list(MOE_BACKENDS))
    add("--speculative-config", type=_json_arg, default=None)
    add("--tokenizer-mode", default="auto")  # free-form: new models register modes (deepseek_v4)
    add("--distributed-executor-backend", default=None, choices=["mp", "uni", "ray", "external_launcher"])
    add("--tool-call-parser", default=None)
    add("--enable-auto-tool-choice", action="store_true")
    add("--reasoning-parser", default=None)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--master-addr", default="127.0.0.1")
    add("--master-port", type=int, default=29501)
    add("--headless", action="store_true")
    add("--enforce-eager", action="store_true")
    add("--revision", default=None)
    add("--seed", type=int, default=0)
    add("--dtype", default="auto", choices=["auto", "half", "float16", "bfloat16", "float", "float32"])
    add("--quantization", "-q", default=None)
    add("--swap-space", type=float, default=4)
    add("--disable-log-requests", action="store_true")
    add("--uvicorn-log-level", default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"])
    return top


def _dashify(argv: list[str]) -> list[str]:
    """Like vLLM's FlexibleArgumentParser: `--max_model_len` means `--max-model-len`."""
    out = []
    for tok in argv:
        if tok.startswith("--") and "_" in tok.split("=", 1)[0]:
            key, sep, val = tok.partition("=")
            tok = key.replace("_", "-") + sep + val
        out.append(tok)
    return out


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """Parse like `vllm`: leftovers are reported by the TOP parser (exit 2), as the real CLI does."""
    parser = build_parser()
    args, extra = parser.parse_known_args(_dashify(argv))
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.subparser != "serve":
        sys.stderr.write(f"vllm {args.subparser}: not available in the spark-deploy stand-in\n")
        sys.exit(1)
    args.model = args.model_tag or args.model
    args.served_name = (args.served_model_name or [args.model])[0]
    return args


def non_default_args(args: argparse.Namespace) -> dict:
    """What vLLM logs as `non-default args: {...}`: lets a deployer confirm flags took effect."""
    defaults = vars(build_parser().parse_args(["serve"]))
    skip = {"subparser", "served_name"}
    return {k: v for k, v in vars(args).items() if k not in skip and defaults.get(k) != v and v is not None}


# ----------------------------------------------------------------------------- configuration
def pydantic_error(model: str, errors: list[tuple[str, str, str, object]]) -> SimError:
    """Render errors the way pydantic_core prints a ValidationError (vLLM configs are pydantic)."""
    n = len(errors)
    lines = [f"pydantic_core._pydantic_core.ValidationError: {n} validation error"
             f"{'s' if n > 1 else ''} for {model}"]
    for loc, msg, kind, value in errors:
        if loc:
            lines.append(loc)
        vtype = "ArgsKwargs" if kind == "value_error" else type(value).__name__
        shown = f"ArgsKwargs((), {value!r})" if kind == "value_error" else repr(value)
        lines.append(f"  {msg} [type={kind}, input_value={shown}, input_type={vtype}]")
        lines.append(f"    For further information visit https://errors.pydantic.dev/2.12/v/{kind}")
    return SimError("\n".join(lines), frames=ENGINE_FRAMES[2:])


ENGINE_FRAMES = (
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    ("/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/main.py", 73, "main",
     "args.dispatch_function(args)"),
    ("/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", 1402, "create_engine_config",
     "speculative_config = self.create_speculative_config("),
)


def validate_parallel(args: argparse.Namespace) -> None:
    """The multi-node rules of vLLM's ParallelConfig, plus: a Spark has exactly one GPU."""
    if args.nnodes > 1 and args.distributed_executor_backend not in (None, "mp", "uni", "external_launcher"):
        raise SimError("ValueError: nnodes > 1 can only be set when distributed executor backend is "
                       "mp, uni or external_launcher.")
    if not 0 <= args.node_rank < args.nnodes:
        raise SimError(f"ValueError: node_rank ({args.node_rank}) must be in [0, nnodes={args.nnodes}).")
    if args.headless != (args.node_rank > 0):
        raise SimError("ValueError: only the head (node_rank 0) runs the API server: "
                       "ranks > 0 must be started with --headless and rank 0 without it.")
    world = args.tensor_parallel_size * args.pipeline_parallel_size
    if world != args.nnodes:
        raise SimError(f"ValueError: world_size ({world} = tp {args.tensor_parallel_size} x pp "
                       f"{args.pipeline_parallel_size}) does not match the GPUs available: nnodes "
                       f"{args.nnodes} x 1 GPU per node.")


def resolve_model_dir(model: str, revision: str | None, env) -> str:
    """Find the checkpoint as huggingface_hub does offline: a local dir, or the HF cache snapshot."""
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise SimError(f"OSError: {model} does not appear to have a file named config.json. "
                           f"Checkout 'https://huggingface.co/{model}/tree/None' for available files.")
        return model
    hf_home = env.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    hub = env.get("HF_HUB_CACHE") or os.path.join(hf_home, "hub")
    repo = os.path.join(hub, "models--" + model.replace("/", "--"))
    rev = revision or "main"
    snapshot = os.path.join(repo, "snapshots", rev)
    if not os.path.isdir(snapshot):
        try:
            with open(os.path.join(repo, "refs", rev)) as fh:
                snapshot = os.path.join(repo, "snapshots", fh.read().strip())
        except OSError:
            snapshot = ""
    if not snapshot or not os.path.isfile(os.path.join(snapshot, "config.json")):
        raise SimError(OFFLINE_MSG, frames=(
            ("/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py", 479, "cached_files",
             "raise OSError("),))
    return snapshot


def validate_speculative(raw, hf: dict) -> dict | None:
    """SpeculativeConfig is a pydantic dataclass with extra='forbid'; MTP needs k % n_predict == 0."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise pydantic_error("SpeculativeConfig", [(
            "", "Input should be a dictionary or an instance of SpeculativeConfig", "dataclass_type", raw)])
    errors = [(k, "Extra inputs are not permitted", "extra_forbidden", v)
              for k, v in raw.items() if k not in SPEC_KEYS]
    k = raw.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool)):
        errors.append(("num_speculative_tokens", "Input should be a valid integer", "int_type", k))
    elif k is not None and k <= 0:
        errors.append(("num_speculative_tokens", "Input should be greater than 0", "greater_than", k))
    if errors:
        raise pydantic_error("SpeculativeConfig", errors)
    n_predict = hf.get("n_predict") or hf.get("num_nextn_predict_layers")
    if k is None:
        if not n_predict:
            raise pydantic_error("SpeculativeConfig", [(
                "", "Value error, num_speculative_tokens must be provided with speculative model",
                "value_error", raw)])
        k = n_predict
    if n_predict and k % n_predict:
        raise pydantic_error("SpeculativeConfig", [(
            "", f"Value error, num_speculative_tokens:{k} must be divisible by n_predict={n_predict}",
            "value_error", raw)])
    method = raw.get("method") or ("mtp" if n_predict else "draft_model")
    return {**raw, "method": method, "num_speculative_tokens": k}


def derive_max_model_len(args, hf: dict, env) -> int:
    """--max-model-len, else the config's max_position_embeddings (vLLM refuses to exceed it)."""
    derived = int(hf.get("max_position_embeddings") or 32768)
    if args.max_model_len is None:
        return derived
    if args.max_model_len > derived and env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") != "1":
        raise pydantic_error("ModelConfig", [(
            "", f"Value error, User-specified max_model_len ({args.max_model_len}) is greater than the "
                f"derived max_model_len (max_position_embeddings={derived} or model_max_length=None in "
                "model's config.json). To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.", "value_error", {"max_model_len": args.max_model_len})])
    return args.max_model_len


def parse_accept(spec: str) -> dict:
    """SIM_ACCEPT 'code=3.0:0.8,prose=2.0:1.0,zh=0.2:0.2' -> {profile: (mean, stddev)}."""
    out = dict(DEFAULT_ACCEPT)
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            name, rest = part.split("=")
            mean, sd = rest.split(":")
            out[name.strip()] = (float(mean), float(sd))
        except ValueError:
            raise SimError(f"ValueError: bad SIM_ACCEPT entry {part!r} (want profile=mean:stddev)") from None
    return out


def env_float(env, name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        raise SimError(f"ValueError: {name} must be a number, got {env.get(name)!r}") from None


# ----------------------------------------------------------------------------- derived numbers
def cudagraph_profile(args, spec_k: int, perturb: bool) -> tuple[str, float]:
    """Capture sizes as vLLM derives them from max-num-seqs/batched tokens/spec tokens.

    Returns the 'PIECEWISE=.. (largest=..), FULL=..' text and the estimated GiB. `perturb` models
    a rank that disagrees (other image/flags/JIT build): it drops its largest capture size.
    """
    q = 1 + spec_k
    limit = max(q, min(args.max_num_seqs * q * 2, 512, args.max_num_batched_tokens))
    base = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    sizes = sorted({math.ceil(s / q) * q for s in base} & set(range(1, limit + 1)))
    if perturb:
        sizes = sizes[:-1] if len(sizes) > 1 else sizes + [sizes[-1] * 2]
    full = [s for s in sizes if s <= args.max_num_seqs * q] or sizes[:1]
    text = (f"PIECEWISE={len(sizes)} (largest={sizes[-1]}), FULL={len(full)} (largest={full[-1]})")
    return text, 0.12 + sum(sizes) * 0.00002 + sum(full) * 0.00004


def kv_cache_tokens(args, hf: dict, world: int, graph_gib: float, spec_k: int) -> tuple[float, int]:
    """Available KV GiB and token capacity, from utilisation, dtype and the model's attention shape."""
    weights = MODEL_GIB / world + (1.9 if spec_k else 0.0)
    activations = 0.6 + args.max_num_batched_tokens * 0.00028
    avail = GPU_TOTAL_GIB * args.gpu_memory_utilization - weights - activations - graph_gib
    layers = int(hf.get("num_hidden_layers") or 36) // args.pipeline_parallel_size
    heads = int(hf.get("num_attention_heads") or 64)
    kv_heads = max(1, int(hf.get("num_key_value_heads") or 8) // args.tensor_parallel_size)
    head_dim = int(hf.get("head_dim") or (int(hf.get("hidden_size") or heads * 64) // heads))
    dtype_bytes = 1 if args.kv_cache_dtype.startswith("fp8") else 2
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = int(max(avail, 0) * 2**30 / per_token) // args.block_size * args.block_size
    return avail, tokens


def worker_name(args, world: int) -> str:
    """Worker process label; with one rank the uni executor runs the worker inside EngineCore."""
    if world == 1 and args.distributed_executor_backend != "mp":
        return "EngineCore_DP0"
    tp, pp, rank = args.tensor_parallel_size, args.pipeline_parallel_size, args.node_rank
    name = "Worker"
    if pp > 1:
        name += f"_PP{rank // tp}"
    if tp > 1:
        name += f"_TP{rank % tp}"
    return name


# ----------------------------------------------------------------------------- JIT cache lock
class JitLock:
    """Our claim on $VLLM_CACHE_ROOT/deep_gemm: reproduces two ranks JIT-compiling into one dir.

    Every rank writes rank-<r>.lock and touches it each second.  When the rank compiles, a fresh
    lock of another rank that claimed the dir EARLIER means it lost the race: like DeepGEMM on
    shared NFS, it reads a half-written runtime and asserts (field note 2; the winner stays up).
    """

    def __init__(self, root: str, rank: int, master: str, life: "Life"):
        self.dir = os.path.join(root, "deep_gemm")
        self.path = os.path.join(self.dir, f"rank-{rank}.lock")
        self.rank, self.life = rank, life
        self.created = time.time()
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path, "w") as fh:
            json.dump({"rank": rank, "pid": os.getpid(), "master": master, "created": self.created}, fh)
        threading.Thread(target=self._beat, name="jit-heartbeat", daemon=True).start()

    def _beat(self) -> None:
        while not self.life.stop.wait(1.0):
            try:
                os.utime(self.path)
            except OSError:
                return

    def lost_race(self) -> bool:
        now = time.time()
        for path in glob.glob(os.path.join(self.dir, "rank-*.lock")):
            if path == self.path:
                continue
            try:
                if now - os.path.getmtime(path) > JIT_FRESH_SECONDS:
                    continue  # stale: left by a killed process
                with open(path) as fh:
                    other = json.load(fh)
                if (other.get("created", 0), other.get("rank", 0)) < (self.created, self.rank):
                    return True
            except (OSError, ValueError):
                continue
        return False

    def release(self) -> None:
        try:
            with open(self.path) as fh:
                if json.load(fh).get("pid") == os.getpid():
                    os.remove(self.path)
        except (OSError, ValueError):
            pass


# ----------------------------------------------------------------------------- process lifecycle
class Life:
    """Process-wide stop switch: watchers set it with an exit code, waits in the main thread end."""

    def __init__(self):
        self.stop = threading.Event()
        self.code = 0

    def end(self, code: int) -> None:
        if not self.stop.is_set():
            self.code = code
            self.stop.set()

    def sleep(self, seconds: float) -> None:
        if self.stop.wait(max(0.0, seconds)):
            raise Stopped()


# ----------------------------------------------------------------------------- rendezvous
class Rendezvous:
    """A TCPStore-like rendezvous: rank 0 hosts it on master-port, others join and stay connected.

    The open connections double as liveness links: EOF on the head means a peer died (the head
    then stalls and repeats the ring-buffer message); EOF on a peer means the head is gone.
    """

    def __init__(self, args, timeout: float, life: Life):
        self.args, self.timeout, self.life = args, timeout, life
        self.conns: list[socket.socket] = []
        self.ready_peers = 0
        self.ready_cond = threading.Condition()

    def listen(self) -> socket.socket:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("0.0.0.0", self.args.master_port))
        except OSError:
            raise SimError(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                f"network address. port: {self.args.master_port}, useIpv6: false, code: -98, name: "
                "EADDRINUSE, message: address already in use") from None
        srv.listen(16)
        return srv

    def host(self, srv: socket.socket) -> None:
        """Rank 0: wait for nnodes-1 valid hellos, then release everyone at once (a barrier).

        Each connection is greeted in its own thread, so a port probe that never says hello
        cannot hold up the real peers (torch's TCPStore serves clients concurrently too).
        """
        nnodes, joined, cond = self.args.nnodes, {}, threading.Condition()

        def greet(conn: socket.socket) -> None:
            conn.settimeout(self.timeout)
            try:
                hello = json.loads(conn.makefile("r").readline() or "{}")
            except (OSError, ValueError):
                hello = {}
            rank = hello.get("rank")
            with cond:
                ok = (hello.get("world") == nnodes and isinstance(rank, int) and 0 < rank < nnodes
                      and rank not in joined)
                if ok:
                    joined[rank] = conn
                    cond.notify_all()
            if not ok:
                conn.close()

        def accept_loop() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return  # listener shut down
                threading.Thread(target=greet, args=(conn,), daemon=True).start()

        threading.Thread(target=accept_loop, name="rdzv-accept", daemon=True).start()
        with cond:
            done = cond.wait_for(lambda: len(joined) >= nnodes - 1, timeout=self.timeout)
            self.conns = list(joined.values())
        srv.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        srv.close()
        if not done:
            raise SimError(f"torch.distributed.DistStoreError: Timed out after {int(self.timeout) + 1} "
                           f"seconds waiting for clients. {1 + len(self.conns)}/{nnodes} clients joined.")
        for conn in self.conns:
            conn.settimeout(None)
            try:
                conn.sendall(b"GO\n")
            except OSError:
                pass  # that peer already died: its watcher reports it

    def join(self) -> None:
        """Rank > 0: connect (retrying while refused, like torch's store client) and await GO."""
        addr = (self.args.master_addr, self.args.master_port)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = socket.create_connection(addr, timeout=max(0.05, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise SimError(
                        "torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{int(self.timeout * 1000)}ms while trying to connect to {addr}.") from None
                self.life.sleep(0.1)
        conn.sendall(json.dumps({"rank": self.args.node_rank, "world": self.args.nnodes}).encode() + b"\n")
        conn.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            ok = conn.makefile("rb").readline() == b"GO\n"
        except OSError:
            ok = False
        if not ok:
            raise SimError("torch.distributed.DistStoreError: Timed out after "
                           f"{int(self.timeout) + 1} seconds waiting for the store at {addr[0]}:{addr[1]} "
                           "(connection closed by the server or barrier not released).")
        conn.settimeout(None)
        self.conns.append(conn)

    def report_ready(self) -> None:
        """Rank > 0: tell the head this worker finished profiling and warm-up."""
        for conn in self.conns:
            try:
                conn.sendall(b"READY\n")
            except OSError:
                pass

    def wait_peers_ready(self) -> None:
        """Rank 0: the engine serves only once every worker is warmed up (a dead peer keeps it waiting)."""
        with self.ready_cond:
            while self.ready_peers < len(self.conns) and not self.life.stop.is_set():
                self.ready_cond.wait(0.5)

    def watch(self, on_lost) -> None:
        """Call on_lost() once per connection that reaches EOF or errors; count READY messages."""
        def _watch(conn):
            try:
                while data := conn.recv(64):
                    if b"READY" in data:
                        with self.ready_cond:
                            self.ready_peers += 1
                            self.ready_cond.notify_all()
            except OSError:
                pass
            if not self.life.stop.is_set():
                on_lost()
        for conn in self.conns:
            threading.Thread(target=_watch, args=(conn,), name="rdzv-watch", daemon=True).start()


# ----------------------------------------------------------------------------- engine
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


# ----------------------------------------------------------------------------- HTTP API
class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param=None):
        super().__init__(message)
        self.status, self.body = status, {"error": {"message": message, "type": kind, "param": param,
                                                    "code": status}}


ROUTES = [("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
          ("/version", "GET"), ("/tokenize", "POST"), ("/v1/models", "GET"),
          ("/v1/completions", "POST"), ("/metrics", "GET")]


class ApiServer(ThreadingHTTPServer):
    """ThreadingHTTPServer without the reverse-DNS lookup HTTPServer.server_bind does (getfqdn)."""

    daemon_threads = True

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class Handler(BaseHTTPRequestHandler):
    """The head's OpenAI-compatible API (uvicorn-like: HTTP/1.1, chunked SSE, access log lines)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def app(self) -> "Node":
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, *a) -> None:
        pass

    def log_request(self, code="-", size="-") -> None:
        code = int(code)
        phrase = self.responses.get(code, ("",))[0]
        host, port = self.client_address[:2]
        self.app.log.uvicorn(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, status: int, body: bytes, ctype: str | None = "application/json") -> None:
        self.send_response(status)
        if ctype:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj).encode())

    def _body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise ApiError(400, "Invalid JSON body") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Request body must be a JSON object")
        return body

    def do_GET(self) -> None:
        self._dispatch({"/health": self.get_health, "/v1/models": self.get_models,
                        "/metrics": self.get_metrics, "/version": self.get_version})

    def do_POST(self) -> None:
        self._dispatch({"/v1/completions": self.post_completions, "/tokenize": self.post_tokenize})

    def _dispatch(self, table) -> None:
        route = self.path.split("?", 1)[0]
        fn = table.get(route)
        if fn is None:
            known = {r for r, _ in ROUTES}
            return self._json(405 if route in known else 404,
                              {"detail": "Method Not Allowed" if route in known else "Not Found"})
        try:
            fn()
        except ApiError as err:
            self._json(err.status, err.body)
        except Stopped:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the stand-in: say so in the log, as uvicorn would
            self.app.log.info("APIServer", "httptools_impl.py:414", f"Exception in ASGI application: {exc!r}", "ERROR")
            self.close_connection = True

    def get_health(self) -> None:
        self._send(503 if self.app.engine.dead else 200, b"", None)

    def get_version(self) -> None:
        self._json(200, {"version": VERSION})

    def get_models(self) -> None:
        app, now = self.app, int(time.time())
        self._json(200, {"object": "list", "data": [{
            "id": app.args.served_name, "object": "model", "created": now, "owned_by": "vllm",
            "root": app.args.model, "parent": None, "max_model_len": app.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": now, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}]})

    def get_metrics(self) -> None:
        self._send(200, self.app.engine.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def post_tokenize(self) -> None:
        body = self._body()
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(400, "'prompt' must be a string")
        ids = [token_id(t) for t in tokenize(prompt)]
        self._json(200, {"count": len(ids), "max_model_len": self.app.max_model_len, "tokens": ids,
                         "token_strs": None})

    def _check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.app.args.served_name:
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")

    def post_completions(self) -> None:
        body = self._body()
        self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "'prompt' must be a string (or a list with one string)")
        max_tokens = body.get("max_tokens", 16)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ApiError(400, "max_tokens must be at least 1, got " + repr(max_tokens))
        engine, limit = self.app.engine, self.app.max_model_len
        n_prompt = len(tokenize(prompt))
        if n_prompt + max_tokens > limit:
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                                f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
                                f"{max_tokens} in the completion). Please reduce the length of the "
                                "messages or completion.")
        req = engine.prepare(prompt)
        tokens, reason = engine.output_tokens(req, max_tokens, bool(body.get("ignore_eos")))
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.app.args.served_name}
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + len(tokens),
                 "completion_tokens": len(tokens), "prompt_tokens_details": {"cached_tokens": req["cached"]}}
        finished, steps = "abort", engine.steps(req, tokens)
        try:
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                self._stream(steps, len(tokens), reason, head, usage if include_usage else None)
            else:
                text = "".join(t for group in steps for t in group)
                self._json(200, {**head, "choices": [{
                    "index": 0, "text": text, "logprobs": None, "finish_reason": reason,
                    "stop_reason": None, "prompt_logprobs": None}], "usage": usage})
            finished = reason
        finally:
            steps.close()  # frees the batch slot even when the client went away
            engine.metrics.finish(finished)

    def _stream(self, steps, total: int, reason: str, head: dict, usage: dict | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(data: str) -> None:
            raw = data.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))

        sent = 0
        for group in steps:
            sent += len(group)
            choice = {"index": 0, "text": "".join(group), "logprobs": None,
                      "finish_reason": reason if sent >= total else None, "stop_reason": None}
            chunk("data: " + json.dumps({**head, "choices": [choice]}) + "\n\n")
        if usage is not None:
            chunk("data: " + json.dumps({**head, "choices": [], "usage": usage}) + "\n\n")
        chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


# ----------------------------------------------------------------------------- one rank
class Node:
    """One `vllm serve` process: the head (rank 0, API server) or a headless peer."""

    def __init__(self, args: argparse.Namespace, env=os.environ):
        self.args, self.env = args, env
        self.log, self.life = Log(), Life()
        self.log.quiet_uvicorn = args.uvicorn_log_level in ("warning", "error", "critical")
        self.rank, self.head = args.node_rank, not args.headless
        self.world = args.tensor_parallel_size * args.pipeline_parallel_size
        self.worker = worker_name(args, self.world)
        self.jit: JitLock | None = None
        self.http: ApiServer | None = None
        self.signalled = self.serving = False
        self._ringbuffer = threading.Lock()
        self.engine: Engine | None = None
        self.max_model_len = 0

    def on_signal(self, signum, frame) -> None:
        """SIGTERM/SIGINT: exit 0 promptly; raising interrupts whatever the main thread blocks on."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.signalled = True
        self.life.end(0)
        raise Stopped()

    def run(self) -> None:
        args, env, log = self.args, self.env, self.log
        t_start = time.monotonic()
        if env.get("SIM_FAULT_CRASH_AT_START") == "1":
            raise SimError("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.")
        validate_parallel(args)
        model_dir = resolve_model_dir(args.model, args.revision, env)
        with open(os.path.join(model_dir, "config.json")) as fh:
            hf = json.load(fh)
        spec = validate_speculative(args.speculative_config, hf)
        self.max_model_len = derive_max_model_len(args, hf, env)
        self.engine = Engine(args, spec, env, self.life)
        peer_timeout = env_float(env, "SIM_PEER_TIMEOUT", 600.0)
        rdzv = Rendezvous(args, peer_timeout, self.life)
        if self.head:
            log.info("APIServer", "api_server.py:1895", f"vLLM API server version {VERSION}")
            log.info("APIServer", "utils.py:253", f"non-default args: {non_default_args(args)}")
            self.http = self._bind_http()
            log.info("EngineCore_DP0", "core.py:93", self._engine_config_line(spec))
            srv = rdzv.listen() if args.nnodes > 1 else None
        else:
            log.info(None, "multiproc_executor.py:720",
                     f"Launching vLLM (v{VERSION}) headless multiproc executor, with head node address "
                     f"{args.master_addr} for torch.distributed process group.")
        if env.get("VLLM_CACHE_ROOT"):
            self.jit = JitLock(env["VLLM_CACHE_ROOT"], self.rank,
                               f"{args.master_addr}:{args.master_port}", self.life)
        if args.nnodes > 1:
            try:
                rdzv.host(srv) if self.head else rdzv.join()
            except SimError as err:
                self._worker_failed(err)
            rdzv.watch(self._peer_lost if self.head else self._head_lost)
        log.info(self.worker, "parallel_state.py:1208",
                 f"world_size={self.world} rank={self.rank} local_rank=0 distributed_init_method="
                 f"tcp://{args.master_addr}:{args.master_port} backend=nccl")
        self._select_moe_backend()
        n_shards = max(1, len(glob.glob(os.path.join(model_dir, "*.safetensors"))))
        self._load_weights(n_shards, env_float(env, "SIM_LOAD_SECONDS", 2.0))
        if oom_fault_applies(env, self.rank):
            exhaust_memory(env, self.life)  # until the kernel or the supervisor kills this process
        self._jit_compile()
        self._profile_and_allocate(hf, spec)
        if args.nnodes > 1:
            rdzv.wait_peers_ready() if self.head else rdzv.report_ready()
        if self.head:
            log.info("EngineCore_DP0", "core.py:210",
                     f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - t_start:.2f} s")
            self._serve()
        self.life.stop.wait()
        raise Stopped()

    # -- start-up phases ---------------------------------------------------------------
    def _bind_http(self) -> ApiServer:
        """Bind early (vLLM reserves its port before building the engine) but listen only when ready."""
        srv = ApiServer((self.args.host, self.args.port), Handler, bind_and_activate=False)
        try:
            srv.server_bind()
        except OSError as exc:
            raise SimError(f"OSError: [Errno {exc.errno}] {exc.strerror}") from None
        srv.app = self  # type: ignore[attr-defined]
        return srv

    def _engine_config_line(self, spec) -> str:
        a = self.args
        spec_s = (f"SpeculativeConfig(method='{spec['method']}', model={spec.get('model', a.model)!r}, "
                  f"num_spec_tokens={spec['num_speculative_tokens']})") if spec else "None"
        return (f"Initializing a V1 LLM engine (v{VERSION}) with config: model={a.model!r}, "
                f"speculative_config={spec_s}, tokenizer={a.model!r}, revision={a.revision}, "
                f"dtype={a.dtype}, max_seq_len={self.max_model_len}, "
                f"tensor_parallel_size={a.tensor_parallel_size}, "
                f"pipeline_parallel_size={a.pipeline_parallel_size}, quantization={a.quantization or 'mxfp4'}, "
                f"enforce_eager={a.enforce_eager}, kv_cache_dtype={a.kv_cache_dtype}, seed={a.seed}, "
                f"served_model_name={a.served_name}, enable_prefix_caching={self.engine.cache.enabled}")

    def _worker_failed(self, err: SimError) -> None:
        """A worker dying during init: logged by the worker, then the engine/API give up (exit 1)."""
        self.log.info(self.worker, "multiproc_executor.py:743", "WorkerProc failed to start.", "ERROR")
        self.log.traceback(self.worker, err.final, (
            ("/usr/local/lib/python3.12/dist-packages/vllm/distributed/parallel_state.py", 1219,
             "init_distributed_environment", "torch.distributed.init_process_group("),
            ("/usr/local/lib/python3.12/dist-packages/torch/distributed/rendezvous.py", 189,
             "_create_c10d_store", "return TCPStore("),), sys.stdout)
        if self.head:
            raise SimError("RuntimeError: Engine core initialization failed. See root cause above. "
                           "Failed core proc(s): {}")
        raise SimError("") from None  # a headless rank has no API server to add anything

    def _select_moe_backend(self) -> None:
        choice = self.args.moe_backend
        value = MOE_BACKENDS[choice]
        if value is None:
            auto = self.env.get("SIM_AUTO_BACKEND", "DEEPGEMM_MXFP4")
            value = MOE_BACKENDS.get(_choice(auto)) or auto
        self.log.info(self.worker, "mxfp4.py:312", f"Using '{value}' Mxfp4 MoE backend.")

    def _load_weights(self, n: int, seconds: float) -> None:
        """tqdm progress on global rank 0 only; every rank spends the same time."""
        hang_at = n // 2 if self.env.get("SIM_FAULT_HANG_LOAD") == "1" else None
        t0 = time.monotonic()
        show = self.rank == 0
        desc = "Loading safetensors checkpoint shards:"
        if show:
            self.log.raw(self.worker, f"{desc}   0% Completed | 0/{n} [00:00<?, ?it/s]")
        for i in range(1, n + 1):
            if hang_at is not None and i > hang_at:
                self.life.stop.wait()
                raise Stopped()
            self.life.sleep(t0 + seconds * i / n - time.monotonic())
            if show:
                el = time.monotonic() - t0
                per = el / i
                rate = f"{per:5.2f}s/it" if per >= 1 else f"{1 / max(per, 1e-9):5.2f}it/s"
                self.log.raw(self.worker, f"{desc} {100 * i / n:3.0f}% Completed | {i}/{n} "
                                          f"[{_mmss(el)}<{_mmss(per * (n - i))}, {rate}]")
        took = time.monotonic() - t0
        self.log.info(self.worker, "default_loader.py:314", f"Loading weights took {took:.2f} seconds")
        self.log.info(self.worker, "gpu_model_runner.py:3722",
                      f"Model loading took {round(MODEL_GIB / self.world, 4)} GiB memory and "
                      f"{took + 0.05:.6f} seconds")

    def _jit_compile(self) -> None:
        """DeepGEMM JIT at warm-up: the race loser on a shared cache (or the fault) asserts."""
        lost = self.jit is not None and self.jit.lost_race()
        if lost or (self.env.get("SIM_FAULT_JIT_ASSERT") == "1" and not self.head):
            self.log.info(self.worker, "multiproc_executor.py:822", "WorkerProc hit an exception.", "ERROR")
            self.log.traceback(self.worker, "RuntimeError: Assertion error "
                               "(/workspace/DeepGEMM/csrc/jit/compiler.hpp:147): runtime != nullptr", (
                ("/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", 421,
                 "compile_or_warm_up_model", "self.model_runner.capture_model()"),
                ("/usr/local/lib/python3.12/dist-packages/deep_gemm/__init__.py", 88, "fp8_gemm_nt",
                 "return _C.fp8_gemm_nt(*args)"),), sys.stdout)
            raise SimError("", code=1)

    def _profile_and_allocate(self, hf: dict, spec) -> None:
        k = spec["num_speculative_tokens"] if spec else 0
        graph_gib = 0.0
        if not self.args.enforce_eager:
            perturb = self.env.get("SIM_FAULT_CUDA_GRAPH_RANK") == str(self.rank)
            text, graph_gib = cudagraph_profile(self.args, k, perturb)
            self.log.info(self.worker, "gpu_model_runner.py:6304", f"Profiling CUDA graph memory: {text}")
            self.log.info(self.worker, "gpu_model_runner.py:6330", f"Estimated CUDA graph memory: {graph_gib:.2f} GiB total")
        avail, tokens = kv_cache_tokens(self.args, hf, self.world, graph_gib, k)
        if avail <= 0:
            raise SimError("ValueError: No available memory for the cache blocks. Try increasing "
                           "`gpu_memory_utilization` when initializing the engine.")
        self.log.info(self.worker, "gpu_worker.py:391", f"Available KV cache memory: {avail:.2f} GiB")
        if tokens < self.max_model_len:
            raise SimError(f"ValueError: To serve at least one request with the models's max seq len "
                           f"({self.max_model_len}), more KV cache is needed than the available KV cache "
                           f"memory ({avail:.2f} GiB). Based on the available memory, the estimated maximum "
                           f"model length is {tokens}. Try increasing `gpu_memory_utilization` or "
                           "decreasing `max_model_len` when initializing the engine.")
        if self.head:
            self.log.info("EngineCore_DP0", "kv_cache_utils.py:1291",
                          f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
                          f"{self.max_model_len:,} tokens per request: {tokens / self.max_model_len:.2f}x")

    def _serve(self) -> None:
        a, log = self.args, self.log
        log.info("APIServer", "api_server.py:1963", f"Starting vLLM server on http://{a.host}:{a.port}")
        log.info("APIServer", "launcher.py:37", "Available routes are:")
        for route, methods in ROUTES:
            log.info("APIServer", "launcher.py:45", f"Route: {route}, Methods: {methods}")
        self.http.server_activate()
        threading.Thread(target=self.http.serve_forever, name="http", daemon=True).start()
        self.serving = True
        log.uvicorn(f"Started server process [{os.getpid()}]")
        log.uvicorn("Waiting for application startup.")
        log.uvicorn("Application startup complete.")

    # -- liveness -----------------------------------------------------------------------
    def _peer_lost(self) -> None:
        """A peer died: the head stays up, its engine stalls, the ring-buffer warning repeats."""
        if not self._ringbuffer.acquire(blocking=False):
            return  # already warning
        self.engine.stalled.set()
        interval = env_float(self.env, "SIM_RINGBUFFER_INTERVAL", 60.0)
        shown = self.env.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60")

        def _warn():
            while not self.life.stop.wait(interval):
                self.log.info("EngineCore_DP0", "shm_broadcast.py:466", RINGBUFFER_MSG.format(shown))
        threading.Thread(target=_warn, name="ringbuffer", daemon=True).start()

    def _head_lost(self) -> None:
        self.log.info(self.worker, "TCPStore.cpp:122",
                      "[c10d] recvValue failed on SocketImpl: Failed to recv, got 0 bytes. Connection "
                      "was likely closed. Did the remote server shutdown or crash?", "ERROR")
        self.life.end(1)

    def cleanup(self) -> None:
        if self.engine is not None:
            self.engine.dead = True
        if self.jit is not None:
            self.jit.release()
        if self.serving and self.signalled:
            self.log.uvicorn("Shutting down")
            self.log.uvicorn(f"Finished server process [{os.getpid()}]")


def _mmss(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:02d}:{s % 60:02d}"


def oom_fault_applies(env, rank: int) -> bool:
    """SIM_FAULT_OOM=1 hits every rank, or only SIM_FAULT_OOM_RANK when that is set."""
    only = env.get("SIM_FAULT_OOM_RANK", "")
    return env.get("SIM_FAULT_OOM") == "1" and only in ("", str(rank))


def oom_limit_bytes(env) -> int:
    return int(env_float(env, "SIM_FAULT_OOM_MIB", 128.0) * 2**20)


def exhaust_memory(env, life: "Life") -> None:
    """Really allocate (and touch) memory in steps, as a KV-cache allocation past what is free would.

    In a container with a memory limit the kernel's OOM killer ends this (Docker: OOMKilled=true);
    otherwise the supervisor does when the RSS passes SIM_FAULT_OOM_MIB. The hard cap is a guard.
    """
    held, cap, step = [], oom_limit_bytes(env) + 256 * 2**20, 8 * 2**20
    while len(held) * step < cap:
        held.append(b"\x01" * step)
        life.sleep(0.005)
    life.stop.wait()
    raise Stopped()


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _die_with_parent() -> None:
    """The server must not outlive its supervisor (outside a container nothing else would kill it)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def supervise(serve, watch_oom: bool, limit: int) -> int:
    """PID 1 of the container: run the server as a child, forward SIGTERM/SIGINT, return its status.

    A process cannot SIGKILL itself as PID 1 of its namespace (the kernel ignores it), and a real OOM
    kill comes from outside the process anyway; with `watch_oom`, this parent plays the OOM killer:
    it SIGKILLs the child once its RSS passes `limit`. A child killed by signal N gives 128 + N
    (137 for SIGKILL), what Docker shows for a vLLM killed by the kernel.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        _die_with_parent()
        serve()  # never returns: os._exit
        os._exit(1)

    def forward(signum, frame) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG if watch_oom else 0)  # -1: PID 1 reaps orphans too
        if pid == child:
            break
        if watch_oom and pid == 0:
            if _rss_bytes(child) > limit:
                os.kill(child, signal.SIGKILL)
            time.sleep(0.01)
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def serve_forever(args: argparse.Namespace) -> None:
    """The server process: run one rank until a signal or a failure, then exit with its code."""
    node = Node(args)
    signal.signal(signal.SIGTERM, node.on_signal)
    signal.signal(signal.SIGINT, node.on_signal)
    code = 0
    try:
        node.run()
    except Stopped:
        code = node.life.code
    except SimError as err:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if err.final:
            proc = "APIServer" if node.head else None
            node.log.traceback(proc, err.final, ENGINE_FRAMES[:2] + tuple(err.frames))
        code = err.code
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        node.life.stop.set()
        node.cleanup()
    sys.stdout.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    args = parse_cli(sys.argv[1:] if argv is None else argv)  # bad flags: exit 2 before any fork
    env = os.environ
    watch = oom_fault_applies(env, args.node_rank)
    limit = oom_limit_bytes(env) if watch else 0
    os._exit(supervise(lambda: serve_forever(args), watch, limit))


if __name__ == "__main__":
    main()
