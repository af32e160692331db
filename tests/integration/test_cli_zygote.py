"""The zygote that spark_deploy() forks the CLI from gives what a fresh `python -c ... run()` gives."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
from cli_zygote import Zygote
from deploy_helpers import CLI


def _plain(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


@pytest.mark.parametrize("argv", [("--help",), ("nosuch",), ("validate", "/nonexistent/recipe.yaml"),
                                  ("validate", "--help")])
def test_the_same_code_and_output_as_a_fresh_interpreter(argv):
    zygote = Zygote()
    got = zygote.run(list(argv), {**os.environ, "COLUMNS": "200"}, 60)
    want = _plain(*argv)
    assert got is not None
    assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)


def test_each_call_gets_its_own_environment_and_nothing_carries_over(tmp_path):
    """COLUMNS 60, then 200, then 60: the help is wrapped to each call's own, as a fresh process's is."""
    zygote = Zygote()
    narrow = {**os.environ, "COLUMNS": "60"}
    wide = {**os.environ, "COLUMNS": "200"}
    a, b, c = (zygote.run(["--help"], env, 60) for env in (narrow, wide, narrow))
    assert a.stdout == c.stdout != b.stdout  # the help is wrapped to each call's own COLUMNS
    assert a.stdout == _plain("--help", env={"COLUMNS": "60"}).stdout


def test_a_call_that_outlives_its_timeout_is_killed():
    """bench against a loopback port that accepts and never answers: it waits; the timeout kills it, after
    asking it for its stacks (the report a hung CI run needs)."""
    zygote = Zygote()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        started = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired) as hung:
            zygote.run(["bench", "--url", url, "--shots", "1"], dict(os.environ), 2)
        assert time.monotonic() - started < 30
    # what the call was doing when it was killed: its threads' stacks, down to the read that never returned
    assert "(most recent call first)" in str(hung.value) and "orchestrator/bench/client.py" in str(hung.value), str(hung.value)
    again = zygote.run(["--help"], dict(os.environ), 60)  # and the zygote still serves
    assert again is not None and again.returncode == 0
