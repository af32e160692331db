"""`history` and `watch` show the group supervisor's recoveries and a crash loop: the pure summary of its
`recover` audit lines (releases/recoveries.py), the pure rule for a recovery between two samples
(watching/recovery.py), and both commands on an in-memory cluster where the supervisor's own code
(render/supervisor_node.Supervisor, its node access replaced) writes its audit lines and state file."""

from __future__ import annotations

import json
from functools import partial

import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

import cli_json
from orchestrator.cli import release_cmds
from orchestrator.cli.main import app
from orchestrator.deploy.supervise import base_dir
from orchestrator.facts.supervisor import SupervisorState, Watch
from orchestrator.releases.audit import audit_path
from orchestrator.releases.recoveries import of_audit
from orchestrator.render import supervisor_node as node
from orchestrator.render import supervisor_rules as rules
from orchestrator.transport.group import Cluster
from orchestrator.watching import loop, textfile
from orchestrator.watching.model import Engine, Sample, judge
from orchestrator.watching.recovery import since, text
from orchestrator.watching.view import render

from memnode.endpoint import endpoint_at
from memnode.harness import MemCluster
from memnode.node import connector

CFG = {"user": "spark", "head_host": "spark-1", "cluster": "sim", "release": 1, "recipe": "r", "head": "spark-1",
       "attempts": 2, "window": 600.0, "backoff": 0.0, "backoff_cap": 0.0, "lock_poll": 0.0, "probe_every": 0,
       "probe_timeout": 5.0, "settle": 0.0}
DEAD = [rules.RankState(0, "spark-1", True), rules.RankState(1, "spark-2", False, 137, finished_at=1.0)]
EARLYOOM = 'earlyoom (earlyoom: sending SIGKILL to process 42 "vllm")'


def line(outcome: str, release: int, at: float, **extra) -> dict:
    return rules.audit_entry({**CFG, "release": release}, outcome, f"{outcome} detail", at, **extra)


# ---- pure ------------------------------------------------------------------------------------------------

def test_audit_lines_summarised_per_release_newest_last_crash_loop_kept():
    lines = [line("ok", 1, 100.0, rank=1, exit_code=137, cause="", down_seconds=12.0, attempt=1),
             {"id": "x", "at": 150.0, "action": "up", "outcome": "ok", "release": 2},  # not a recovery
             line("ok", 2, 200.0, rank=1, exit_code=137, cause=EARLYOOM, down_seconds=14.4, attempt=1),
             line("failed", 2, 300.0, rank=0, exit_code=1, cause="", down_seconds=30.0, attempt=2),
             line("crash-loop", 2, 310.0, attempt=2, cause="rank 0 exited")]
    got = of_audit(lines)
    assert sorted(got) == [1, 2]
    one, two = got[1], got[2]
    assert (one.recovered, one.failed, one.last_rank, one.last_exit_code, one.crash_loop) == (1, 0, 1, 137, "")
    assert (two.recovered, two.failed, two.last_outcome, two.last_rank, two.last_exit_code) == (1, 1, "failed", 0, 1)
    assert two.crash_loop == "crash-loop detail" and two.crash_loop_at == 310.0
    said = one.text()
    assert said.startswith("1 recovery, last: rank 1 exit 137, down 12 s, 1970-01-01 00:01:40"), said
    assert "1 recovery, 1 failed, last: rank 0 exit 1 [failed], down 30 s" in two.text()
    assert two.text().endswith("; crash loop: crash-loop detail")
    assert of_audit([line("ok", 3, 1.0, rank=1, exit_code=137, cause=EARLYOOM)])[3].text().startswith(
        f"1 recovery, last: rank 1 exit 137 ({EARLYOOM})")
    assert of_audit([]) == {}


