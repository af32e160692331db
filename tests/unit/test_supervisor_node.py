"""The group supervisor's decisions (render/supervisor_node.py: pure functions and its sequencing over seams),
its rendered config and unit, the state parser `status` reads, and status's crash-loop rule. The whole on the
simulated systemd cluster: tests/integration/test_supervisor.py."""

from __future__ import annotations

import ast
import json
import shutil
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import deployment

from orchestrator.deploy.status import crash_loop
from orchestrator.facts import supervisor as facts
from orchestrator.operation import AuditAction
from orchestrator.render import supervisor_node as node
from orchestrator.render import supervisor_rules as rules
from orchestrator.render.plan import build_plan
from orchestrator.render.supervisor import Bounds, render_files, supervisor_unit_name


# ---- pure decisions --------------------------------------------------------------------------------------

def test_docker_state_parsed_with_exit_code_oom_and_stop_time():
    text = json.dumps({"Running": False, "ExitCode": 137, "OOMKilled": False,
                       "FinishedAt": "2026-12-07T14:00:05.500000000Z"})
    s = rules.parse_state(1, "spark-2", text, 0)
    assert (s.running, s.exit_code, s.oom_killed, s.missing) == (False, 137, False, "")
    assert s.finished_at == pytest.approx(1796652005.5)
    assert rules.parse_state(0, "spark-1", json.dumps({"Running": True, "FinishedAt": rules.NO_TIME}), 0).finished_at is None
    gone = rules.parse_state(1, "spark-2", "Error: No such container: x", 1)
    assert not gone.running and "No such container" in gone.missing


def test_the_rank_that_went_first_is_the_trigger():
    a = rules.RankState(0, "spark-1", False, 1, finished_at=20.0)
    b = rules.RankState(1, "spark-2", False, 137, finished_at=10.0)
    c = rules.RankState(2, "spark-3", True)
    assert rules.first_down([a, b, c]) is b
    assert rules.first_down([c]) is None
    unknown = rules.RankState(0, "spark-1", False, missing="ssh: connect refused")
    assert rules.first_down([unknown, a]) is a  # a known stop before one the node could not say
    killed_later = rules.RankState(0, "spark-1", False, 137, finished_at=30.0)
    assert rules.first_down([killed_later, rules.RankState(1, "spark-2", False, 1, finished_at=29.0)]) is killed_later


def test_causes_named_from_what_the_node_knows():
    killed = rules.RankState(0, "spark-1", False, 137)
    assert rules.cause_of(rules.RankState(0, "spark-1", False, 137, oom_killed=True), True) == rules.OOM_KILLER
    assert rules.cause_of(killed, True, "earlyoom: sending SIGKILL to process 42 \"vllm\"") == \
        'earlyoom (earlyoom: sending SIGKILL to process 42 "vllm")'
    assert rules.cause_of(killed, False) == ""  # no earlyoom on the node: exit 137 says no more
    assert rules.cause_of(rules.RankState(0, "spark-1", False, 1), True) == ""  # an exit, not a kill


def test_attempts_bounded_per_window_with_doubling_backoff():
    assert rules.may_attempt([100.0, 200.0], 250.0, bound=3, window=600)
    assert not rules.may_attempt([100.0, 200.0, 240.0], 250.0, bound=3, window=600)
    assert rules.may_attempt([100.0, 200.0, 240.0], 701.0, bound=3, window=600)  # the first left the window
    assert [rules.backoff(a, 5, 60) for a in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 60]


def test_audit_line_and_lock_in_the_tools_formats():
    from orchestrator.releases.lock import LockDetails

    cfg = {"user": "spark", "head_host": "spark-1", "cluster": "sim", "release": 2}
    line = rules.audit_entry(cfg, "ok", "rank 1 ...", 5.0, rank=1, exit_code=137, down_seconds=12.0, attempt=1)
    assert {"id", "at", "by", "command", "action", "outcome", "release", "detail"} <= set(line)
    assert (line["action"], line["rank"], line["exit_code"], line["attempt"]) == (AuditAction.RECOVER, 1, 137, 1)
    details = LockDetails.parse(rules.lock_text(cfg, "tok", 100.0, 60.0, 42))
    assert details is not None and details.token == "tok" and details.expires_at == 160.0
    assert "supervisor" in details.describe()


# ---- sequencing over its seams (the nodes replaced by records of what was asked) --------------------------

