"""One `vllm serve` process: the head (rank 0, API server) or a headless peer, start-up to shutdown."""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import socket
import sys
import threading
import time

from .api import ROUTES, ApiServer, Handler
from .base import GPU_TOTAL_GIB, MOE_BACKENDS, RINGBUFFER_MSG, VERSION, Life, Log, SimError, Stopped, env_float
from .cli import non_default_args, normalise_choice
from .crash_loop import count_start
from .config import derive_max_model_len, resolve_model_dir, validate_parallel, validate_speculative
from .engine import Engine
from .jit import JitLock
from . import memory, transport
from .derived import checkpoint_bytes, cudagraph_profile, profile, worker_name
from .rendezvous import Rendezvous
from .supervisor import exhaust_memory, oom_fault_applies


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
        self.memory: memory.Held | None = None  # holds this rank's share of the node's memory (None: no daemon)
        self.weights = 0  # bytes this rank loads, from the checkpoint's headers
        self.draft = False  # speculative decoding loads the checkpoint's own MTP/draft head

    def on_signal(self, signum, frame) -> None:
        """SIGTERM/SIGINT: exit 0 promptly; raising interrupts whatever the main thread blocks on."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.signalled = True
        self.life.end(0)
        raise Stopped()

    def on_stall(self, signum, frame) -> None:
        """SIGUSR1 (the sim's `stall` fault): the scheduler stuck from now on — /health still answers 200, no
        request ever finishes, the process and its container keep running (field note 2's half-dead engine)."""
        if self.engine is not None:
            self.engine.stalled.set()

    def run(self) -> None:
        args, env, log = self.args, self.env, self.log
        t_start = time.monotonic()
        if env.get("SIM_FAULT_CRASH_AT_START") == "1":
            raise SimError("RuntimeError: CUDA driver initialization failed, you might not have a CUDA gpu.")
        count_start(env, self.rank)  # SIM_FAULT_CRASH_AFTER_STARTS: the crash-loop fault (crash_loop.py)
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
            log.raw("APIServer", self.engine.truth.line())  # the stand-in's own line: what a bench should find
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
                for line in transport.connect(env):  # the communicators: Gloo's and NCCL's link
                    log.raw(None, f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()} [0] {line}")
            except SimError as err:
                self._worker_failed(err)
            rdzv.watch(self._peer_lost if self.head else self._head_lost)
        log.info(self.worker, "parallel_state.py:1208",
                 f"world_size={self.world} rank={self.rank} local_rank=0 distributed_init_method="
                 f"tcp://{args.master_addr}:{args.master_port} backend=nccl")
        self._select_attention_backend()
        self._select_moe_backend()
        self._claim_memory()
        if self.memory is not None and self.memory.thrashing:
            self.life.stop.wait()  # past memory and swap: no progress until something kills it
            raise Stopped()
        n_shards = max(1, len(glob.glob(os.path.join(model_dir, "*.safetensors"))))
        self.draft = bool(spec) and "model" not in spec
        self.weights = checkpoint_bytes(model_dir, hf, args.tensor_parallel_size, self.draft)
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

    def _claim_memory(self) -> None:
        """vLLM's start-up check and its share of the node's unified memory, held until this process ends."""
        try:
            self.memory = memory.claim(self.args.gpu_memory_utilization, self.env,
                                       f"vllm rank {self.rank} ({self.args.served_name})")
        except SimError as err:
            self.log.info(self.worker, "multiproc_executor.py:743", "WorkerProc failed to start.", "ERROR")
            self.log.traceback(self.worker, err.final, (
                ("/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", 258,
                 "init_device", "raise ValueError("),), sys.stdout)
            if self.head:
                raise SimError("RuntimeError: Engine core initialization failed. See root cause above. "
                               "Failed core proc(s): {}") from None
            raise SimError("") from None

    def _select_attention_backend(self) -> None:
        """Each rank's worker selects its own (vllm/platforms/cuda.py): a chosen one is validated and named,
        `auto` takes the first valid candidate. SIM_FAULT_RANK_BACKEND=<rank>:<NAME> makes that rank resolve
        NAME instead (a kernel, library or env that differs on one node)."""
        chosen = self.args.attention_backend
        fault_rank, _, fault_name = self.env.get("SIM_FAULT_RANK_BACKEND", "").partition(":")
        if fault_name and fault_rank == str(self.rank):
            chosen = fault_name.upper()
        if chosen:
            self.log.info(self.worker, "cuda.py:448", f"Using AttentionBackendEnum.{chosen.upper()} backend.")
            return
        valid = ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]
        self.log.info(self.worker, "cuda.py:509", f"Using {valid[0]} attention backend out of potential backends: "
                                                  f"[{', '.join(repr(v) for v in valid)}].")

    def _select_moe_backend(self) -> None:
        choice = self.args.moe_backend
        value = MOE_BACKENDS.get(choice, choice.upper())
        if value is None:
            auto = self.env.get("SIM_AUTO_BACKEND", "DEEPGEMM_MXFP4")
            value = MOE_BACKENDS.get(normalise_choice(auto)) or auto
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
                      f"Model loading took {round(self.weights / 2**30, 4)} GiB memory and "
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
        total_kb = self.memory.total_kb if self.memory is not None else 0
        prof = profile(self.args, hf, self.weights, total_kb * 1024 or int(GPU_TOTAL_GIB * 2**30), graph_gib,
                       self.draft)
        avail, tokens = prof.available / 2**30, prof.tokens
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
        self.engine.metrics.kv_capacity = tokens
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
        """A peer died: the head stays up, its engine stalls, the ring-buffer warning repeats until the
        collective timeout ends the process (_collective_watchdog)."""
        if not self._ringbuffer.acquire(blocking=False):
            return  # already warning
        self.engine.stalled.set()
        interval = env_float(self.env, "SIM_RINGBUFFER_INTERVAL", 60.0)
        shown = self.env.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60")

        def _warn():
            while not self.life.stop.wait(interval):
                self.log.info("EngineCore_DP0", "shm_broadcast.py:466", RINGBUFFER_MSG.format(shown))
        threading.Thread(target=_warn, name="ringbuffer", daemon=True).start()
        threading.Thread(target=self._collective_watchdog, name="nccl-watchdog", daemon=True).start()

    def _collective_watchdog(self) -> None:
        """The all-reduce the stalled engine waits in never completes: after the process group's timeout
        (torch's NCCL default, 10 min; SIM_COLLECTIVE_TIMEOUT) the worker's watchdog aborts it, the executor
        shuts down, and the API server exits 1: a supervisor (the boot unit) can then start the head again,
        which reopens the rendezvous for the peer."""
        timeout = env_float(self.env, "SIM_COLLECTIVE_TIMEOUT", 600.0)
        if self.life.stop.wait(timeout):
            return
        ms = int(timeout * 1000)
        self.log.raw(None, f"[rank{self.rank}]:[E{time.strftime('%m%d %H:%M:%S')} ProcessGroupNCCL.cpp:632] "
                           f"[Rank {self.rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
                           f"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={ms}) ran for {ms + 12} "
                           "milliseconds before timing out.")
        self.log.info("EngineCore_DP0", "multiproc_executor.py:566",
                      f"Worker proc {self.worker} died unexpectedly (exit code: -6), shutting down executor.",
                      "ERROR")
        self.log.info("APIServer", "async_llm.py:480", "AsyncLLM output_handler failed.", "ERROR")
        self.log.traceback("APIServer", "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
                           "issue. See stack trace (above) for the root cause.")
        self.life.end(1)

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


