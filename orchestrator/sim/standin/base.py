"""What every part of the stand-in shares: constants, the failure types, the vLLM-shaped log, the stop switch."""
from __future__ import annotations

import os
import sys
import threading
import time

from . import VERSION  # noqa: F401 - re-exported

TOP_USAGE = "vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."
GPU_TOTAL_GIB = 119.70  # what torch reports as total memory on a GB10 (outside a simulated node)
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
    "triton_unfused": "TRITON_UNFUSED",
}  # any other real choice prints its upper-cased name
SPEC_KEYS = (  # SpeculativeConfig's fields; any other key is an unexpected keyword argument
    "method", "num_speculative_tokens", "model", "rejection_sample_method", "draft_tensor_parallel_size",
    "prompt_lookup_max", "prompt_lookup_min", "quantization", "max_model_len", "revision", "code_revision",
    "disable_by_batch_size", "disable_padded_drafter_batch", "speculative_token_tree", "enforce_eager",
    "draft_load_config", "parallel_drafting", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
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


def env_float(env, name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        raise SimError(f"ValueError: {name} must be a number, got {env.get(name)!r}") from None




def read_count(path: str) -> int:
    """A fault's count kept in a file of the container's own filesystem (so `docker start` of the same
    container goes on counting, a new container starts afresh): 0 when there is none yet."""
    try:
        with open(path) as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def write_count(path: str, count: int, fault: str) -> None:
    """Keep the count; a file it cannot write is the fault misconfigured, said as such (never a fault that
    silently stops holding its promise)."""
    try:
        with open(path, "w") as fh:
            fh.write(str(count))
    except OSError as exc:
        raise SimError(f"ValueError: {fault} cannot keep its count in {path}: {exc.strerror}") from None