class Seams(node.Supervisor):
    """The supervisor with its node access replaced: a script of rank states, a lock someone may hold, and a
    restart that succeeds or fails as told."""

    def __init__(self, cfg, looks, restarts, holders=()):
        super().__init__(cfg)
        self.looks, self.restarts, self.holders = list(looks), list(restarts), list(holders)
        self.done: list[str] = []
        self.lines: list[dict] = []
        self.state: tuple[str, str] = ("", "")
        self.lock_taken_from: list[str] = []

    def states(self):
        return self.looks.pop(0) if self.looks else [rules.RankState(0, "a", True), rules.RankState(1, "b", True)]

    def cause(self, state):
        return ""

    def serving(self):
        return "serving"

    def completes(self, timeout):
        return ""

    def take_lock(self):
        held = self.holders.pop(0) if self.holders else ""
        self.done.append("lock held by another" if held else "lock taken")
        return held

    def release_lock(self):
        self.done.append("lock released")

    def restart_group(self):
        self.done.append("restart")
        return self.restarts.pop(0)

    def stop_all(self):
        self.done.append("stop all")

    def audit(self, line):
        self.lines.append(line)

    def write_state(self, status, detail):
        self.state = (status, detail)


CFG = {"user": "spark", "head_host": "a", "cluster": "sim", "release": 2, "recipe": "r", "head": "a",
       "attempts": 2, "window": 600.0, "backoff": 1.0, "backoff_cap": 4.0, "lock_poll": 1.0, "probe_every": 0,
       "probe_timeout": 5.0, "settle": 0.0}
DEAD = [rules.RankState(0, "a", True), rules.RankState(1, "b", False, 137, finished_at=1.0)]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(node.time, "sleep", lambda s: None)


def test_a_dead_rank_is_one_recovery_with_one_audit_line():
    sup = Seams(CFG, [DEAD, DEAD], [""])
    sup.tick(1)
    assert sup.done == ["lock taken", "restart", "lock released"]
    (line,) = sup.lines
    assert (line["outcome"], line["rank"], line["exit_code"], line["attempt"]) == ("ok", 1, 137, 1)
    assert sup.state[0] == "watching" and sup.recoveries == 1


def test_a_held_lock_is_waited_for_and_never_taken():
    sup = Seams(CFG, [DEAD, DEAD], [""], holders=["someone's up", "someone's up"])
    sup.tick(1)
    assert sup.done[:2] == ["lock held by another", "lock held by another"]
    assert sup.done[2:] == ["lock taken", "restart", "lock released"]  # only once it was free


def test_a_crash_loop_stops_after_the_bound_and_never_leaves_the_lock():
    sup = Seams(CFG, [DEAD, DEAD, DEAD], ["rank 0 on a exited (exit 1) during the restart"] * 2)
    sup.tick(1)
    assert sup.done == ["lock taken", "restart", "lock released", "lock taken", "restart", "stop all", "lock released"]
    assert [(l["outcome"], l.get("attempt")) for l in sup.lines] == [("failed", 1), ("failed", 2), ("crash-loop", 2)]
    status, detail = sup.state
    assert status == "crash-looped" and "stopped after 2 restart attempts" in detail
    assert "last cause: rank 0 on a exited (exit 1)" in detail


def test_a_release_no_longer_serving_is_never_restarted():
    sup = Seams(CFG, [DEAD], [""])
    sup.serving = lambda: "superseded"
    sup.tick(1)
    assert sup.done == [] and sup.lines == [] and sup.state[0] == "idle"


def test_a_stopped_engine_found_by_the_probe_restarts_the_group():
    sup = Seams({**CFG, "probe_every": 2}, [], [""])
    failures = iter(["the completion probe failed: timed out", "the completion probe failed: timed out"])
    sup.completes = lambda timeout: next(failures, "")
    sup.tick(1)
    assert sup.done == []  # not a probe look
    sup.tick(2)
    assert sup.done == ["lock taken", "restart", "lock released"]
    assert "the completion probe failed" in sup.lines[0]["cause"]


# ---- the files `supervise enable` installs ---------------------------------------------------------------

def test_rendered_config_names_every_rank_port_and_path(tmp_path):
    dep = deployment(tmp_path)
    plan = build_plan(dep)
    files = render_files(plan, dep.inventory, 3, base="/s/sup", record="/s/r.json",
                         lock="/s/lock.json", audit={r.node.name: f"/s/{r.node.name}.jsonl" for r in plan.ranks},
                         bounds=Bounds(attempts=4), containers={plan.ranks[1].node.name: "sd-redeployed"})
    cfg = json.loads(files.config_text)
    assert cfg["release"] == 3 and cfg["attempts"] == 4 and cfg["lock"] == "/s/lock.json"
    assert [r["container"] for r in cfg["ranks"]] == [plan.head.container, "sd-redeployed"]
    assert cfg["master_port"] == plan.head.spec.master_port and cfg["serve_port"] == plan.head.spec.serve_port
    assert set(cfg["nodes"]) == {r.node.name for r in plan.ranks}
    assert files.unit_name == supervisor_unit_name(plan.cluster)
    assert f'ExecStart="/usr/bin/python3" "{files.script_path}" "{files.config_path}"' in files.unit_text
    ast.parse(files.script_text)  # the program as installed, and its rules beside it
    ast.parse(files.rules_text)
    assert files.rules_path == "/s/sup/supervisor_rules.py" and files.script_path == "/s/sup/supervisor.py"


