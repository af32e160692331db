"""The mark a running `model pull` copy leaves in the repo's cache dir, read by real bash: a live copy reads
live (pid and start time both match), a dead one's or a reused pid's reads dead and the next copy removes it;
and the judge that names a running pull instead of calling its files an interrupted download's leftovers."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.checks.pull_mark import MARK_PREFIX, PULL_MARK_SH, RunningPull, parse_mark

from fakes import deployment
from orchestrator.checks.verdict import Status
from orchestrator.facts.model import FACT, parse_snapshot
from orchestrator.preflight.checks_model import model_files, model_incomplete, model_shards
from test_preflight_model_parse import _HEADS, PARTIAL, seen


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    return deployment(tmp_path_factory.mktemp("pull-mark-dep"))


def bash(script: str, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["bash", "-c", PULL_MARK_SH + "\n" + script, "bash", *args], capture_output=True,
                          text=True, check=True, timeout=20, env=env).stdout


def test_a_live_copy_reads_live_and_a_dead_or_reused_pid_reads_dead(tmp_path: Path):
    live = subprocess.Popen(["sleep", "30"])
    try:
        start = bash('proc_start "$1"', str(live.pid))
        assert start.isdigit()
        (tmp_path / f"{MARK_PREFIX}{live.pid}").write_text(f"{live.pid} {start} 1700000000 10.0.0.5\n")
        (tmp_path / f"{MARK_PREFIX}1").write_text("1 999999999 1700000001 10.0.0.6\n")  # pid 1, another start
        (tmp_path / f"{MARK_PREFIX}junk").write_text("not a mark\n")
        records = sorted(bash('pull_marks "$1"', str(tmp_path)).splitlines())
    finally:
        live.kill()
        live.wait()
    assert records == ["pull\t1\t1700000001\t10.0.0.6\tdead", f"pull\t{live.pid}\t1700000000\t10.0.0.5\tlive"]
    assert [parse_mark(r.split("\t")[1:]) for r in records] == [
        RunningPull(1, 1700000001, "10.0.0.6", False), RunningPull(live.pid, 1700000000, "10.0.0.5", True)]
    assert bash('pull_marks "$1"', str(tmp_path)).count("dead") == 2, "the ended sleep reads dead too"


def test_a_copy_removes_dead_marks_writes_its_own_and_it_reads_live_while_it_runs(tmp_path: Path):
    (tmp_path / f"{MARK_PREFIX}1").write_text("1 999999999 1700000001 -\n")
    out = bash('m=$(pull_mark "$1"); printf "%s\\n" "$m"; pull_marks "$1"', str(tmp_path),
               env={"PATH": "/usr/bin:/bin", "SSH_CLIENT": "172.18.0.1 53000 22"}).splitlines()
    path, record = out[0], out[1:]
    pid = path.rsplit(".", 1)[1]
    assert path == str(tmp_path / f"{MARK_PREFIX}{pid}") and len(record) == 1, out
    kind, got_pid, since, origin, state = record[0].split("\t")
    assert (kind, got_pid, origin, state) == ("pull", pid, "172.18.0.1", "live")
    assert abs(int(since) - time.time()) < 60
    assert not (tmp_path / f"{MARK_PREFIX}1").exists()


def _with_pulls(base, pulls):
    from dataclasses import replace
    snap = base[FACT].value
    return {FACT: type(base[FACT])(value=replace(snap, pulls=tuple(pulls)))}


def test_a_running_pull_is_named_and_its_files_are_never_called_leftovers(dep):
    s = seen("healthy", "model-incomplete")
    s["spark-2"] = _with_pulls(s["spark-2"], [RunningPull(4242, 1765090800, "172.18.0.1", True)])
    v = model_incomplete(s, dep)
    assert v.cells["spark-2"].status is Status.FAIL
    assert v.cells["spark-2"].value == ("a model pull is copying into this cache now (spark-2 pid 4242, since "
                                        "2025-12-07 07:00:00 UTC, started from 172.18.0.1)")
    assert "wait for it to finish" in v.fix and "delete" not in v.fix and "interrupted" not in v.fix, v.fix
    missing_blob = seen("healthy", "blob-deleted")  # the copy has not linked or fetched everything yet
    missing_blob["spark-2"] = _with_pulls(missing_blob["spark-2"], [RunningPull(4242, 1765090800, "-", True)])
    for judge in (model_files, model_shards):
        fix = judge(missing_blob, dep).fix
        assert fix.startswith("a running `model pull` is copying the model (spark-2 pid 4242") and "delete" not in fix


def test_a_dead_pulls_mark_leaves_the_interrupted_download_advice(dep):
    s = seen("healthy", "model-incomplete")
    s["spark-2"] = _with_pulls(s["spark-2"], [RunningPull(4242, 1765090800, "-", False)])
    v = model_incomplete(s, dep)
    assert v.cells["spark-2"].value == f"partial download: blobs/{PARTIAL} (4096 B)"
    assert "an interrupted download left partial blobs on spark-2" in v.fix


@pytest.mark.parametrize("fields", [["x", "1", "-", "live"], ["1", "2", "-", "maybe"], ["1", "2", "-"]])
def test_parse_mark_refuses_what_is_not_a_mark(fields):
    assert parse_mark(fields) is None


def test_the_snapshot_fact_carries_the_marks():
    snap = parse_snapshot(_HEADS["model-incomplete"] + "pull\t77\t1765090800\t-\tlive\n")
    assert snap.pulls == (RunningPull(77, 1765090800, "-", True),) and snap.running == list(snap.pulls)
    assert parse_snapshot(_HEADS["model-incomplete"]).pulls == ()


def test_the_download_runs_with_its_mark_beside_its_files_and_removes_it_after(tmp_path: Path):
    """model/download.MARKED around the `docker run` of the download: the mark exists (and reads live) while
    the command runs, and is gone when it ends, failed or not."""
    from orchestrator.model.download import MARKED
    root = tmp_path / "hub" / "models--org--m"
    probe = 'out=$1; shift; root=$1; ' + PULL_MARK_SH + '\npull_marks "$root" > "$out"; exit 3'
    res = subprocess.run(["bash", "-c", MARKED, "sdpull", str(root), "bash", "-c", probe, "probe",
                          str(tmp_path / "seen"), str(root)], capture_output=True, text=True, timeout=20)
    assert res.returncode == 3, res.stderr  # the command's own exit code
    seen_marks = (tmp_path / "seen").read_text().splitlines()
    assert len(seen_marks) == 1 and seen_marks[0].startswith("pull\t") and seen_marks[0].endswith("\tlive")
    assert not list(root.glob(f"{MARK_PREFIX}*")), "the mark outlived the download"
