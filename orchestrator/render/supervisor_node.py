"""spark-deploy's group supervisor: the program `supervise enable` installs on the head node, run by systemd.

The nodes have python3, docker and ssh, not spark-deploy, so this file is stdlib only and is copied verbatim;
what it watches comes from a JSON file the tool renders from the release (render/supervisor.py). It watches
every rank's container (local on the head, the peers by node-to-node SSH) and, every `probe_every` ticks, one
real completion. A rank that exits, or an engine that stops generating, gets the WHOLE group restarted in
`up`'s order (survivors stopped peers first, head started, its rendezvous port LISTENs, peers started, one
completion), under the tool's own deploy lock (waited for, never taken from a holder, stale or not), with
backoff and at most `attempts` per `window` seconds. Past the bound every rank is stopped (never half a group)
and the release is marked crash-looped in the state file `spark-deploy status` reads. One audit line per
attempt, in the tool's audit format. It acts only while the release's record on the head says "serving": an
`up`, `rollback` or `down` that replaced or stopped it retires the supervisor at once.

The decisions are pure functions in supervisor_rules.py, installed beside it (unit-tested on the controller);
this file does what they say.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shlex
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field

try:  # in the package (the controller's tests) / beside it on the head (python3 puts its directory first)
    from .supervisor_rules import (RankState, audit_entry, backoff, cause_of, first_down, in_window, lock_text,
                                   may_attempt, parse_state, words)
except ImportError:
    from supervisor_rules import (RankState, audit_entry, backoff, cause_of, first_down, in_window,  # type: ignore
                                  lock_text, may_attempt, parse_state, words)


SETTLE_S = 10.0  # after a rank is seen down, how long the others are looked at before the cause is named

# ---- doing --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def guarded(path: str, wait: float = 20.0):
    """The lock's guard, as the tool's lock scripts hold it (releases/lock.py GUARD: flock on PATH.guard):
    a check of the token and the write after it are one step to every other holder. Unavailable: unguarded."""
    try:
        fd = os.open(path + ".guard", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break  # as `flock -w 20 ... || true`: go on unguarded rather than never act
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


@dataclass
class Supervisor:
    cfg: dict
    attempts: list[float] = field(default_factory=list)
    recoveries: int = 0
    last: dict = field(default_factory=dict)
    token: str = ""
    started: list = field(default_factory=list)  # the ranks this restart started so far
    refreshed: float = 0.0  # monotonic time of the lock's last refresh

    # the nodes
    def run(self, node: str, argv: list[str], timeout: float = 60) -> tuple[int, str]:
        peer = self.cfg["nodes"][node]
        if node != self.cfg["head"]:
            argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(peer["ssh_port"]),
                    f"{peer['user']}@{peer['fabric_ip']}", "--", shlex.join(argv)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, f"{' '.join(argv[:3])} timed out after {timeout:.0f} s"
        return done.returncode, (done.stdout + done.stderr if done.returncode else done.stdout)

    def states(self) -> list[RankState]:
        out = []
        for r in self.cfg["ranks"]:
            code, text = self.run(r["node"], ["docker", "container", "inspect", "--format", "{{json .State}}",
                                              r["container"]])
            out.append(parse_state(r["rank"], r["node"], text, code))
        return out

    def settled(self, states: list[RankState]) -> list[RankState]:
        """A rank is down: look again for up to `settle` seconds while others still run, so the rank that took
        the group down is the one named. Its peer exits 1 at once when the head vanishes, and earlyoom's SIGTERM
        before its SIGKILL lets that peer go first: seen alone at the first look, it would be blamed."""
        deadline = time.monotonic() + self.cfg.get("settle", SETTLE_S)
        while any(s.running for s in states) and time.monotonic() < deadline:
            time.sleep(0.5)  # a bounded re-look, the watch's own cadence
            states = self.states()
        return states

    def cause(self, state: RankState) -> str:
        if state.missing:
            return ""
        code, found = self.run(state.node, ["pgrep", "-a", "-x", "earlyoom"], timeout=20)
        said = ""
        if code == 0:
            _, said = self.run(state.node, ["sh", "-c", "grep -h 'SIGKILL\\|SIGTERM' /var/log/sim-earlyoom.log "
                                            "2>/dev/null | tail -n 1; journalctl -u earlyoom -n 200 --no-pager "
                                            "2>/dev/null | grep 'SIGKILL\\|SIGTERM' | tail -n 1"], timeout=20)
        return cause_of(state, code == 0, said.strip().splitlines()[-1] if said.strip() else "")

    def serving(self) -> str:
        """The release record's outcome on the head ("serving" or why it no longer is)."""
        try:
            with open(self.cfg["record"]) as handle:
                return str(json.load(handle).get("outcome", "unknown"))
        except (OSError, ValueError) as exc:
            return f"its record is unreadable ({exc})"

    def completes(self, timeout: float) -> str:
        """"" when one real completion came back; else what was seen."""
        body = json.dumps({"model": self.cfg["served_model"], "prompt": "hello", "max_tokens": 1}).encode()
        url = f"http://{self.cfg['api_host']}:{self.cfg['serve_port']}/v1/completions"
        try:
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout) as response:
                data = json.loads(response.read())
            return "" if data.get("choices") else f"no choices in {str(data)[:200]}"
        except Exception as exc:  # noqa: BLE001 - the probe's answer is what failed
            return f"the completion probe failed: {exc}"

    # the files on the head
    def write_state(self, status: str, detail: str) -> None:
        path = self.cfg["state_file"]
        data = {"release": self.cfg["release"], "recipe": self.cfg["recipe"], "status": status, "detail": detail,
                "recoveries": self.recoveries, "last": self.last, "at": round(time.time(), 3),
                "attempts": self.cfg["attempts"], "window": self.cfg["window"]}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".new", "w") as handle:
            json.dump(data, handle, sort_keys=True)
        os.replace(path + ".new", path)

    def audit(self, line: dict) -> None:
        text = json.dumps(line, sort_keys=True, separators=(",", ":"))
        for node, info in self.cfg["nodes"].items():
            path = info["audit"]
            code, said = self.run(node, ["sh", "-c", 'mkdir -p -- "$(dirname -- "$1")" && printf "%s\\n" "$2" >> "$1"',
                                         "append", path, text])
            if code:
                print(f"audit line not written on {node}: {said.strip()}", file=sys.stderr, flush=True)

    def take_lock(self) -> str:
        """"" when the lock is ours; else who holds it. Never moves or removes another's lock."""
        path = self.cfg["lock"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.token, self.refreshed = secrets.token_hex(8), time.monotonic()
        tmp = f"{path}.new-{os.getpid()}"
        with open(tmp, "w") as handle:
            handle.write(lock_text(self.cfg, self.token, time.time(), self.cfg["lock_ttl"], os.getpid()))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            with guarded(path):
                os.link(tmp, path)
            return ""
        except FileExistsError:
            try:
                with open(path) as handle:
                    return handle.read()[:500] or "an empty lock file"
            except OSError:
                return "a lock released while read"
        finally:
            os.unlink(tmp)

    def refresh_lock(self, force: bool = False) -> bool:
        """Push the lock's expiry forward (at most every quarter of its life, unless `force`); False when it is
        no longer ours (released by hand and taken by another: this restart must stop acting)."""
        path, now = self.cfg["lock"], time.monotonic()
        if not force and now - self.refreshed < self.cfg["lock_ttl"] / 4:
            return True
        with guarded(path):
            try:
                with open(path) as handle:
                    if f'"token": "{self.token}"' not in handle.read():
                        return False
            except FileNotFoundError:
                return False
            except OSError:
                return True  # unreadable now: a missed refresh only shortens the expiry
            try:
                with open(path + ".refresh", "w") as handle:
                    handle.write(lock_text(self.cfg, self.token, time.time(), self.cfg["lock_ttl"], os.getpid()))
                os.replace(path + ".refresh", path)
                self.refreshed = now
            except OSError:
                pass
        return True

    def release_lock(self) -> None:
        path = self.cfg["lock"]
        with guarded(path):
            try:
                with open(path) as handle:
                    if f'"token": "{self.token}"' in handle.read():
                        os.unlink(path)
            except OSError:
                pass

    # the group
    def stop_all(self) -> None:
        """Every rank stopped, peers first, the head last: never half a group."""
        for r in sorted(self.cfg["ranks"], key=lambda r: r["rank"] == 0):
            self.run(r["node"], ["docker", "stop", "--time", str(self.cfg["stop_seconds"]), r["container"]],
                     timeout=self.cfg["stop_seconds"] + 60)

    def wait(self, what: str, ready, timeout: float) -> str:
        """Poll `ready()` (an event: a port that listens, a completion) while every started rank runs."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.refresh_lock():
                return "the deploy lock is no longer the supervisor's (released by hand?): it stopped acting"
            if ready():
                return ""
            gone = self.rank_exited_started()
            if gone:
                return gone
            if time.monotonic() >= deadline:
                return f"{what} not within {timeout:.0f} s"
            time.sleep(self.cfg["poll"])

    def rank_exited_started(self) -> str:
        for r in self.started:
            code, text = self.run(r["node"], ["docker", "container", "inspect", "--format", "{{json .State}}",
                                              r["container"]])
            s = parse_state(r["rank"], r["node"], text, code)
            if not s.running:
                return words(s, "") + " during the restart"
        return ""

    def listens(self) -> bool:
        """The head's rendezvous port LISTENING, as `up` asks (`ss`): never a connection the engine would take
        for a peer's."""
        code, out = self.run(self.cfg["head"], ["ss", "-Hltn", f"sport = :{self.cfg['master_port']}"], timeout=10)
        return code == 0 and bool(out.strip())

    def restart_group(self) -> str:
        """`up`'s order; "" when the group serves again, else why not (every rank then stopped)."""
        self.started = []
        self.refresh_lock(force=True)
        self.stop_all()
        head, *peers = sorted(self.cfg["ranks"], key=lambda r: r["rank"])
        for step in ([head], peers):
            for r in step:
                code, said = self.run(r["node"], ["docker", "start", r["container"]], timeout=120)
                self.started.append(r)
                if code:
                    self.stop_all()
                    return f"docker start of rank {r['rank']} on {r['node']} failed: {said.strip()[:300]}"
            if step == [head]:
                why = self.wait("the head's rendezvous port LISTEN", self.listens, self.cfg["listen_timeout"])
                if why:
                    self.stop_all()
                    return why
        why = self.wait("a completion", lambda: not self.completes(30), self.cfg["ready_timeout"])
        if why:
            self.stop_all()
        return why

    # the loop
    def recover(self, trigger: RankState, cause: str) -> None:
        down_since = trigger.finished_at or time.time()
        said = words(trigger, cause)
        looks = 0  # at a held deploy lock
        while True:
            now = time.time()
            if not may_attempt(self.attempts, now, self.cfg["attempts"], self.cfg["window"]):
                return self.crash_loop(said, cause)
            held = self.take_lock()
            if held:
                looks += 1
                self.write_state("waiting-lock", f"{said}; waiting for the deploy lock (look {looks}), held: {held}")
                time.sleep(self.cfg["lock_poll"])
                continue
            try:
                outcome = self.serving()
                if outcome != "serving":
                    self.write_state("idle", f"release {self.cfg['release']} is {outcome}: not restarted")
                    return
                if trigger.rank >= 0 and all(s.running for s in self.states()) and not self.completes(30):
                    self.write_state("watching", "the group serves again (someone else restarted it)")
                    return
                self.attempts.append(now)
                attempt = len(in_window(self.attempts, now, self.cfg["window"]))
                self.write_state("recovering", f"{said}; attempt {attempt}")
                why = self.restart_group()
                served = time.time()
                fields = {"rank": trigger.rank, "exit_code": trigger.exit_code, "cause": cause,
                          "down_seconds": round(served - down_since, 1), "attempt": attempt}
                if not why:
                    self.recoveries += 1
                    self.last = {**fields, "at": round(served, 3)}
                    self.audit(audit_entry(self.cfg, "ok", f"{said}; group restarted whole, serves again; "
                                                           f"down {served - down_since:.0f} s; attempt {attempt}",
                                           served, **fields))
                    self.write_state("watching", f"recovered: {said}")
                    return
                self.audit(audit_entry(self.cfg, "failed", f"{said}; attempt {attempt} failed: {why}; every rank "
                                                           "stopped", served, **fields))
                said, cause = f"{said}; then {why}", cause or why
                self.last = {**fields, "failed": why}
                if not may_attempt(self.attempts, time.time(), self.cfg["attempts"], self.cfg["window"]):
                    return self.crash_loop(said, why, locked=True)
            finally:
                self.release_lock()
            time.sleep(backoff(attempt, self.cfg["backoff"], self.cfg["backoff_cap"]))

    def crash_loop(self, said: str, cause: str, locked: bool = False) -> None:
        """Past the bound: every rank stopped (under the lock; a holder's own command is left to finish), the
        state file says crash-looped with the last cause, one audit line; the program then ends."""
        held = "" if locked else self.take_lock()
        try:
            if not held:
                self.stop_all()
            n = len(self.attempts)
            detail = (f"release {self.cfg['release']} crash-looped: stopped after {n} restart attempts in "
                      f"{self.cfg['window']:.0f} s; last cause: {cause or said}")
            self.last = {**self.last, "cause": cause or said}
            self.write_state("crash-looped", detail)
            self.audit(audit_entry(self.cfg, "crash-loop", detail, time.time(), attempt=n, cause=cause or said))
        finally:
            if not held and not locked:
                self.release_lock()

    def tick(self, count: int) -> None:
        outcome = self.serving()
        if outcome != "serving":
            self.write_state("idle", f"release {self.cfg['release']} is {outcome}: nothing watched")
            return
        states = self.states()
        seen = first_down(states)
        if seen is not None:
            trigger = first_down(self.settled(states)) or seen  # back up meanwhile: the group still restarts
            return self.recover(trigger, self.cause(trigger))
        if self.cfg["probe_every"] and count % self.cfg["probe_every"] == 0:
            failed = self.completes(self.cfg["probe_timeout"])
            if failed:
                head = RankState(0, self.cfg["head"], True, exit_code=None)
                return self.recover(head, failed)
        self.write_state("watching", f"every rank of release {self.cfg['release']} runs")


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        cfg = json.load(handle)
    sup = Supervisor(cfg)
    print(f"supervising release {cfg['release']} of {cfg['recipe']}: {len(cfg['ranks'])} ranks, every "
          f"{cfg['interval']} s", flush=True)
    count = 0
    while True:
        count += 1
        try:
            sup.tick(count)
        except Exception as exc:  # noqa: BLE001 - said in the journal; the next tick looks again
            print(f"tick failed: {exc!r}", file=sys.stderr, flush=True)
        if _crash_looped(sup):
            return 0
        time.sleep(cfg["interval"])  # the watch cadence, not a readiness wait


def _crash_looped(sup: Supervisor) -> bool:
    try:
        with open(sup.cfg["state_file"]) as handle:
            return json.load(handle).get("status") == "crash-looped"
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
