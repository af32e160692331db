"""A single-node stand-in on loopback, for benchmarks and tests on this machine (no cluster, no Docker).

Command line (serves until Ctrl-C; SIM_* knobs from the environment):

    SIM_DECODE_TPS=500 python -m orchestrator.sim.standin.local --port 8000 --spec 4 [-- VLLM FLAGS]

From Python (starts a process, waits for readiness, reads the truth line):

    with LocalStandin(spec_k=4, env={"SIM_DECODE_TPS": "500"}) as srv:
        srv.url, srv.model, srv.truth      # http://127.0.0.1:PORT, "tiny", speed.Truth

Either way the model is a directory holding only a config.json (the stand-in reads nothing else).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Self

from .speed import Truth

# holds the `orchestrator` package: the stand-in runs as orchestrator.sim.standin, as in the image
SITE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
READY = "Application startup complete."


def make_model_dir(path: str, max_model_len: int = 32768) -> str:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump({"model_type": "gpt_oss", "max_position_embeddings": max_model_len}, fh)
    return path


def serve_argv(model_dir: str, port: int, name: str, spec_k: int, extra=()) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator.sim.standin", "serve", model_dir, "--host", "127.0.0.1",
            "--port", str(port), "--served-model-name", name]
    if spec_k:
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": spec_k})]
    return argv + list(extra)


def clean_env(env: dict | None) -> dict:
    """This process's environment without SIM_/VLLM_/HF_ variables, fast loading, then `env`."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_", "HF_"))}
    out.update(SIM_LOAD_SECONDS="0", PYTHONPATH=SITE_DIR)
    out.update(env or {})
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalStandin:
    """One `vllm serve` stand-in process on 127.0.0.1; its output is kept in `lines`."""

    def __init__(self, spec_k: int = 0, env: dict | None = None, name: str = "tiny", extra=(),
                 max_model_len: int = 32768, timeout: float = 30.0):
        self.spec_k, self.env, self.model, self.extra = spec_k, env, name, tuple(extra)
        self.max_model_len, self.timeout = max_model_len, timeout
        self.lines: list[str] = []
        self.proc: subprocess.Popen | None = None
        self.truth: Truth | None = None
        self.port = 0
        self._dir = ""
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._dir = tempfile.mkdtemp(prefix="standin-")
        model = make_model_dir(os.path.join(self._dir, "model"), self.max_model_len)
        self.port = free_port()
        self.proc = subprocess.Popen(serve_argv(model, self.port, self.model, self.spec_k, self.extra),
                                     env=clean_env(self.env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(self.timeout) or READY not in "\n".join(self.lines):
            tail = "\n".join(self.lines[-20:])
            self.stop()
            raise RuntimeError(f"stand-in did not become ready within {self.timeout:.0f} s:\n{tail}")
        self.truth = Truth.from_line("\n".join(self.lines))
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if READY in line:
                self._ready.set()
        self._ready.set()  # the process ended: start() reports the tail

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                code = self.proc.wait()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""
        return code

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m orchestrator.sim.standin.local",
                                description="Serve the vLLM stand-in on 127.0.0.1 (one node, SIM_* from the env).")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--spec", type=int, default=0, metavar="K", help="draft tokens per step (0: no speculation)")
    p.add_argument("--name", default="tiny", help="served model name")
    p.add_argument("extra", nargs="*", help="more vLLM flags, after --")
    a = p.parse_args(argv)
    model = make_model_dir(os.path.join(tempfile.gettempdir(), "spark-deploy-standin-model"))
    env = dict(os.environ, PYTHONPATH=SITE_DIR)
    env.setdefault("SIM_LOAD_SECONDS", "0")
    argv_ = serve_argv(model, a.port, a.name, a.spec, a.extra)
    print("standin:", " ".join(argv_[1:]), flush=True)
    os.execve(sys.executable, argv_, env)

if __name__ == "__main__":
    main()