def test_a_recovery_between_samples_is_a_count_that_rose_for_the_same_release():
    before = SupervisorState("active", Watch.WATCHING, 2, "", 1, {"rank": 0})
    after = SupervisorState("active", Watch.WATCHING, 2, "", 3,
                            {"rank": 1, "exit_code": 137, "cause": "earlyoom", "down_seconds": 14.4})
    got = since(before, after)
    assert got == {"rank": 1, "exit_code": 137, "cause": "earlyoom", "down_seconds": 14.4, "release": 2, "count": 2}
    assert text(got) == ("the supervisor recovered release 2 during the watch (2 times): rank 1 exit 137 (earlyoom), "
                         "down 14 s")
    assert since(None, after) is None  # the first sample: nothing to compare
    assert since(after, after) is None
    assert since(before, SupervisorState("active", Watch.WATCHING, 3, "", 2, {})) is None  # another release's
    assert since(after, None) is None  # the head was not read


def test_a_crash_loop_of_the_watched_release_is_a_problem_a_recovering_one_a_warning():
    def sample(sup):
        return judge(Sample(0.0, "sim", 2, "r", "p", {}, [], [], Engine(), 4.0, supervisor=sup))

    looped = SupervisorState("inactive", Watch.CRASH_LOOPED, 2, "release 2 crash-looped: stopped after 3 ...")
    assert sample(looped).problems == ["crash loop: release 2 crash-looped: stopped after 3 ..."]
    assert not judge(Sample(0.0, "sim", 3, "r", "p", {}, [], [], Engine(), 4.0, supervisor=looped)).problems
    busy = sample(SupervisorState("active", Watch.RECOVERING, 2, "rank 1 ...; attempt 1"))
    assert busy.ok and busy.warnings == ["the supervisor is recovering release 2: rank 1 ...; attempt 1"]
    assert sample(SupervisorState("active", Watch.WATCHING, 2)).ok and sample(None).ok


# ---- on an in-memory cluster ------------------------------------------------------------------------------

class MemSupervisor(node.Supervisor):
    """The supervisor's own recover / crash-loop code; the nodes are the in-memory world: its audit lines
    appended to every node's audit file, its state file written (as it writes it) onto the head."""

    def __init__(self, mem: MemCluster, tmp_path, looks, restarts):
        super().__init__({**CFG, "cluster": mem.inventory.cluster, "head": mem.inventory.head,
                          "state_file": str(tmp_path / "state.json")})
        self.mem, self.inv, self.looks, self.restarts = mem, mem.inventory, list(looks), list(restarts)

    def states(self):
        return self.looks.pop(0)

    def cause(self, state):
        return EARLYOOM

    def serving(self):
        return "serving"

    def take_lock(self):
        return ""

    def release_lock(self):
        pass

    def restart_group(self):
        return self.restarts.pop(0)

    def stop_all(self):
        pass

    def audit(self, entry):
        for name, n in self.mem.world.nodes.items():
            path = audit_path(self.inv, name)
            n.files[path] = n.files.get(path, "") + json.dumps(entry, sort_keys=True) + "\n"

    def write_state(self, status, detail):
        super().write_state(status, detail)
        with open(self.cfg["state_file"]) as handle:
            self.mem.node(self.inv.head).files[f"{base_dir(self.inv)}/state.json"] = handle.read()


