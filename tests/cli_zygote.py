"""The real CLI in a new process per call, without paying Python's start-up and imports each time.

A suite run starts the CLI some hundreds of times, and each start imports pydantic, paramiko, jinja2,
typer... (about 0.8 s of CPU on this 2-core machine, where the suite is CPU-bound). A zygote process per
test worker imports `orchestrator.cli.main` once; each call forks a fresh child of it, which sets the
call's argv, environment, working directory and stdio, runs `run()` and exits with its code. The child is
a separate process like a `subprocess.run` one (its own exit code, a signal death is a negative code, a
timeout kills it), started from a state in which nothing has run yet: only the imports are shared.

The CLI reads its environment when it runs, not at import (nothing in orchestrator/ reads os.environ at
module level), so a call's `env` means what it means for a fresh interpreter. Calls made while another
is in flight (a test's threads) fall back to a plain subprocess, as does everything if the zygote
cannot start. `SPARK_DEPLOY_TEST_NO_ZYGOTE=1` turns it off.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

SERVER = r"""
import faulthandler, json, os, signal, sys, traceback
proto_in, proto_out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
from orchestrator.cli.lazy import load_all
from orchestrator.cli.main import COMMANDS, run  # once; every call below forks from here
load_all(COMMANDS)  # the commands' modules too (the CLI imports each only when it is used)

def child(req):
    os.setpgid(0, 0)  # its own group, as the client kills it by group on a timeout
    proto_in.close(); proto_out.close()
    os.dup2(os.open(req["out"], os.O_WRONLY | os.O_TRUNC), 1)
    os.dup2(os.open(req["err"], os.O_WRONLY | os.O_TRUNC), 2)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung call's stacks, asked for before its kill
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = ["-c", *req["argv"]]
    code = 0
    try:
        run()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)

for line in proto_in:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        child(req)
    proto_out.write((json.dumps({"pid": pid}) + "\n").encode()); proto_out.flush()
    _, status = os.waitpid(pid, 0)
    proto_out.write((json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n").encode()); proto_out.flush()
"""


class Zygote:
    """One per test process, started on first use; it ends when its stdin closes (the test process ends)."""

    def __init__(self, python: str = sys.executable):
        self.python = python
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.broken = os.environ.get("SPARK_DEPLOY_TEST_NO_ZYGOTE") == "1"

    def _start(self) -> None:
        self.proc = subprocess.Popen([self.python, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None, bufsize=0)

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise OSError(f"the CLI zygote ended (exit {self.proc.poll()})")
        return json.loads(line)

    def run(self, argv: list[str], env: dict, timeout: float,
            cwd: str | None = None) -> subprocess.CompletedProcess | None:
        """Like subprocess.run(capture_output=True, text=True); None when the zygote is busy or broken."""
        if self.broken or not self.lock.acquire(blocking=False):
            return None
        try:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            with tempfile.TemporaryDirectory(prefix="sd-cli-") as tmp:
                out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
                for path in (out, err):
                    open(path, "w").close()
                req = {"argv": argv, "env": env, "cwd": str(cwd or os.getcwd()), "out": out, "err": err}
                try:
                    self.proc.stdin.write((json.dumps(req) + "\n").encode())
                    pid = self._reply()["pid"]
                except (OSError, ValueError):
                    self.broken = True
                    return None
                code = self._wait(pid, timeout, argv, err)
                with open(out, encoding="utf-8", errors="replace") as fh_out, \
                        open(err, encoding="utf-8", errors="replace") as fh_err:
                    return subprocess.CompletedProcess(["spark-deploy", *argv], code, fh_out.read(), fh_err.read())
        finally:
            self.lock.release()

    @staticmethod
    def _stacks(pid: int, err: str) -> str:
        """Where a hung call is: SIGUSR1 makes its faulthandler write every thread's stack to its stderr file.
        On the failure path only, bounded (2 s): read once the file has grown and then stopped growing."""
        before = last = os.path.getsize(err)
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            return ""
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = os.path.getsize(err)
            if before < now == last:
                break
            last = now
        with open(err, encoding="utf-8", errors="replace") as fh:
            return fh.read()[-6000:]

    def _wait(self, pid: int, timeout: float, argv: list[str], err: str) -> int:
        box: dict = {}
        reader = threading.Thread(target=lambda: box.update(self._reply()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            stacks = self._stacks(pid, err)
            try:
                os.killpg(pid, 9)
            except ProcessLookupError:
                pass
            reader.join(30)
            if reader.is_alive():  # the zygote itself is stuck on the child: later calls go without it
                self.broken = True
            raise HungCall(["spark-deploy", *argv], timeout, stacks)
        if "code" not in box:
            self.broken = True
            raise OSError(f"the CLI zygote ended while running spark-deploy {' '.join(argv)}")
        return box["code"]


class HungCall(subprocess.TimeoutExpired):
    """A zygote call killed at its timeout, with the stacks and stderr tail it left (pytest prints str())."""

    def __init__(self, cmd: list[str], timeout: float, stacks: str):
        super().__init__(cmd, timeout, stderr=stacks)
        self.stacks = stacks

    def __str__(self) -> str:
        return f"{super().__str__()}\n--- its stderr and thread stacks at the timeout ---\n{self.stacks}"


ZYGOTE = Zygote()
CLI = [sys.executable, "-c", "from orchestrator.cli.main import run; run()"]


def run_cli(argv, *, env: dict | None = None, cwd=None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`spark-deploy ARGV` as subprocess.run(capture_output=True, text=True) would give it; `env` is the
    whole environment (default: this process's)."""
    argv = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    done = ZYGOTE.run(argv, env, timeout, cwd)
    if done is not None:
        return done
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
