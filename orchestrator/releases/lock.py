"""The deploy lock: one file in the head node's state dir, created atomically, that every mutating
command (`up`, `rollback`, `down`, `prune`, `pin`) holds while it runs.

It says who holds it (user@host, pid, command) and until when; `up` refreshes it while alive. Kamal's
users were blocked for weeks by a lock a cancelled deploy left behind, so a lock is *stale* — reported,
then taken over with a warning and an audit line — when its expiry passed, or when its owner ran on
this very host and that process is gone (pid and process start time both checked: a reused pid is not
the owner).
"""

from __future__ import annotations

import json
import os
import posixpath
import secrets
import socket
import threading
import time
from dataclasses import asdict, dataclass

from ..config.inventory import Inventory
from ..transport.node import NodeConnection
from .keys import cluster_key
from .record import who

# Every change of the lock file (take, set aside, refresh, release) holds flock on "$1.guard" first: a
# refresh checks the token and then replaces the file, and without the guard a lock released by hand and
# taken by another command between the two would be overwritten, leaving two commands holding it. Where
# the guard cannot be had (no flock, an unwritable dir: said by the step itself) the step goes on unguarded.
GUARD = r'''set -u
{ exec 9>>"$1.guard" && flock -w 20 9; } 2>/dev/null || true'''

# "$1" lock path, "$2" our details. Hard-linking a complete temp file is the atomic create: the lock
# appears whole or not at all, and `ln` refuses when it exists. Optionally "$3" a read-only script and
# "$4".. its args, run once the lock is ours, its output after TAKEN: what the holder reads first (the
# release history) comes back in the same round trip, read under the lock.
# A state dir the login user cannot write is said as such (UNWRITABLE and the shell's words), not taken
# for a lock someone holds.
_CREATE = r'''set -u
err=$(mkdir -p -- "$(dirname -- "$1")" 2>&1) || { echo UNWRITABLE; printf '%s\n' "$err"; exit 0; }
tmp="$1.new-$$"
err=$( { printf '%s' "$2" > "$tmp" && sync -- "$tmp"; } 2>&1) || { rm -f -- "$tmp"; echo UNWRITABLE; printf '%s\n' "$err"; exit 0; }
{ exec 9>>"$1.guard" && flock -w 20 9; } 2>/dev/null || true
if ln -- "$tmp" "$1" 2>/dev/null; then
  exec 9>&-
  rm -f -- "$tmp"; echo TAKEN
  if [ $# -gt 2 ]; then s=$3; shift 3; bash -c "$s" then "$@" || echo "@then-failed $?"; fi
  exit 0
fi
rm -f -- "$tmp"; echo HELD; cat -- "$1" 2>/dev/null || true'''

# "$1" lock path, "$2" the stale details we saw, "$3" a token. Moving the lock aside is atomic: of two
# takers only one moves it. If what was moved is not what we judged stale, it goes back untouched.
_SET_ASIDE = GUARD + r'''
aside="$1.stale-$3"
mv -- "$1" "$aside" 2>/dev/null || { echo GONE; exit 0; }
if [ "$(cat -- "$aside")" = "$2" ]; then rm -f -- "$aside"; echo ASIDE; exit 0; fi
ln -- "$aside" "$1" 2>/dev/null; rm -f -- "$aside"; echo CHANGED'''

# "$1" lock path, "$2" our token, "$3" new details: only the holder replaces or removes its lock.
_REFRESH = GUARD + r'''
grep -q -- "\"token\": \"$2\"" "$1" 2>/dev/null || { echo LOST; exit 0; }
printf '%s' "$3" > "$1.refresh-$$" && mv -f -- "$1.refresh-$$" "$1" && echo OK'''
_RELEASE = GUARD + r'''
grep -q -- "\"token\": \"$2\"" "$1" 2>/dev/null || { echo NOT-OURS; exit 0; }
rm -f -- "$1" && echo RELEASED'''
_FORCE = GUARD + r'''
rm -f -- "$1"'''  # `lock release --force`: never between another holder's check and its write
_READ = '[ -f "$1" ] && cat -- "$1" || true'



@dataclass
class LockDetails:
    owner: str  # user@host
    host: str
    pid: int
    pid_start: str  # /proc/<pid>/stat field 22: a reused pid has another start time
    command: list[str]
    started_at: float
    expires_at: float
    token: str
    run_id: str | None = None  # the `up` holding it: what a taker finds orphaned
    release: int | None = None

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> "LockDetails | None":
        try:
            data = json.loads(text)
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})  # a missing field: TypeError
        except (ValueError, TypeError):
            return None

    def since(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))

    def describe(self) -> str:
        return (f"{self.owner} (pid {self.pid}, `{' '.join(self.command)}`) since {self.since()}, expires "
                f"{time.strftime('%H:%M:%S UTC', time.gmtime(self.expires_at))}")


def stale_reason(details: LockDetails | None, now: float | None = None) -> str | None:
    """Why a lock held by someone else may be taken over, or None when its owner may still be working."""
    now = time.time() if now is None else now
    if details is None:
        return "the lock file is unreadable (not written by spark-deploy, or damaged)"
    if details.expires_at < now:
        return f"it expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(details.expires_at))}"
    if details.host == socket.gethostname() and not _alive(details.pid, details.pid_start):
        return f"its owner process {details.pid} on {details.host} is gone"
    return None


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(pid) == start if start else True