@pytest.fixture
def mem(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    m = MemCluster(tmp_path)
    m.up()
    return m


def history_json(mem, monkeypatch) -> list[dict]:
    monkeypatch.setattr(release_cmds, "Cluster", partial(Cluster, connector=connector(mem.world)))
    result = CliRunner().invoke(app, ["history", "-i", str(mem.dep.inventory_path), "--json"])
    assert result.exit_code == 0, result.output
    return cli_json.result(result.stdout)


def test_history_shows_a_releases_recoveries_and_its_crash_loop(mem, tmp_path, monkeypatch):
    (before,) = history_json(mem, monkeypatch)
    assert before["id"] == 1 and before["recoveries"] is None
    MemSupervisor(mem, tmp_path, [DEAD, DEAD], [""]).tick(1)
    (after,) = history_json(mem, monkeypatch)
    got = after["recoveries"]
    assert (got["recovered"], got["last_rank"], got["last_exit_code"], got["last_cause"]) == (1, 1, 137, EARLYOOM)
    assert got["crash_loop"] == ""
    MemSupervisor(mem, tmp_path, [DEAD, DEAD, DEAD, DEAD], ["rank 1 exited (exit 1) during the restart"] * 2).tick(1)
    (looped,) = history_json(mem, monkeypatch)
    assert looped["recoveries"]["failed"] == 2 and "release 1 crash-looped" in looped["recoveries"]["crash_loop"]
    table = CliRunner().invoke(app, ["history", "-i", str(mem.dep.inventory_path)])
    assert table.exit_code == 0, table.output
    last_column = "".join("".join(row.split("│")[-2].split()) for row in table.stdout.splitlines()
                          if row.count("│") > 2)  # the cell as wrapped, its spaces dropped
    assert last_column.startswith("1recovery,2failed,last:rank1exit137"), last_column
    assert "crashloop:release1crash-looped:stoppedafter2restartattempts" in last_column, last_column


def test_watch_shows_a_recovery_during_the_watch_then_exits_1_on_the_crash_loop(mem, tmp_path):
    sup = MemSupervisor(mem, tmp_path, [DEAD] * 4, ["", "rank 1 exited (exit 1) during the restart"])
    sup.write_state("watching", "every rank of release 1 runs")
    shown: list[Sample] = []

    def show(sample):
        shown.append(sample)
        if len(shown) == 1:
            sup.tick(1)  # between the first and the second sample: one recovery
        elif len(shown) == 2:
            sup.tick(2)  # then the restarts fail past the bound: a crash loop

    last = loop.watch(mem.dep.inventory_path, None, interval=0.01, once=False, textfile_path=None, show=show,
                      stop=lambda: len(shown) >= 5, connector=connector(mem.world), endpoint_at=endpoint_at(mem.world))
    first, second, third = shown
    assert first.recovered is None and first.supervisor.watch is Watch.WATCHING and first.ok
    assert second.recovered is not None and (second.recovered["rank"], second.recovered["exit_code"]) == (1, 137)
    assert second.ok
    said = second.as_dict()
    assert said["recovered"]["cause"] == EARLYOOM and said["supervisor"]["recoveries"] == 1
    json.dumps(said, default=str)  # a --json sample
    from rich.console import Console
    console = Console(width=300, record=True)
    console.print(render(second))
    assert "recovered: the supervisor recovered release 1 during the watch: rank 1 exit 137" in console.export_text()
    assert last is third and third.problems[0].startswith("crash loop: release 1 crash-looped: stopped after 2")
    metrics = {f.name: f.samples[0] for f in text_string_to_metric_families(textfile.render(second))}
    assert metrics["spark_deploy_supervisor_recoveries"].value == 1.0
    assert metrics["spark_deploy_supervisor_recoveries"].labels["release"] == "1"
    assert metrics["spark_deploy_supervisor_crash_looped"].value == 0.0
    looped = {f.name: f.samples[0] for f in text_string_to_metric_families(textfile.render(third))}
    assert looped["spark_deploy_supervisor_crash_looped"].value == 1.0


def test_history_leaves_out_a_column_no_release_has_anything_in(mem, monkeypatch):
    """No gate and no recovery on any release: their columns are not drawn (the table stays readable); the
    identity columns always are."""
    monkeypatch.setattr(release_cmds, "Cluster", partial(Cluster, connector=connector(mem.world)))
    shown = CliRunner().invoke(app, ["history", "-i", str(mem.dep.inventory_path)], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    header = next(line for line in shown.stdout.splitlines() if "release" in line and "outcome" in line)
    assert "recipe" in header and "plan" in header and "gate" not in header and "recoveries" not in header
