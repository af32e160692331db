"""The shared clusters' reset (issue 17): the condition probe's parser on a real capture, and the loan
logic of tests/shared_clusters.py on a fake cluster whose probe answers from an in-memory node.

Acceptance 3: a test that leaves netem on spark-2 fails (at its own teardown, where the leak happened)
with a message naming the node, the aspect and the qdisc; the next test gets a clean cluster and passes.
A leak that appears after a loan was checked clean (a background thread, a process still dying) makes the
NEXT test fail, naming it; a leak the reset cannot undo replaces the cluster before the next loan.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shared_clusters import ResetFailed, SharedCluster

from orchestrator.sim import faults, faults_host, reset
from orchestrator.sim.condition import (
    DOCKER_TMP,
    FILL_SPEC,
    GPU_FILE,
    MEMINFO_SPEC,
    PROBE_ARGV,
    UNAME_WRAPPER,
    Aspect,
    differences,
    parse,
)
from orchestrator.sim.cluster import ExecResult
from orchestrator.sim.node_probe import CLEARED
from orchestrator.sim.state import NodeInfo

SAMPLE = Path(__file__).parent / "samples" / "sim-probe-docker-init.txt"
NETEM = "eth0: qdisc netem 8001: root refcnt 2 limit 1000 delay 100ms"


def test_the_probe_and_the_faults_name_the_same_files():
    assert (GPU_FILE, FILL_SPEC, DOCKER_TMP) == (faults.GPU_FILE, faults.FILL_SPEC, faults.DOCKER_TMP)
    assert (MEMINFO_SPEC, UNAME_WRAPPER) == (faults_host.MEMINFO_SPEC, faults_host.UNAME_WRAPPER)
    assert set(reset.UNDO) == set(Aspect)


def test_a_real_capture_parses_and_equals_itself():
    cond = parse("spark-1", SAMPLE.read_text())
    assert cond.get(Aspect.DOCKERD) == ("up",) and cond.get(Aspect.SSHD) == ("up",)
    assert cond.get(Aspect.INTERFACES) == ("eth0",) and cond.get(Aspect.MTU) == ("eth0 1500",)
    assert len(cond.get(Aspect.IMAGES)) == 1 and cond.get(Aspect.CONTAINERS) == ()
    assert differences(cond, parse("spark-1", SAMPLE.read_text())) == []


def test_a_leaked_netem_is_a_difference_named_by_node_aspect_and_qdisc():
    base = parse("spark-2", SAMPLE.read_text())
    now = parse("spark-2", SAMPLE.read_text() + f"qdisc\t{NETEM}\n")
    (diff,) = differences(base, now)
    assert diff.aspect is Aspect.QDISC and not diff.aspect.residue
    assert diff.describe() == f"spark-2: qdisc: now {NETEM}"


def test_an_unknown_probe_line_is_an_error_not_ignored():
    with pytest.raises(ValueError):
        parse("spark-1", "bogus\tvalue\n")


# ---- the loan logic, on a fake cluster ----------------------------------------------------------------

class FakeCluster:
    """Nodes as dicts of aspect -> values; the probe is answered from them (the result, not the script);
    the faults the reset uses act on them. `stuck` aspects cannot be undone (the fault does nothing)."""

    made: list[FakeCluster] = []
    state_root: Path

    def __init__(self, name: str, client=None):
        self.name, self.downed, self.stuck = name, False, set()
        self.state_dir = FakeCluster.state_root / name
        self.state: dict[int, dict[str, list[str]]] = {}
        FakeCluster.made.append(self)

    def up(self, nodes, load_image_on, init):
        self.state_dir.mkdir(parents=True)
        (self.state_dir / "inventory.yaml").write_text("nodes: []\n")
        for i in range(1, nodes + 1):
            self.state[i] = {"dockerd": ["up"], "sshd": ["up"], "interfaces": ["eth0"], "mtu": ["eth0 1500"],
                             "images": ["sha256:" + "a" * 64], "gpu": ["3f4a3344b1d7995c"]}

    def nodes(self):
        return [NodeInfo(i, f"spark-{i}", f"sd-sim-{self.name}-{i}", f"10.0.0.{i}") for i in self.state]

    def info(self):
        return {"images": {"vllm": "sha256:" + "a" * 64, "vllm_tags": ["vllm-sim:latest"]}}

    def exec(self, index, argv, check=True):
        if argv[:len(PROBE_ARGV)] == PROBE_ARGV:
            text = self._text(index)
            if len(argv) > len(PROBE_ARGV):  # probe and clear: the residue goes as node_probe.clear does it
                want, node = json.loads(argv[-1]), self.state[index]
                for aspect in ("containers", "state", "jit"):
                    node[aspect] = list(want.get(aspect, []))
                node["images"] = [i for i in node.get("images", []) if i in want["images"]]
                text += CLEARED + "\n" + self._text(index)
            return ExecResult(0, text, "")
        return ExecResult(0, "", "")  # the reset's own scripts (save ssh, restore ssh): nothing to model

    def _text(self, index) -> str:
        return "".join(f"{k}\t{v}\n" for k, vs in self.state[index].items() for v in vs)

    def fault(self, index, kind, **opts):
        node = self.state[index]
        if kind == "heal" and "qdisc" not in self.stuck:
            node.pop("qdisc", None)
            node.pop("routes", None)
        elif kind == "netem":
            node["qdisc"] = [NETEM]
        elif kind == "start-sshd":
            node["sshd"] = ["up"]
        return [f"spark-{index}: {kind}"]

    def down(self):
        self.downed = True


@pytest.fixture
def shared(tmp_path, monkeypatch):
    FakeCluster.made, FakeCluster.state_root = [], tmp_path
    monkeypatch.setattr(reset, "sshd_answers", lambda ip: True)
    return SharedCluster(None, "f", cluster_class=FakeCluster)


def test_a_test_that_leaves_netem_fails_naming_it_and_the_next_test_is_clean(shared):
    with pytest.raises(ResetFailed) as caught:
        with shared.lend("tests/x.py::test_leaks") as cluster:
            cluster.fault(2, "netem", delay=100)
    said = str(caught.value)
    assert "tests/x.py::test_leaks left faults behind" in said and f"spark-2: qdisc: now {NETEM}" in said
    with shared.lend("tests/x.py::test_next") as cluster:  # undone by the reset: the next loan is clean
        assert "qdisc" not in cluster.state[2]
    assert len(FakeCluster.made) == 1  # and it was the same cluster


def test_a_leak_after_the_check_makes_the_next_test_fail_naming_it(shared):
    with shared.lend("tests/x.py::test_a") as cluster:
        pass
    cluster.fault(2, "netem", delay=100)  # e.g. a background thread of test_a, after its loan ended
    with pytest.raises(ResetFailed) as caught:
        with shared.lend("tests/x.py::test_b"):
            pytest.fail("test_b must not run on a dirty cluster")
    said = str(caught.value)
    assert "found before tests/x.py::test_b" in said and "after tests/x.py::test_a" in said
    assert f"spark-2: qdisc: now {NETEM}" in said
    with shared.lend("tests/x.py::test_c") as cluster:  # it was undone on the way
        assert "qdisc" not in cluster.state[2]


def test_a_leak_the_reset_cannot_undo_replaces_the_cluster(shared):
    with pytest.raises(ResetFailed) as caught:
        with shared.lend("tests/x.py::test_breaks") as cluster:
            cluster.stuck.add("qdisc")
            cluster.fault(2, "netem", delay=100)
    assert "could not undo" in str(caught.value) and "made anew" in str(caught.value)
    first = cluster
    with shared.lend("tests/x.py::test_after") as cluster:
        assert cluster is not first and "qdisc" not in cluster.state[2]
    assert first.downed and len(FakeCluster.made) == 2


def test_a_test_that_edits_the_clusters_own_files_fails_and_they_are_put_back(shared):
    with pytest.raises(ResetFailed, match="changed the cluster's own files"):
        with shared.lend("tests/x.py::test_edits") as cluster:
            (cluster.state_dir / "inventory.yaml").write_text("edited\n")
    assert (cluster.state_dir / "inventory.yaml").read_text() == "nodes: []\n"


def test_residue_is_cleared_in_the_probes_own_exec_and_fails_nobody(shared):
    with shared.lend("tests/x.py::test_deploys") as cluster:
        cluster.state[1]["containers"] = ["c0ffee sd-sim-tiny-r0 vllm-sim:latest"]
        cluster.state[2]["state"] = ["/var/lib/spark-deploy/releases"]
        cluster.state[2]["images"].append("sha256:" + "b" * 64)
    with shared.lend("tests/x.py::test_next") as cluster:
        assert "containers" not in cluster.state[1] or cluster.state[1]["containers"] == []
        assert cluster.state[2]["images"] == ["sha256:" + "a" * 64]
