"""Known failure lines in vLLM logs, each with a one-line explanation for the operator."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern
    explanation: str
    fatal: bool = True
    wrapper: bool = False  # a line that only points at a root cause logged elsewhere ("See root cause above")


SIGNATURES = [
    Signature("unknown-flag", re.compile(r"error: unrecognized arguments: "),
              "vLLM in this image does not know a flag the recipe passes (field note 5)"),
    Signature("invalid-choice", re.compile(r"error: argument --\S+: invalid choice"),
              "a flag value is not one this image's vLLM accepts"),
    Signature("jit-assertion", re.compile(r"jit/compiler\.hpp:\d+\): runtime != nullptr"),
              "DeepGEMM JIT compilation failed: typically two ranks sharing one JIT cache directory (field note 2)"),
    Signature("rendezvous-timeout", re.compile(r"DistStoreError: Timed out after \d+ seconds waiting for clients"),
              "a rank never joined the rendezvous: is the peer running, and is the head's master port reachable over the fabric?"),
    Signature("ringbuffer-stall", re.compile(r"No available shared memory broadcast block found"),
              "the head waits on a rank that hangs or died: the cluster is half dead (field note 2)"),
    Signature("worker-died", re.compile(r"Worker proc \S+ died unexpectedly"), "a worker process died",
              wrapper=True),
    Signature("memory-taken", re.compile(r"Free memory on device \S+ \([\d.]+/[\d.]+ GiB\) on startup is less than "
                                         r"desired GPU memory utilization"),
              "less memory was free than its gpu_memory_utilization share: something else holds the unified memory "
              "(another vLLM, or a container not yet gone) (field note 8)"),
    Signature("engine-init-failed", re.compile(r"Engine core initialization failed"), "the engine failed to start",
              wrapper=True),
    Signature("model-missing", re.compile(r"couldn't find them in the cached files|is not a local folder and is not a valid model identifier"),
              "the model is not in this node's HF cache (and the node cannot download it)"),
    Signature("cuda-oom", re.compile(r"CUDA out of memory|torch\.OutOfMemoryError"),
              "out of GPU memory: lower gpu_memory_utilization or max_model_len (field note 8)"),
    Signature("peer-lost", re.compile(r"recvValue failed on SocketImpl|Connection was likely closed\. Did the remote "
                                      r"server shutdown or crash"),
              "this rank lost its connection to the head's rendezvous store: the head went first (see its failure)",
              fatal=False),
    Signature("validation-error", re.compile(r"pydantic_core\._pydantic_core\.ValidationError|ValidationError: \d+ validation error"),
              "vLLM rejected its configuration (see the message above)"),
]

SIGNATURES_BY_NAME = {s.name: s for s in SIGNATURES}


def consequence(lines: list[str]) -> bool:
    """A rank whose log shows it lost the head: its exit follows another rank's failure, not a cause."""
    return any(SIGNATURES_BY_NAME["peer-lost"].pattern.search(line) for line in lines)


def more_telling(new: Signature, old: Signature | None) -> bool:
    """Whether `new` explains a failure better than `old`: vLLM writes the worker's root cause and the
    API server's "See root cause above" to different streams, so the wrapper can arrive first."""
    return old is None or (old.wrapper and not new.wrapper)


def match(line: str) -> Signature | None:
    for signature in SIGNATURES:
        if signature.pattern.search(line):
            return signature
    return None


def explain_exit(code: int, oom_killed: bool) -> str:
    if oom_killed or code == 137:
        return "killed by SIGKILL (exit 137): most likely out of memory on unified memory (field note 8)"
    if code == 2:
        return "exit 2: a command-line error (bad flag or value)"
    return f"exited with code {code}"