def _start_time(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


class LockError(Exception):
    """The deploy lock cannot be taken: held by someone (LockHeld), or its directory is not writable."""


class StateDirUnwritable(LockError):
    def __init__(self, node: str, user: str, path: str, error: str):
        state_dir = posixpath.dirname(posixpath.dirname(path))
        super().__init__(
            f"{node}: cannot write the deploy lock {path} as {user}: {error.strip() or 'permission denied'}. "
            f"spark-deploy keeps its releases, lock and audit log in the state dir {state_dir}, which {user} "
            f"must own: `sudo install -d -o {user} -g {user} {state_dir}` on {node}, or set the node's "
            "state_dir in the inventory to a directory it owns")


class LockHeld(LockError):
    def __init__(self, node: str, details: LockDetails | None, path: str):
        self.details = details
        shown = details.describe() if details else "an unreadable lock"
        super().__init__(f"{node}: another spark-deploy command holds the deploy lock: {shown}. Wait for it, "
                         f"or if you know it is gone: spark-deploy lock release --force ({path})")


def lock_path(inventory: Inventory) -> str:
    return posixpath.join(inventory.node(inventory.head).state_dir, "lock", f"{cluster_key(inventory)}.json")


class DeployLock:
    """Held on the head node; `acquire` raises LockHeld at once when someone else holds a live lock, and
    StateDirUnwritable when the login user cannot write the lock's directory."""

    def __init__(self, conn: NodeConnection, inventory: Inventory, command: list[str], ttl: float,
                 run_id: str | None = None):
        self.conn, self.path, self.ttl = conn, lock_path(inventory), ttl
        self.details = LockDetails(owner=who(), host=socket.gethostname(), pid=os.getpid(),
                                   pid_start=_start_time(os.getpid()), command=command, started_at=time.time(),
                                   expires_at=time.time() + ttl, token=secrets.token_hex(8), run_id=run_id)
        self.taken_over: tuple[LockDetails | None, str] | None = None  # (stale details, why) when we took over
        self.then_output: str | None = None  # what acquire's `then` script printed (None: it did not run)
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self.held = False
        self.lost: str | None = None  # why, once a refresh found the lock taken from us

    def acquire(self, then: tuple[str, ...] = ()) -> "DeployLock":
        """`then` = (script, *args): run on the lock's node right after the lock is taken, in the same
        round trip; its output is `then_output` ("@then-failed CODE" last when it failed)."""
        for _attempt in range(3):
            result = self._script(_CREATE, self.details.to_text(), *then)
            lines = result.stdout.splitlines()
            if lines and lines[0] == "TAKEN":
                self.held = True
                if then:
                    self.then_output = result.stdout.partition("\n")[2]
                return self
            if lines and lines[0] == "UNWRITABLE":
                raise StateDirUnwritable(self.conn.name, self.conn.target.user, self.path, "\n".join(lines[1:]))
            text = "\n".join(lines[1:])
            current = LockDetails.parse(text) if text else None
            if not text:
                continue  # released between our ln and our cat: try again
            why = stale_reason(current)
            if why is None:
                raise LockHeld(self.conn.name, current, self.path)
            aside = self._script(_SET_ASIDE, text, secrets.token_hex(4)).stdout.strip()
            if aside == "ASIDE":
                self.taken_over = (current, why)
            # GONE / CHANGED: someone else moved or refreshed it; look again
        raise LockHeld(self.conn.name, None, self.path)

    def start_refreshing(self, every: float = 30.0) -> None:
        """Push the expiry forward while this command lives (a killed one stops refreshing, so it expires).
        A refresh that finds the lock no longer ours (released by hand, then taken by another command)
        stops this command: its connections' cancel token is set with the reason, as Ctrl-C would, so
        two commands never change the cluster at once."""
        def loop() -> None:
            while not self._stop.wait(every):
                self.details.expires_at = time.time() + self.ttl
                try:
                    said = self._script(_REFRESH, self.details.token, self.details.to_text()).stdout.strip()
                except Exception:  # noqa: BLE001 - a missed refresh only shortens the expiry
                    continue
                if said == "LOST":
                    self.lost = (f"the deploy lock on {self.conn.name} ({self.path}) is no longer this command's: "
                                 "someone released it (`spark-deploy lock release --force`) and it may be another's now")
                    self.held = False
                    cancel = getattr(self.conn, "cancel", None)
                    if cancel is not None:
                        cancel.set(self.lost)
                    return

        self._refresher = threading.Thread(target=loop, name="lock-refresh", daemon=True)
        self._refresher.start()

    def note(self, **changes) -> None:
        """Record more about the holder (its release, its run) in the lock file."""
        for key, value in changes.items():
            setattr(self.details, key, value)
        self._script(_REFRESH, self.details.token, self.details.to_text())

    def release(self) -> None:
        self._stop.set()
        if self.held:
            self._script(_RELEASE, self.details.token)
            self.held = False

    def _script(self, script: str, *args: str):
        return self.conn.run_script(script, self.path, *args, timeout=30, check=True, shield=True)


def read_lock(conn: NodeConnection, inventory: Inventory) -> LockDetails | None | str:
    """The current lock's details; None when no lock; the raw text when it cannot be parsed."""
    text = conn.run_script(_READ, lock_path(inventory), timeout=30, check=True).stdout
    if not text.strip():
        return None
    return LockDetails.parse(text) or text


def force_release(conn: NodeConnection, inventory: Inventory) -> None:
    force_release_at(conn, lock_path(inventory))


def force_release_at(conn: NodeConnection, path: str) -> None:
    conn.run_script(_FORCE, path, timeout=30, check=True)