def test_the_program_needs_nothing_but_the_standard_library_and_its_rules():
    imported = set()
    for module in (node, rules):
        tree = ast.parse(Path(module.__file__).read_text())
        imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"supervisor_rules"} <= set(sys.stdlib_module_names), imported


def test_the_installed_pair_runs_from_one_directory_outside_the_package(tmp_path):
    """As on the head: the two files side by side, python3 importing the rules from the script's directory."""
    (tmp_path / "supervisor.py").write_text(Path(node.__file__).read_text())
    (tmp_path / "supervisor_rules.py").write_text(Path(rules.__file__).read_text())
    done = subprocess.run(["python3", "-c", "import runpy, sys; sys.path.insert(0, sys.argv[1]); "
                           "m = runpy.run_path(sys.argv[1] + '/supervisor.py'); print(m['first_down']([]))",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verifies_the_unit(tmp_path):
    dep = deployment(tmp_path)
    plan = build_plan(dep)
    files = render_files(plan, dep.inventory, 1, base=str(tmp_path), record="r", lock="l",
                         audit={r.node.name: "a" for r in plan.ranks}, bounds=Bounds())
    path = tmp_path / files.unit_name
    path.write_text(files.unit_text)
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


# ---- what `status` reads -------------------------------------------------------------------------------

def test_state_parsed_and_said():
    text = "@active\nactive\n@state\n" + json.dumps({"status": "watching", "release": 2, "detail": "recovered",
                                                      "recoveries": 1, "last": {"rank": 1, "exit_code": 137,
                                                                                "down_seconds": 12.3}})
    s = facts.parse(text)
    assert (s.active, s.watch, s.release, s.recoveries) == ("active", facts.Watch.WATCHING, 2, 1)
    assert s.line().endswith("1 recovery, last: rank 1 exit 137, down 12 s")
    assert facts.parse("@active\ninactive\n@state\n").watch is facts.Watch.NONE
    assert facts.parse("@active\n\n@state\n{oops").watch is facts.Watch.UNKNOWN


def test_status_names_a_crash_loop_until_another_release_serves():
    looped = facts.SupervisorState("inactive", facts.Watch.CRASH_LOOPED, 2, "release 2 crash-looped: ...")
    assert crash_loop(looped, None) == "release 2 crash-looped: ..."
    assert crash_loop(looped, 3) == ""  # rolled back: release 3 serves
    assert crash_loop(facts.SupervisorState("active", facts.Watch.WATCHING, 2), None) == ""
    assert crash_loop(None, None) == ""


def test_the_lock_is_the_tools_own_taken_only_when_free_and_refreshed_only_while_ours(tmp_path):
    """The real file operations on a local directory: a held lock is left as it is; ours is refreshed and
    released; one taken from us is reported lost and never removed."""
    lock = tmp_path / "lock" / "sim.json"
    sup = node.Supervisor({**CFG, "lock": str(lock), "lock_ttl": 300.0})
    lock.parent.mkdir()
    lock.write_text('{"token": "someone"}')
    assert "someone" in sup.take_lock() and lock.read_text() == '{"token": "someone"}'
    lock.unlink()
    assert sup.take_lock() == "" and sup.token in lock.read_text()
    assert sup.refresh_lock(force=True) and sup.token in lock.read_text()
    sup.release_lock()
    assert not lock.exists()
    assert sup.take_lock() == ""
    lock.write_text('{"token": "another"}')  # released by hand, taken by another command
    assert sup.refresh_lock(force=True) is False
    sup.release_lock()
    assert lock.read_text() == '{"token": "another"}'


def test_the_supervisors_refresh_holds_the_tools_lock_guard(tmp_path):
    """A refresh checks the token, then replaces the file; while the tool's guard (flock on PATH.guard, as its
    lock scripts take it) is held elsewhere, the refresh waits rather than write between someone's steps."""
    import fcntl
    import threading
    path = str(tmp_path / "deploy.lock")
    held = os.open(path + ".guard", os.O_WRONLY | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    entered = threading.Event()

    def refresh():
        with node.guarded(path, wait=30):
            entered.set()

    worker = threading.Thread(target=refresh)
    worker.start()
    assert not entered.wait(0.3), "the guard was not waited for"
    os.close(held)
    assert entered.wait(10)
    worker.join()


def test_the_rank_killed_is_named_even_when_its_peer_is_seen_down_first():
    """earlyoom's SIGTERM, then SIGKILL, on the head: its peer exits 1 at once and is seen alone at the first
    look; the supervisor looks again while the head still runs, and names the killed head."""
    peer_first = [rules.RankState(0, "a", True), rules.RankState(1, "b", False, 1, finished_at=5.0)]
    both = [rules.RankState(0, "a", False, 137, finished_at=6.0), rules.RankState(1, "b", False, 1, finished_at=5.0)]
    sup = Seams({**CFG, "settle": 30.0}, [peer_first, both, both], [""])
    sup.tick(1)
    (line,) = sup.lines
    assert (line["rank"], line["exit_code"]) == (0, 137), line
