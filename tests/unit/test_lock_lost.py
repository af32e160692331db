"""Issue 19: a lost lock stops the operation. The lock's own scripts run for real (bash, on a temp path)
behind a connection stand-in; when a refresh finds the lock is another's, the command's cancel token is
set with the reason (what Ctrl-C would do), so the running steps stop and undo."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from fakes import deployment
from orchestrator.releases.lock import DeployLock, force_release_at
from orchestrator.transport.cancel import CancelToken


class LocalConn:
    """run_script as NodeConnection's: bash -c SCRIPT bash ARGS..., here on this machine."""

    name = "spark-1"

    def __init__(self):
        self.cancel = CancelToken()

    def run_script(self, script: str, *args: str, **_kw):
        r = subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, timeout=30)
        return SimpleNamespace(stdout=r.stdout, stderr=r.stderr, code=r.returncode)


def test_a_refresh_that_finds_the_lock_taken_cancels_the_command(tmp_path):
    conn = LocalConn()
    lock = DeployLock(conn, deployment(tmp_path).inventory, ["spark-deploy", "up"], ttl=60)
    lock.path = str(tmp_path / "state" / "deploy.lock")
    lock.acquire()
    lock.start_refreshing(every=0.02)
    assert not conn.cancel.wait(0.1), "a refresh of our own lock must not cancel anything"

    # `spark-deploy lock release --force` elsewhere (its script, guarded like a refresh), then another command
    # takes it: a refresh running meanwhile never puts ours back over theirs
    force_release_at(conn, lock.path)
    other = DeployLock(LocalConn(), deployment(tmp_path).inventory, ["spark-deploy", "rollback"], ttl=60)
    other.path = lock.path
    other.acquire()
    assert conn.cancel.wait(5), "the lost lock did not stop the command"
    assert "is no longer this command's" in conn.cancel.reason and "lock release --force" in conn.cancel.reason
    assert lock.lost == conn.cancel.reason and not lock.held
    theirs = (tmp_path / "state" / "deploy.lock").read_text()
    lock.release()  # not ours: the other holder's lock stays
    assert (tmp_path / "state" / "deploy.lock").read_text() == theirs and other.details.token in theirs


def test_a_refresh_racing_a_forced_release_and_a_new_taker_never_leaves_two_holders(tmp_path):
    """Many rounds of: ours refreshing as fast as it can, the lock forced away and taken by another. Without
    the guard a refresh that checked the token just before the release wrote ours back over the new one."""
    for round_ in range(15):
        conn = LocalConn()
        path = str(tmp_path / f"r{round_}" / "deploy.lock")
        ours = DeployLock(conn, deployment(tmp_path).inventory, ["spark-deploy", "up"], ttl=60)
        ours.path = path
        ours.acquire()
        ours.start_refreshing(every=0.001)
        force_release_at(conn, path)
        other = DeployLock(LocalConn(), deployment(tmp_path).inventory, ["spark-deploy", "rollback"], ttl=60)
        other.path = path
        other.acquire()  # raises when it finds the lock held
        assert conn.cancel.wait(5), "the lost lock did not stop the command"
        ours.release()
        assert other.details.token in open(path).read()
        other.release()
