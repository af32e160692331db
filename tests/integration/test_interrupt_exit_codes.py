"""Ctrl-C exits 130 and SIGTERM 143 from the commands that run until stopped, on the simulated cluster through
the real command line: `watch`, `logs -f` and `bench` (each interrupted once it is doing its work: a sample
printed, a log line printed, a request of bench's running on the head), and Ctrl-C exits 130 from `up`
(during the engine's load) and `model pull` (while a blob is crossing a throttled fabric). What each leaves
behind is tested in its own file (test_up, test_model_pull; `rollback` and `down`: test_failure_paths)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.request

import pytest

from deploy_helpers import CLI, MODEL_ROOT, recipe_variant, spark_deploy
import cli_json
from orchestrator.sim import fake_model

pytestmark = pytest.mark.integration


class Lines:
    """A CLI started in the background; its stdout lines arrive on a queue, waited on with a bound."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "COLUMNS": "200"})
        self.seen: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.seen.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout:.0f} s: {self.seen[-5:]}") \
                    from None
            if line is None:
                raise AssertionError(f"ended (exit {self.proc.wait()}) first: {self.proc.stderr.read()}")
            if re.search(pattern, line):
                return line

    def interrupt(self, sig: int = signal.SIGINT, timeout: float = 60) -> tuple[int, str]:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        return code, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def _metric(head_ip: str, name: str) -> float:
    """The head's metric, summed over its labels (request_success_total has one line per finish reason)."""
    with urllib.request.urlopen(f"http://{head_ip}:8000/metrics", timeout=5) as answer:
        found = re.findall(rf"^{name}(?:\{{[^}}]*\}})? ([\d.]+)$", answer.read().decode(), re.M)
    return sum(float(value) for value in found)


def _running_requests(head_ip: str) -> float:
    return _metric(head_ip, "vllm:num_requests_running")


def test_watch_logs_follow_and_bench_exit_130_on_ctrl_c_and_143_on_sigterm(pair):
    inventory = pair.inventory_path
    served = spark_deploy("up", pair.recipe_path, "-i", inventory, timeout=600)
    assert served.returncode == 0, served.stderr + served.stdout
    started: list[Lines] = []
    try:
        watch = Lines("watch", "-i", inventory, "--json", "--interval", "1")
        started.append(watch)
        watch.wait_line(r'^\{')  # the first sample
        code, stderr = watch.interrupt()
        assert code == 130, stderr

        for sig, expected in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            follow = Lines("logs", "-i", inventory, "-f", "--tail", "3")
            started.append(follow)
            follow.wait_line(r"^spark-[12] +\| ")
            code, stderr = follow.interrupt(sig)
            assert code == expected, f"{sig.name}: exit {code}\n{stderr}"
            assert "Traceback" not in stderr, stderr

        head_ip = pair.nodes()[0].ip
        assert _running_requests(head_ip) == 0, "nothing else may be asking the head"
        bench = Lines("bench", pair.recipe_path, "-i", inventory, "--shots", "1", "--max-tokens", "2000")
        started.append(bench)  # 2000 tokens at the recipe's 40 tok/s: 50 s per shot
        deadline = time.monotonic() + 60
        while _running_requests(head_ip) < 1:  # the warm-up shot is decoding on the head
            assert bench.proc.poll() is None, f"bench ended first: {bench.proc.stderr.read()}"
            assert time.monotonic() < deadline, "bench's request never reached the head"
            time.sleep(0.1)
        code, stderr = bench.interrupt()
        assert code == 130, stderr
        assert "interrupted (Ctrl-C): no shot was kept yet, nothing recorded" in stderr, stderr
    finally:
        for run in started:
            run.kill()


def test_up_during_its_load_and_model_pull_during_a_copy_exit_130_on_ctrl_c(pair, tmp_path):
    inventory = pair.inventory_path
    started: list[Lines] = []
    slow = recipe_variant(pair, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "60"})
    try:
        up = Lines("up", slow, "-i", inventory, "--json")
        started.append(up)
        up.wait_line(r'^(?=.*"event": ?"phase-start")(?=.*"phase": ?"ready")')  # both ranks started, the engine loading
        code, stderr = up.interrupt()
        assert code == 130, stderr
        assert "Traceback" not in stderr, stderr

        pinned = recipe_variant(pair, tmp_path / "pinned.yaml",
                                model={"revision": fake_model.model_metadata()["revision"]})
        pair.exec(2, ["rm", "-rf", "--", MODEL_ROOT])
        pair.fault(1, "throttle", rate="256kbit", net="fabric")  # the model takes ~12 s to cross
        pull = Lines("model", "pull", pinned, "-i", inventory, "--streams", "1")
        started.append(pull)
        pull.wait_line(r"spark-2: [\d.]+ of ")  # a progress line: the copy is under way
        code, stderr = pull.interrupt()
        assert code == 130, stderr
        assert "Traceback" not in stderr, stderr
    finally:
        for run in started:
            run.kill()
        for node in (1, 2):
            pair.fault(node, "heal")
            pair.fault(node, "model-reset")


def test_bench_interrupted_after_kept_shots_records_them_and_exits_143(pair):
    """SIGTERM while the third shot after the warm-up decodes: the two whole ones stay, shown, and recorded
    with the serving release as interrupted (history says so); the exit is still 143."""
    inventory = pair.inventory_path
    served = spark_deploy("up", pair.recipe_path, "-i", inventory, timeout=600)
    assert served.returncode == 0, served.stderr + served.stdout
    head_ip = pair.nodes()[0].ip
    assert _running_requests(head_ip) == 0, "nothing else may be asking the head"
    before = _metric(head_ip, "vllm:request_success_total")
    bench = Lines("bench", pair.recipe_path, "-i", inventory, "--profile", "code", "--shots", "8", "--warmup", "1",
                  "--max-tokens", "600")  # 600 tokens at the recipe's 40 steps/s: a few seconds per shot
    try:
        deadline = time.monotonic() + 120
        while not (_metric(head_ip, "vllm:request_success_total") >= before + 3 and _running_requests(head_ip) >= 1):
            assert bench.proc.poll() is None, f"bench ended first: {bench.proc.stderr.read()}"
            assert time.monotonic() < deadline, "bench never had a third shot decoding after two kept ones"
            time.sleep(0.1)
        code, stderr = bench.interrupt(signal.SIGTERM)
    finally:
        bench.kill()
    assert code == 143, stderr
    assert "Traceback" not in stderr, stderr
    found = re.search(r"interrupted \(SIGTERM\) after (\d+) kept shot\(s\)", stderr)
    assert found and "recorded with release" in stderr and "as interrupted" in stderr, stderr
    assert "decode" in "".join(bench.seen).lower(), bench.seen  # the table of the shots taken was shown

    releases = cli_json.result(spark_deploy("history", "-i", inventory, "--json").stdout)
    recorded = next(r for r in releases if r["serving"])["bench"]
    assert recorded["interrupted"] == "interrupted (SIGTERM)"
    (group,) = recorded["groups"]
    assert group["profile"] == "code" and group["kept"] == int(found.group(1)) >= 1
    assert group["kept"] + group["discarded"] >= 2 and "interrupted (SIGTERM)" in group["stopped"]
    assert recorded["headline"]["code"]["shots"] == group["kept"]
    text = spark_deploy("history", "-i", inventory, env={"COLUMNS": "400"})  # no cell wraps the word
    assert "(interrupted)" in text.stdout, text.stdout
