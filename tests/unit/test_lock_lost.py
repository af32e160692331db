"""Issue 19: a lost lock stops the operation. The lock's own scripts run for real (bash, on a temp path)
behind a connection stand-in; when a refresh finds the lock is another's, the command's cancel token is
set with the reason (what Ctrl-C would do), so the running steps stop and undo."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from fakes import deployment
from orchestrator.releases.lock import DeployLock
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

    # `spark-deploy lock release --force` elsewhere, then another command takes it
    (tmp_path / "state" / "deploy.lock").write_text('{"token": "someone-else"}')
    assert conn.cancel.wait(5), "the lost lock did not stop the command"
    assert "is no longer this command's" in conn.cancel.reason and "lock release --force" in conn.cancel.reason
    assert lock.lost == conn.cancel.reason and not lock.held
    lock.release()  # not ours: the other holder's lock stays
    assert (tmp_path / "state" / "deploy.lock").read_text() == '{"token": "someone-else"}'
