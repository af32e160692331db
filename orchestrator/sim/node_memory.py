#!/usr/bin/python3
"""spark-deploy sim: a DGX Spark's unified memory, as the node's /proc/meminfo shows it while vLLM runs.

Installed in every node image as `sim-memory` and run as a daemon at boot (sim-entrypoint, or
sim-memory.service). On a GB10 the GPU's memory is the system's memory: a running vLLM takes
gpu_memory_utilization x MemTotal plus its runtime's own share, and `free`, earlyoom and the tool all see
MemAvailable fall. The daemon bind-mounts an edited copy of the live /proc/meminfo over it and rewrites
that copy in place whenever what is claimed changes:

- the node's idle figures come from /etc/sim-meminfo.json ({"MemTotal": kB, "MemAvailable": kB,
  "SwapTotal": kB}; a Spark's by default, changed by `sim fault NODE meminfo`);
- a vLLM stand-in claims memory over the abstract unix socket @spark-sim-memory (reachable from a
  `--network host` container: abstract sockets belong to the network namespace) and holds the
  connection while it runs: the claim ends when the process does, however it ends;
- a claim beyond MemAvailable goes to swap; beyond swap too, the kernel's OOM killer SIGKILLs the
  newest claimant after OOM_DELAY_S (the thrash before it acts: earlyoom, which polls, acts first).

Only the standard library: it runs in the node image's python3. Importable, for the unit tests.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time

SOCKET = "\0spark-sim-memory"
SPEC = "/etc/sim-meminfo.json"
COPY = "/run/sim-meminfo"
LIVE = "/proc/meminfo"
KERN_LOG = "/var/log/kern.log"
# A Spark at idle: 119.7 GiB total, about 116 available; a 4 GiB swap file (the sim's choice: with it
# earlyoom's default -m 10 -s 10 spares 0.78, which leaves ~2 GiB, and kills 0.835, as field note 8 saw)
SPARK = {"MemTotal": 125519872, "MemAvailable": 121325568, "SwapTotal": 4194300}
FLOOR_KB = 512 * 1024  # what the kernel keeps free: past it, claims page out to swap
OOM_DELAY_S = 3.0
SHOWN = ("MemTotal", "MemFree", "MemAvailable", "AnonPages", "SwapTotal", "SwapFree", "Committed_AS")


def figures(spec: dict, claimed_kb: int) -> dict:
    """Pure: the node's idle spec and what runs -> the meminfo fields the daemon shows, plus `over_kb`
    (how far the claims exceed memory and swap together: > 0 is where the kernel's OOM killer acts)."""
    total, idle = int(spec["MemTotal"]), int(spec["MemAvailable"])
    swap = int(spec.get("SwapTotal", 0))
    left = idle - claimed_kb
    spill = max(0, min(FLOOR_KB, idle) - left)
    available = max(left, min(FLOOR_KB, idle))
    swap_free = max(0, swap - spill)
    return {"MemTotal": total, "MemAvailable": available, "MemFree": available,
            "AnonPages": total - idle + claimed_kb - spill, "SwapTotal": swap, "SwapFree": swap_free,
            "Committed_AS": total - idle + claimed_kb, "over_kb": max(0, spill - swap)}


def render(template: str, values: dict) -> str:
    """The live file's text with our fields in it, every line the same width (rewritten in place)."""
    out = []
    for line in template.splitlines():
        key = line.split(":", 1)[0]
        out.append("%s:%16d kB" % (key, values[key]) if key in values and key in SHOWN else line)
    return "\n".join(out) + "\n"


def load_spec() -> dict:
    try:
        with open(SPEC) as fh:
            spec = json.load(fh)
    except FileNotFoundError:
        spec = {}
    return {**SPARK, **{k: int(v) for k, v in spec.items() if k in SPARK}}


class Claim:
    def __init__(self, kb: int, pid: int, what: str):
        self.kb, self.pid, self.what, self.at = kb, pid, what, time.monotonic()


class Memory:
    """The node's memory: the spec, the live claims, the file they are shown in."""

    def __init__(self):
        self.lock = threading.Lock()
        self.claims: dict[int, Claim] = {}
        self.spec = load_spec()
        self.template = ""
        self._oom_timer: threading.Timer | None = None

    def mount(self) -> None:
        while subprocess.run(["mountpoint", "-q", LIVE]).returncode == 0:
            subprocess.run(["umount", LIVE], check=True)
        with open(LIVE) as fh:
            self.template = fh.read()
        self._write(create=True)
        subprocess.run(["mount", "--bind", COPY, LIVE], check=True)

    def values(self) -> dict:
        return figures(self.spec, sum(c.kb for c in self.claims.values()))

    def _write(self, create: bool = False) -> None:
        text = render(self.template, self.values()).encode()
        if create:
            tmp = COPY + ".tmp"
            with open(tmp, "wb") as fh:
                fh.write(text)
            os.chmod(tmp, 0o444)
            os.replace(tmp, COPY)
            return
        fd = os.open(COPY, os.O_WRONLY)  # same inode as the bind mount: readers see the new figures
        try:
            os.write(fd, text)
            os.ftruncate(fd, len(text))
        finally:
            os.close(fd)
        if subprocess.run(["mountpoint", "-q", LIVE]).returncode != 0:
            subprocess.run(["mount", "--bind", COPY, LIVE], check=True)  # lost (a reboot's race): again

    def state(self) -> dict:
        return {**self.values(), "claims": [{"kb": c.kb, "pid": c.pid, "what": c.what}
                                            for c in self.claims.values()]}

    def reload(self) -> dict:
        with self.lock:
            self.spec = load_spec()
            self._write()
            return self.state()

    def claim(self, key: int, kb: int, need_free_kb: int, pid: int, what: str) -> dict:
        with self.lock:
            free = self.values()["MemAvailable"]
            if need_free_kb > free:
                return {"ok": False, **self.state()}
            self.claims[key] = Claim(kb, pid, what)
            self._write()
            if self.values()["over_kb"] > 0:
                self._arm_oom()
            return {"ok": True, **self.state()}

    def release(self, key: int) -> None:
        with self.lock:
            if self.claims.pop(key, None) is not None:
                self._write()

    def _arm_oom(self) -> None:
        if self._oom_timer is None or not self._oom_timer.is_alive():
            self._oom_timer = threading.Timer(OOM_DELAY_S, self._oom_kill)
            self._oom_timer.daemon = True
            self._oom_timer.start()

    def _oom_kill(self) -> None:
        with self.lock:
            if self.values()["over_kb"] <= 0 or not self.claims:
                return
            victim = max(self.claims.values(), key=lambda c: c.at)
        try:
            os.kill(victim.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        line = (f"{time.strftime('%b %d %H:%M:%S')} {socket.gethostname()} kernel: Out of memory: Killed "
                f"process {victim.pid} ({victim.what}) total-vm:0kB, anon-rss:{victim.kb}kB\n")
        with open(KERN_LOG, "a") as fh:
            fh.write(line)


MEMORY = Memory()


class Handler(socketserver.StreamRequestHandler):
    """One JSON request per line. `claim` holds its connection: the claim lasts until it closes."""

    def handle(self) -> None:
        for raw in self.rfile:
            try:
                req = json.loads(raw)
                op = req["op"]
            except (ValueError, KeyError, TypeError):
                self._send({"ok": False, "error": "bad request"})
                continue
            if op == "show":
                with MEMORY.lock:
                    self._send(MEMORY.state())
            elif op == "reload":
                self._send(MEMORY.reload())
            elif op == "claim":
                pid = struct.unpack("3i", self.request.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  12))[0]
                key = id(self)
                reply = MEMORY.claim(key, int(req["kb"]), int(req.get("need_free_kb", 0)), pid,
                                     str(req.get("what", "vllm")))
                self._send(reply)
                if reply["ok"]:
                    try:
                        while self.rfile.read(4096):
                            pass
                    finally:
                        MEMORY.release(key)
                return
            else:
                self._send({"ok": False, "error": f"unknown op {op!r}"})

    def _send(self, doc: dict) -> None:
        self.wfile.write((json.dumps(doc) + "\n").encode())
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def ask(doc: dict, timeout: float = 10.0) -> dict:
    """Client side (`sim-memory show|reload`, the faults): one request, one reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(SOCKET)
        sock.sendall((json.dumps(doc) + "\n").encode())
        return json.loads(sock.makefile().readline())


def main(argv: list[str]) -> int:
    if argv == ["serve"]:
        MEMORY.mount()
        server = Server(SOCKET, Handler)
        print("sim-memory: serving", flush=True)
        server.serve_forever()
        return 0
    if argv in (["show"], ["reload"]):
        print(json.dumps(ask({"op": argv[0]}), indent=1))
        return 0
    sys.stderr.write("usage: sim-memory serve|show|reload\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
