"""Tests of the vLLM stand-in (the orchestrator/sim/standin package, run as `python3 -m orchestrator.sim.standin`).

Every test runs the stand-in as real subprocesses on 127.0.0.1 with kernel-chosen free ports, talks
real HTTP (urllib) and real TCP rendezvous to it, and waits by reading its log lines with deadlines.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

SITE_DIR = Path(__file__).resolve().parents[2]  # holds the `orchestrator` package
SIM = ["-m", "orchestrator.sim.standin"]
STARTED = "Application startup complete."


def free_port() -> int:
    """A port nobody listens on right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(hf_home: Path, name: str = "sim/tiny", config: dict | None = None, shards: int = 3,
               rev: str = "0123abcd") -> Path:
    """An HF-cache layout: hub/models--org--name/{refs/main, snapshots/<rev>/config.json + shards}."""
    repo = hf_home / "hub" / ("models--" + name.replace("/", "--"))
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    cfg = {"model_type": "gpt_oss", "max_position_embeddings": 32768, **(config or {})}
    (snap / "config.json").write_text(json.dumps(cfg))
    for i in range(1, shards + 1):
        header = b'{"__metadata__":{"format":"pt"}}'  # a valid safetensors file holding no tensor
        (snap / f"model-{i:05d}-of-{shards:05d}.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return snap


class SimProc:
    """One `vllm serve` stand-in process; its merged stdout/stderr is collected line by line."""

    def __init__(self, args: list[str], env: dict, name: str = "sim"):
        self.name = name
        self.proc = subprocess.Popen([sys.executable, *SIM, "serve", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def matching(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        with self._cond:
            return [ln for ln in self.lines if rx.search(ln)]

    def wait_for(self, pattern: str, timeout: float = 15.0, count: int = 1, must: bool = True) -> list[str]:
        """Block until `count` lines match (or the process ends / the deadline passes)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [ln for ln in self.lines if rx.search(ln)]
                if len(hits) >= count:
                    return hits
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    break
                self._cond.wait(left)
        if must:
            tail = "\n".join(self.lines[-25:])
            raise AssertionError(f"{self.name}: no {count}x {pattern!r} (exited={self.proc.poll()})\n{tail}")
        return hits

    def wait_exit(self, timeout: float = 15.0) -> int:
        rc = self.proc.wait(timeout)
        with self._cond:
            self._cond.wait_for(lambda: self._eof, timeout)
        return rc

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.wait_exit(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def http(port: int, path: str, body: dict | None = None, timeout: float = 10.0):
    """(status, parsed JSON or text) for GET (body None) or POST JSON."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw, status, ctype = resp.read().decode(), resp.status, resp.headers.get("content-type", "")
    except urllib.error.HTTPError as err:
        raw, status, ctype = err.read().decode(), err.code, err.headers.get("content-type", "")
    return status, (json.loads(raw) if "json" in ctype else raw)


def stream(port: int, body: dict, timeout: float = 30.0) -> list[tuple[float, object]]:
    """POST a streaming completion; return (arrival monotonic time, parsed event) per SSE event."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        for raw in iter(resp.readline, b""):
            line = raw.decode().rstrip("\n")
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: "):]
            events.append((time.monotonic(), payload if payload == "[DONE]" else json.loads(payload)))
    return events


def metrics(port: int) -> dict[str, float]:
    """Parse Prometheus text into {'name{labels}': value} (labels as printed)."""
    status, text = http(port, "/metrics")
    assert status == 200
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, val = line.rsplit(" ", 1)
            out[key] = float(val)
    return out


def metrics_after(port: int, before: dict[str, float], model: str, finished: int = 1,
                  reason: str = "length", timeout: float = 5.0) -> dict[str, float]:
    """The first scrape that counts `finished` more finished requests than `before`: /metrics lags the engine
    by up to SIM_METRICS_LAG steps, as vLLM's does, so a response can arrive before a scrape shows its
    request finished. Bounded; the caller's assertions then judge the whole state that scrape showed."""
    key = f'vllm:request_success_total{{model_name="{model}",engine="0",finished_reason="{reason}"}}'
    deadline = time.monotonic() + timeout
    after = metrics(port)
    while after.get(key, 0.0) - before.get(key, 0.0) < finished and time.monotonic() < deadline:
        time.sleep(0.02)  # polling the scrape, bounded by the deadline
        after = metrics(port)
    return after


def hermetic_env(hf_home: Path, **extra: str) -> dict:
    """No inherited SIM_/VLLM_/HF_ vars; fast loading and decoding unless a test says otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "VLLM_", "HF_"))}
    env.update(HF_HOME=str(hf_home), SIM_LOAD_SECONDS="0.2", SIM_DECODE_TPS="1000", SIM_TTFT="0.01",
               PYTHONPATH=str(SITE_DIR))
    env.update(extra)
    return env


class Procs:
    """Starts stand-in processes and SIGTERMs whatever is left at teardown."""

    def __init__(self):
        self.all: list[SimProc] = []

    def __call__(self, args, env, name="sim") -> SimProc:
        p = SimProc([str(a) for a in args], env, name)
        self.all.append(p)
        return p

    def close(self) -> None:
        for p in self.all:
            p.stop()


@pytest.fixture
def hf_home(tmp_path) -> Path:
    make_model(tmp_path / "hf")
    return tmp_path / "hf"


@pytest.fixture
def env(hf_home) -> dict:
    return hermetic_env(hf_home)


@pytest.fixture
def spawn():
    procs = Procs()
    yield procs
    procs.close()


def serve_args(port: int, *extra) -> list:
    return ["sim/tiny", "--host", "127.0.0.1", "--port", port, *extra]


def cluster_args(rank: int, master_port: int, http_port: int, *extra) -> list:
    """The documented 2-node launch: same command, plus --node-rank 1 --headless on the peer."""
    args = serve_args(http_port, "--distributed-executor-backend", "mp", "-tp", 2, "--nnodes", 2,
                      "--node-rank", rank, "--master-addr", "127.0.0.1", "--master-port", master_port, *extra)
    return args + (["--headless"] if rank else [])


def start_cluster(spawn, head_env, peer_env, *extra):
    """Head first; the peer only once the head's rendezvous port is LISTENING (field note 4)."""
    master, port = free_port(), free_port()
    head = spawn(cluster_args(0, master, port, *extra), head_env, "head")
    head.wait_for(r"Initializing a V1 LLM engine")
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", master), timeout=1).close()
            break
        except OSError:
            assert head.proc.poll() is None and time.monotonic() < deadline, head.text
            time.sleep(0.02)
    # the probe above was a bogus client; the head ignores it and keeps waiting for rank 1
    peer = spawn(cluster_args(1, master, port, *extra), peer_env, "peer")
    return head, peer, port


def started(proc: SimProc) -> None:
    proc.wait_for(re.escape(STARTED))


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One single-node server shared by the HTTP tests (decode 200 tok/s for the rate test)."""
    hf = tmp_path_factory.mktemp("hf")
    make_model(hf)
    procs, port = Procs(), free_port()
    p = procs(serve_args(port, "--served-model-name", "tiny", "--max_model_len", "8192",
                         "--enable-prompt-tokens-details"),
              hermetic_env(hf, SIM_DECODE_TPS="200"), "single")
    started(p)
    yield port, p
    procs.close()


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """A server with speculative decoding (4 draft tokens) and fast decoding."""
    hf = tmp_path_factory.mktemp("hf")
    make_model(hf)
    procs, port = Procs(), free_port()
    p = procs(serve_args(port, "--speculative-config", '{"method":"mtp","num_speculative_tokens":4}'),
              hermetic_env(hf, SIM_DECODE_TPS="2000", SIM_SEED="7"), "spec")
    started(p)
    yield port, p
    procs.close()


# ----------------------------------------------------------------------------- command line
def run_once(args, env, timeout=15) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *SIM, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_unknown_flag_is_the_real_argparse_error(env):
    r = run_once(["serve", "sim/tiny", "--bogus", "1"], env)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...",
        "vllm: error: unrecognized arguments: --bogus 1",
    ]


def test_abbreviated_flag_is_rejected(env):
    r = run_once(["serve", "sim/tiny", "--max-model", "4096"], env)
    assert r.returncode == 2 and "vllm: error: unrecognized arguments: --max-model 4096" in r.stderr


def test_bad_moe_backend_choice(env):
    r = run_once(["serve", "sim/tiny", "--moe-backend", "x"], env)
    assert r.returncode == 2
    assert "vllm serve: error: argument --moe-backend: invalid choice: 'x' (choose from " in r.stderr
    assert "'flashinfer_b12x'" in r.stderr


def test_bad_speculative_json_is_an_argparse_error(env):
    r = run_once(["serve", "sim/tiny", "--speculative-config", "{num_speculative_tokens: 3"], env)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == ("vllm serve: error: argument --speculative-config/-sc: invalid "
                                         "_optional_type value: '{num_speculative_tokens: 3'")


@pytest.mark.parametrize("spec, config, expected", [
    ({"method": "mtp", "num_speculative_tokens": 3, "bogus": 1}, {},
     ["1 validation error for SpeculativeConfig", "bogus",
      "Unexpected keyword argument [type=unexpected_keyword_argument, input_value=1, input_type=int]"]),
    ({"method": "mtp", "num_speculative_tokens": 0}, {},
     ["num_speculative_tokens", "Input should be greater than 0 [type=greater_than"]),
    ({"method": "mtp", "num_speculative_tokens": 7}, {"n_predict": 5},
     ["Value error, num_speculative_tokens:7 must be divisible by n_predict=5 [type=value_error"]),
    ([3], {}, ["Input should be a dictionary or an instance of SpeculativeConfig"]),
])
def test_speculative_config_is_validated_like_pydantic(tmp_path, spec, config, expected):
    make_model(tmp_path / "hf", config=config)
    r = run_once(["serve", "sim/tiny", "--speculative-config", json.dumps(spec)], hermetic_env(tmp_path / "hf"))
    assert r.returncode == 1
    assert "pydantic_core._pydantic_core.ValidationError:" in r.stderr
    for text in expected:
        assert text in r.stderr


@pytest.mark.parametrize("spec", [{"method": "mtp", "num_speculative_tokens": 3},  # below n_predict
                                  {"method": "dspark", "num_speculative_tokens": 7}])  # dspark: no n_predict rule
def test_what_vllm_does_not_refuse_for_n_predict_starts(tmp_path, spawn, spec):
    """vLLM 0.33.0 (config/speculative.py) refuses only k > n_predict with k % n_predict, and never for dspark."""
    make_model(tmp_path / "hf", config={"n_predict": 5})
    p = spawn(serve_args(free_port(), "--speculative-config", json.dumps(spec)), hermetic_env(tmp_path / "hf"))
    line = p.wait_for(r"Initializing a V1 LLM engine")[0]
    assert f"num_spec_tokens={spec['num_speculative_tokens']}" in line


@pytest.mark.parametrize("flag, model, field", [("--tokenizer-mode", "ModelConfig", "tokenizer_mode"),
                                                ("--model-impl", "ModelConfig", "model_impl"),
                                                ("--kv-cache-dtype", "CacheConfig", "cache_dtype")])
def test_a_value_outside_a_listed_metavar_is_refused_when_the_config_is_built(env, flag, model, field):
    """argparse passes it; vLLM's config class (a pydantic Literal) refuses it, as the recipe does."""
    r = run_once(["serve", "sim/tiny", flag, "bogus"], env)
    assert r.returncode == 1
    lines = [line.partition(") ")[2] for line in r.stderr.splitlines()]
    at = lines.index(f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {model}")
    assert lines[at + 1] == field and lines[at + 2].startswith("  Input should be ")
    assert lines[at + 2].endswith("[type=literal_error, input_value='bogus', input_type=str]")


def test_divisible_speculative_tokens_are_accepted(tmp_path, spawn):
    make_model(tmp_path / "hf", config={"n_predict": 5})
    p = spawn(serve_args(free_port(), "--speculative-config", '{"num_speculative_tokens":10}'),
              hermetic_env(tmp_path / "hf"))
    line = p.wait_for(r"Initializing a V1 LLM engine")[0]
    assert "num_spec_tokens=10" in line and "method='mtp'" in line


def test_recipe_flags_are_accepted(tmp_path, spawn):
    """The flags the shipped recipes render (DeepSeek dspark recipe), on a model with MTP n_predict=5."""
    make_model(tmp_path / "hf", config={"n_predict": 5})
    p = spawn(serve_args(free_port(), "--served-model-name", "tiny", "--trust-remote-code", "--block-size", 256,
                         "--max-num-seqs", 12, "--max-num-batched-tokens", 8192, "--tokenizer-mode",
                         "deepseek_v4", "--tool-call-parser", "deepseek_v4", "--enable-auto-tool-choice",
                         "--reasoning-parser", "deepseek_v4", "--kv-cache-dtype", "fp8", "--max-model-len", 4096,
                         "--gpu-memory-utilization", 0.8, "--enable-prefix-caching", "--moe-backend",
                         "flashinfer_b12x", "--speculative-config",
                         '{"method":"dspark","num_speculative_tokens":5,"rejection_sample_method":"block"}',
                         "--distributed-executor-backend", "mp"), hermetic_env(tmp_path / "hf"))
    started(p)
    kv = p.matching(r"GPU KV cache size")[0]
    assert int(kv.split("size: ")[1].split(" tokens")[0].replace(",", "")) % 256 == 0


def test_missing_model_is_the_offline_hub_error(env):
    r = run_once(["serve", "sim/absent", "--port", free_port()], env)
    assert r.returncode == 1
    assert r.stderr.rstrip().splitlines()[-1].endswith(
        "OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them "
        "in the cached files. Checkout your internet connection or see how to run the library in offline "
        "mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.")


def test_revision_selects_the_snapshot(tmp_path, spawn):
    make_model(tmp_path / "hf", rev="aaaa")
    make_model(tmp_path / "hf", rev="bbbb", shards=5)  # refs/main now -> bbbb
    p = spawn(serve_args(free_port(), "--revision", "aaaa"), hermetic_env(tmp_path / "hf"))
    p.wait_for(r"Loading weights took")
    assert p.matching(r"Completed \| 3/3 \[")
    r = run_once(["serve", "sim/tiny", "--revision", "cccc"], hermetic_env(tmp_path / "hf"))
    assert r.returncode == 1 and "OSError: We couldn't connect" in r.stderr


def test_multinode_requires_mp_uni_or_external_launcher(env):
    r = run_once(["serve", "sim/tiny", "--nnodes", "2", "-tp", "2", "--distributed-executor-backend", "ray"], env)
    assert r.returncode == 1
    assert "ValueError: nnodes > 1 can only be set when distributed executor backend is mp" in r.stderr


def test_crash_at_start_fault(env):
    r = run_once(["serve", "sim/tiny"], {**env, "SIM_FAULT_CRASH_AT_START": "1"})
    assert r.returncode == 1
    assert "RuntimeError: CUDA driver initialization failed" in r.stderr


def test_crash_loop_fault_serves_its_first_starts_then_dies_at_every_start(env, spawn, tmp_path):
    state = tmp_path / "starts.count"
    faulty = {**env, "SIM_FAULT_CRASH_AFTER_STARTS": "1", "SIM_FAULT_START_STATE": str(state)}
    first = spawn(serve_args(free_port()), faulty)  # start 1 of 1: it starts as usual
    first.wait_for(r"Initializing a V1 LLM engine")
    assert first.stop() == 0  # SIGTERM: exit 0
    assert state.read_text() == "1"
    for start in (2, 3):  # every later start of the same container: exit 1 at once, a CUDA error
        r = run_once(["serve", "sim/tiny"], faulty)
        assert r.returncode == 1 and "RuntimeError: CUDA error: unspecified launch failure" in r.stderr, r.stderr
        assert state.read_text() == str(start)
    other = spawn(serve_args(free_port()), {**faulty, "SIM_FAULT_CRASH_RANK": "1"})  # limited to rank 1: rank 0 runs
    other.wait_for(r"Initializing a V1 LLM engine")


# ----------------------------------------------------------------------------- start-up log
@pytest.mark.parametrize("flag, extra_env, value", [
    ("auto", {}, "DEEPGEMM_MXFP4"),
    ("auto", {"SIM_AUTO_BACKEND": "flashinfer_b12x"}, "B12X_MXFP4_MXFP8"),
    ("FlashInfer-B12X", {}, "B12X_MXFP4_MXFP8"),
    ("batched_triton", {}, "TRITON_UNFUSED"),
    ("flashinfer_trtllm", {}, "FLASHINFER_TRTLLM_MXFP4_MXFP8"),
    ("marlin", {}, "MARLIN"),
])
def test_moe_backend_line_follows_the_flag(env, spawn, flag, extra_env, value):
    p = spawn(serve_args(free_port(), "--moe-backend", flag), {**env, **extra_env})
    lines = p.wait_for(r"Mxfp4 MoE backend\.")
    assert lines[0].endswith(f"Using '{value}' Mxfp4 MoE backend.")


def test_log_line_shape_and_order(single):
    _, p = single
    shape = re.compile(r"^\((APIServer|EngineCore_DP0|Worker[_A-Z0-9]*) pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d "
                       r"\[[a-z_]+\.py:\d+\] ")
    for needle in ("Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)",
                   "Estimated CUDA graph memory:", "Available KV cache memory:", "GPU KV cache size:",
                   "init engine (profile, create kv cache, warmup model) took", "Starting vLLM server on "
                   "http://127.0.0.1:", "Loading weights took", "Model loading took"):
        hits = [ln for ln in p.lines if needle in ln]
        assert len(hits) == 1, needle
        assert shape.match(hits[0]), hits[0]
    kv = p.matching(r"GPU KV cache size")[0]
    assert re.search(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency for 8,192 tokens per request: "
                     r"[\d.]+x$", kv)
    shards = p.matching(r"Loading safetensors checkpoint shards:")
    assert [re.search(r"\| (\d+/\d+) \[", s).group(1) for s in shards] == ["0/3", "1/3", "2/3", "3/3"]
    order = ["Loading weights took", "Profiling CUDA graph memory", "GPU KV cache size", "Starting vLLM server",
             "Route: /health, Methods: GET", STARTED]
    idx = [next(i for i, ln in enumerate(p.lines) if s in ln) for s in order]
    assert idx == sorted(idx)


def test_enforce_eager_has_no_cuda_graph_profile(env, spawn):
    port = free_port()
    p = spawn(serve_args(port, "--enforce-eager", "--no-enable-prefix-caching"), env)
    started(p)
    assert not p.matching(r"Profiling CUDA graph memory|Estimated CUDA graph memory")
    assert p.matching(r"GPU KV cache size: ")
    assert p.matching(r"enforce_eager=True, .*enable_prefix_caching=False")
    body = {"prompt": " ".join(["same"] * 40), "max_tokens": 1}
    for _ in range(2):  # prefix caching off: the repeat gets no cached tokens (and no details without the flag)
        assert http(port, "/v1/completions", body)[1]["usage"]["prompt_tokens_details"] is None


def test_cuda_graph_profile_depends_on_flags(env, spawn):
    a = spawn(serve_args(free_port(), "--max-num-seqs", 8), env)
    b = spawn(serve_args(free_port(), "--max-num-seqs", 8, "--speculative-config",
                         '{"method":"mtp","num_speculative_tokens":3}'), env)
    la = a.wait_for(r"Profiling CUDA graph memory")[0].split("] ", 1)[1]
    lb = b.wait_for(r"Profiling CUDA graph memory")[0].split("] ", 1)[1]
    assert la == "Profiling CUDA graph memory: PIECEWISE=5 (largest=16), FULL=4 (largest=8)"
    assert la != lb


def test_kv_cache_follows_dtype_and_utilization(env, spawn):
    def kv(*flags):
        p = spawn(serve_args(free_port(), *flags), env)
        return int(p.wait_for(r"GPU KV cache size")[0].split("size: ")[1].split(" tokens")[0].replace(",", ""))
    base = kv()
    assert kv("--kv-cache-dtype", "fp8") == pytest.approx(2 * base, rel=0.01)
    assert kv("--gpu-memory-utilization", "0.8") < base


def test_hung_load_stops_progress_and_never_listens(env, spawn):
    port = free_port()
    p = spawn(serve_args(port), {**env, "SIM_FAULT_HANG_LOAD": "1", "SIM_LOAD_SECONDS": "0.1"})
    p.wait_for(r"Completed \| 1/3 \[")
    assert not p.wait_for(r"Completed \| 2/3|Loading weights took", timeout=1.0, must=False)
    assert p.proc.poll() is None
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def server_pid(proc: SimProc) -> int:
    """The serving process's pid, from its log prefix: a child of the supervisor we started."""
    line = proc.wait_for(r"\(\w+ pid=\d+\)")[0]
    return int(re.search(r"pid=(\d+)", line).group(1))


def parent_of(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(re.search(r"^PPid:\s+(\d+)", status, re.M).group(1))


def test_oom_fault_is_a_silent_sigkill_from_outside_exit_137(env, spawn):
    p = spawn(serve_args(free_port()), {**env, "SIM_FAULT_OOM": "1", "SIM_FAULT_OOM_MIB": "64"})
    server = server_pid(p)
    assert server != p.proc.pid and parent_of(server) == p.proc.pid  # the server is the child
    assert p.wait_exit() == 137  # the supervisor's verdict: 128 + SIGKILL, as Docker shows it
    assert p.lines[-1].split("] ", 1)[-1].startswith("Model loading took")  # no last words
    assert parent_of(server) is None


def test_oom_fault_can_target_one_rank(env, spawn):
    other = spawn(serve_args(free_port()), {**env, "SIM_FAULT_OOM": "1", "SIM_FAULT_OOM_RANK": "1"})
    started(other)  # rank 0 is not the target: it serves
    assert other.proc.poll() is None


def test_server_dies_with_its_supervisor(env, spawn):
    p = spawn(serve_args(free_port()), env)
    started(p)
    server = server_pid(p)
    p.proc.kill()
    p.proc.wait(10)
    deadline = time.monotonic() + 5
    while parent_of(server) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert parent_of(server) is None


def test_sigterm_exits_zero_and_releases_the_jit_lock(env, spawn, tmp_path):
    cache = tmp_path / "jit"
    p = spawn(serve_args(free_port()), {**env, "VLLM_CACHE_ROOT": str(cache)})
    started(p)
    lock = cache / "deep_gemm" / "rank-0.lock"
    assert json.loads(lock.read_text())["pid"] == server_pid(p)
    t0 = time.monotonic()
    assert p.stop() == 0  # SIGTERM to the supervisor reaches the server, whose 0 is passed on
    assert time.monotonic() - t0 < 3
    assert not lock.exists()


# ----------------------------------------------------------------------------- HTTP API
def test_health_models_tokenize(single):
    port, _ = single
    assert http(port, "/health") == (200, "")
    status, models = http(port, "/v1/models")
    assert status == 200 and models["object"] == "list"
    m = models["data"][0]
    assert (m["id"], m["object"], m["owned_by"], m["root"], m["max_model_len"]) == \
        ("tiny", "model", "vllm", "sim/tiny", 8192)
    status, tok = http(port, "/tokenize", {"model": "tiny", "prompt": "Hello, world! 你好"})
    assert status == 200
    assert tok["count"] == 6 == len(tok["tokens"])  # Hello , world ! 你 好
    assert tok["max_model_len"] == 8192 and tok["token_strs"] is None
    assert http(port, "/tokenize", {"prompt": "Hello, world! 你好"})[1]["tokens"] == tok["tokens"]


def test_completion_is_counted_in_metrics(single):
    port, _ = single
    before = metrics(port)
    status, out = http(port, "/v1/completions", {"model": "tiny", "prompt": "unique-a1 tell me a story",
                                                "max_tokens": 12, "temperature": 0, "ignore_eos": True})
    assert status == 200
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-") and out["model"] == "tiny"
    choice = out["choices"][0]
    assert choice["finish_reason"] == "length" and choice["index"] == 0
    usage = out["usage"]
    assert usage["completion_tokens"] == 12 == http(port, "/tokenize", {"prompt": choice["text"]})[1]["count"]
    assert usage["prompt_tokens"] == 7 and usage["total_tokens"] == 19  # unique - a1 tell me a story
    after = metrics_after(port, before, "tiny")
    lab = 'model_name="tiny",engine="0"'

    def delta(key):
        return after[key] - before.get(key, 0.0)
    assert delta(f'vllm:request_success_total{{{lab},finished_reason="length"}}') == 1
    assert delta(f"vllm:generation_tokens_total{{{lab}}}") == 12
    assert delta(f"vllm:prompt_tokens_total{{{lab}}}") == 7
    assert after[f"vllm:num_requests_running{{{lab}}}"] == 0
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert f'vllm:request_success_total{{{lab},finished_reason="{reason}"}}' in after
    assert not any(k.startswith("vllm:spec_decode") for k in after)  # no speculative config


def test_metrics_exposition_format(single):
    port, _ = single
    _, text = http(port, "/metrics")
    lines = text.splitlines()
    for name, kind in (("vllm:num_requests_running", "gauge"), ("vllm:request_success_total", "counter"),
                       ("vllm:prefix_cache_hits_total", "counter"), ("vllm:prompt_tokens_total", "counter")):
        i = lines.index(f"# TYPE {name} {kind}")
        assert lines[i - 1].startswith(f"# HELP {name} ")
        assert lines[i + 1].startswith(name + "{")


def test_greedy_output_is_deterministic_and_eos_stops(spec):
    """Same prompt, same text, even though speculation groups the tokens differently each time."""
    port, _ = spec
    body = {"prompt": "unique-b2 same prompt", "max_tokens": 600, "temperature": 0}
    one, two = http(port, "/v1/completions", body)[1], http(port, "/v1/completions", body)[1]
    assert one["choices"][0]["text"] == two["choices"][0]["text"]
    assert one["choices"][0]["finish_reason"] == "stop"  # EOS comes before 600 tokens without ignore_eos
    n = one["usage"]["completion_tokens"]
    assert n < 600 and http(port, "/tokenize", {"prompt": one["choices"][0]["text"]})[1]["count"] == n - 1


def test_prefix_cache_reports_block_granular_hits(single):
    port, _ = single
    shared = "unique-c3 " + " ".join(f"w{i}" for i in range(40))
    first = http(port, "/v1/completions", {"prompt": shared + " alpha", "max_tokens": 2})[1]
    second = http(port, "/v1/completions", {"prompt": shared + " beta gamma", "max_tokens": 2})[1]
    assert first["usage"]["prompt_tokens_details"] is None  # no hit: null, as vLLM sends it
    # 41 shared tokens, block size 16 -> two full blocks hit
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


def test_prompt_tokens_details_only_with_the_flag(spec):
    """Like vLLM: without --enable-prompt-tokens-details a cache hit is not in usage (null), only in /metrics."""
    port, _ = spec
    shared = {"prompt": "unique-c4 " + " ".join(f"w{i}" for i in range(40)), "max_tokens": 2}

    def hits_total() -> float:
        text = http(port, "/metrics")[1]
        return float(re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.MULTILINE).group(1))

    http(port, "/v1/completions", shared)
    before = hits_total()
    usage = http(port, "/v1/completions", shared)[1]["usage"]
    assert usage["prompt_tokens_details"] is None
    assert hits_total() - before == 32  # the hit happened: two full blocks of 16


def test_request_errors(single):
    port, _ = single
    status, err = http(port, "/v1/completions", {"model": "nope", "prompt": "x"})
    assert status == 404 and err["error"]["message"] == "The model `nope` does not exist."
    status, err = http(port, "/v1/completions", {"prompt": "x", "max_tokens": 9000})
    assert status == 400 and "maximum context length is 8192 tokens" in err["error"]["message"]
    assert http(port, "/nowhere")[0] == 404


@pytest.mark.timing  # a decode rate, judged on the wall clock
def test_plain_stream_shape_and_true_decode_rate(single):
    """One token per chunk without speculation; (tokens - first) / (t_last - t_first) == SIM_DECODE_TPS."""
    port, _ = single
    events = stream(port, {"prompt": "unique-d4 rate probe", "max_tokens": 200, "ignore_eos": True,
                           "temperature": 0, "stream_options": {"include_usage": True}})
    assert events[-1][1] == "[DONE]"
    usage_chunk = events[-2][1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 200
    content = [(t, e) for t, e in events[:-2]]
    assert len(content) == 200
    first = content[0][1]
    assert set(first) == {"id", "object", "created", "model", "choices"}
    assert first["choices"][0].keys() == {"index", "text", "logprobs", "finish_reason", "stop_reason"}
    assert [e["choices"][0]["finish_reason"] for _, e in content][-2:] == [None, "length"]
    rate = (200 - 1) / (content[-1][0] - content[0][0])
    assert rate == pytest.approx(200, rel=0.03)


def test_stream_without_include_usage_has_no_usage_chunk(single):
    port, _ = single
    events = stream(port, {"prompt": "unique-e5", "max_tokens": 5, "ignore_eos": True})
    assert events[-1][1] == "[DONE]" and all(e["choices"] for _, e in events[:-1])


# ----------------------------------------------------------------------------- speculative decoding
def spec_deltas(before, after, k=4):
    """Counter deltas of the `spec` server (served as sim/tiny) between two /metrics scrapes."""
    lab = 'model_name="sim/tiny",engine="0"'

    def d(name, extra=""):
        return after[f"vllm:{name}{{{lab}{extra}}}"] - before[f"vllm:{name}{{{lab}{extra}}}"]
    return {"drafts": d("spec_decode_num_drafts_total"), "draft_tokens": d("spec_decode_num_draft_tokens_total"),
            "accepted": d("spec_decode_num_accepted_tokens_total"), "generated": d("generation_tokens_total"),
            "per_pos": [d("spec_decode_num_accepted_tokens_per_pos_total", f',position="{i}"') for i in range(k)],
            "length": d("request_success_total", ',finished_reason="length"')}


def test_speculative_stream_carries_several_tokens_per_chunk(spec):
    port, _ = spec
    before = metrics(port)
    events = stream(port, {"prompt": "unique-f6 write a long essay about rivers", "max_tokens": 150,
                           "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}})
    after = metrics_after(port, before, "sim/tiny")
    content = [e for _, e in events if e != "[DONE]" and e["choices"]]
    text = "".join(e["choices"][0]["text"] for e in content)
    completion = events[-2][1]["usage"]["completion_tokens"]
    assert completion == 150 == http(port, "/tokenize", {"prompt": text})[1]["count"]
    assert len(content) < completion  # one chunk per verification step, not per token
    d = spec_deltas(before, after)
    assert d["length"] == 1 and d["generated"] == completion
    # every chunk ends a verification step: the first carries the prefill token and the first step's
    assert d["drafts"] == len(content)
    first = http(port, "/tokenize", {"prompt": content[0]["choices"][0]["text"]})[1]["count"]
    assert first >= 2
    assert d["draft_tokens"] == 4 * d["drafts"]
    assert completion == 1 + d["drafts"] + d["accepted"]  # output tokens per step = 1 + accepted/drafts
    assert sum(d["per_pos"]) == d["accepted"]
    assert d["per_pos"] == sorted(d["per_pos"], reverse=True)  # position i accepted only after i-1


def test_acceptance_depends_on_workload_profile(spec):
    port, _ = spec

    def tokens_per_step(prompt):
        before = metrics(port)
        http(port, "/v1/completions", {"prompt": prompt, "max_tokens": 200, "ignore_eos": True})
        d = spec_deltas(before, metrics_after(port, before, "sim/tiny"))
        return 1 + d["accepted"] / d["drafts"]
    code = tokens_per_step("unique-g7 def main(): import os; x = {1: 2}")
    prose = tokens_per_step("unique-g7 tell me about the sea and the wind")
    zh = tokens_per_step("unique-g7 请介绍一下长江的历史")
    assert code > prose > zh
    assert zh < 1.5 and code > 3.0


# ----------------------------------------------------------------------------- faults on a single node
def test_completions_hang_fault_keeps_health_green(env, spawn):
    port = free_port()
    p = spawn(serve_args(port), {**env, "SIM_FAULT_COMPLETIONS_HANG": "1"})
    started(p)
    assert http(port, "/health")[0] == 200
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        http(port, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout=1.0)
    assert metrics(port)['vllm:num_requests_running{model_name="sim/tiny",engine="0"}'] == 1


# ----------------------------------------------------------------------------- two ranks
def test_two_ranks_rendezvous_and_agree(env, spawn):
    head, peer, port = start_cluster(spawn, env, env, "--moe-backend", "flashinfer_b12x")
    started(head)
    peer.wait_for(r"Available KV cache memory")
    assert peer.matching(r"^INFO .* Launching vLLM \(v0\.33\.0\) headless multiproc executor, with head node "
                         r"address 127\.0\.0\.1 for torch\.distributed process group\.$")
    for proc, rank in ((head, 0), (peer, 1)):
        assert proc.matching(rf"^\(Worker_TP{rank} pid=\d+\) INFO .* world_size=2 rank={rank} local_rank=0 "
                             rf"distributed_init_method=tcp://127\.0\.0\.1:\d+ backend=nccl$")
        assert len(proc.matching(r"Using 'B12X_MXFP4_MXFP8' Mxfp4 MoE backend\.$")) == 1
    profile = [p.matching(r"Profiling CUDA graph memory")[0].split("] ", 1)[1] for p in (head, peer)]
    assert profile[0] == profile[1]
    assert head.matching(r"Loading safetensors checkpoint shards:") and \
        not peer.matching(r"Loading safetensors checkpoint shards:")  # tqdm on global rank 0 only
    assert not peer.matching(r"GPU KV cache size|Application startup")  # EngineCore/API live on the head
    assert http(port, "/v1/completions", {"prompt": "two ranks", "max_tokens": 3})[0] == 200
    assert head.stop() == 0
    assert peer.wait_exit() == 1  # the head's store went away
    assert peer.matching(r"Connection was likely closed")


def test_cuda_graph_fault_makes_ranks_disagree(env, spawn):
    head, peer, _ = start_cluster(spawn, env, {**env, "SIM_FAULT_CUDA_GRAPH_RANK": "1"})
    lines = [p.wait_for(r"Profiling CUDA graph memory")[0].split("] ", 1)[1] for p in (head, peer)]
    assert lines[0] != lines[1]


def assert_half_dead(head: SimProc, peer: SimProc, port: int) -> None:
    """Field note 2: the peer dies with the JIT assertion; the head stays up and repeats the warning."""
    assert peer.wait_exit() == 1
    assert peer.lines[-1].endswith(
        "RuntimeError: Assertion error (/workspace/DeepGEMM/csrc/jit/compiler.hpp:147): runtime != nullptr")
    head.wait_for(r"No available shared memory broadcast block found in 60 seconds\. This typically happens "
                  r"when some processes are hanging or doing some time-consuming work \(e\.g\. compilation, "
                  r"weight/kv cache quantization\)\.$", count=3, timeout=10)
    assert head.proc.poll() is None
    # The peer died during warm-up, so the engine never finished initialising: no API server yet.
    assert not any("Application startup complete" in line for line in head.lines)
    with pytest.raises((OSError, urllib.error.URLError)):
        http(port, "/health", timeout=1.0)


def test_jit_assert_fault_half_kills_the_cluster(env, spawn):
    head_env = {**env, "SIM_RINGBUFFER_INTERVAL": "0.3"}
    head, peer, port = start_cluster(spawn, head_env, {**env, "SIM_FAULT_JIT_ASSERT": "1"})
    assert_half_dead(head, peer, port)


def test_shared_jit_cache_half_kills_the_cluster(env, spawn, tmp_path):
    shared = str(tmp_path / "nfs-jit")
    head_env = {**env, "SIM_RINGBUFFER_INTERVAL": "0.3", "VLLM_CACHE_ROOT": shared}
    head, peer, port = start_cluster(spawn, head_env, {**env, "VLLM_CACHE_ROOT": shared})
    assert_half_dead(head, peer, port)


def test_separate_jit_caches_are_fine(env, spawn, tmp_path):
    head, peer, port = start_cluster(spawn, {**env, "VLLM_CACHE_ROOT": str(tmp_path / "a")},
                                     {**env, "VLLM_CACHE_ROOT": str(tmp_path / "b")})
    started(head)
    peer.wait_for(r"Available KV cache memory")
    assert peer.proc.poll() is None
    assert (tmp_path / "b" / "deep_gemm" / "rank-1.lock").exists()


def test_stale_jit_lock_is_ignored(env, spawn, tmp_path):
    lockdir = tmp_path / "jit" / "deep_gemm"
    lockdir.mkdir(parents=True)
    stale = lockdir / "rank-0.lock"
    stale.write_text(json.dumps({"rank": 0, "pid": 1, "created": 0}))
    os.utime(stale, (time.time() - 60, time.time() - 60))
    peer_env = {**env, "VLLM_CACHE_ROOT": str(tmp_path / "jit")}
    head, peer, _ = start_cluster(spawn, env, peer_env)
    started(head)
    peer.wait_for(r"Available KV cache memory")
    assert peer.proc.poll() is None


def test_peer_that_never_comes_times_out_the_head(env, spawn):
    head = spawn(cluster_args(0, free_port(), free_port()), {**env, "SIM_PEER_TIMEOUT": "1"}, "head")
    assert head.wait_exit() == 1
    assert head.matching(r"torch\.distributed\.DistStoreError: Timed out after 2 seconds waiting for clients\. "
                         r"1/2 clients joined\.$")
    assert not head.matching(re.escape(STARTED))


def test_peer_without_head_gives_up(env, spawn):
    peer = spawn(cluster_args(1, free_port(), free_port()), {**env, "SIM_PEER_TIMEOUT": "1"}, "peer")
    assert peer.wait_exit() == 1
    assert peer.matching(r"DistNetworkError: The client socket has timed out after 1000ms while trying to "
                         r"connect to \('127\.0\.0\.1', \d+\)\.$")


def test_peer_dying_after_start_leaves_a_head_that_answers_health_but_not_completions(env, spawn):
    """The other half-dead shape: serving had begun, then a peer died (playbooks PR #104)."""
    head, peer, port = start_cluster(spawn, {**env, "SIM_RINGBUFFER_INTERVAL": "0.3"}, env)
    started(head)
    assert http(port, "/v1/completions", {"prompt": "hi", "max_tokens": 2})[0] == 200
    peer.proc.kill()
    head.wait_for(r"No available shared memory broadcast block found", count=2, timeout=10)
    assert head.proc.poll() is None
    assert http(port, "/health")[0] == 200
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        http(port, "/v1/completions", {"prompt": "anyone?", "max_tokens": 2}, timeout=1.0)


def test_head_whose_peer_died_exits_after_the_collective_timeout(env, spawn):
    """vLLM's head does not stall for ever: the NCCL watchdog aborts the all-reduce after the process group's
    timeout and the server exits 1, so a supervisor can start it again and reopen the rendezvous."""
    head, peer, port = start_cluster(spawn, {**env, "SIM_RINGBUFFER_INTERVAL": "0.3",
                                             "SIM_COLLECTIVE_TIMEOUT": "1.5"}, env)
    started(head)
    peer.proc.kill()
    head.wait_for(r"No available shared memory broadcast block found", timeout=10)
    assert head.wait_exit() == 1
    assert head.matching(r"Watchdog caught collective operation timeout: WorkNCCL\(.*Timeout\(ms\)=1500\)")
    assert head.matching(r"Worker proc \S+ died unexpectedly \(exit code: -6\), shutting down executor\.")
