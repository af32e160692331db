"""Failing partway (issue 19, acceptance 1), the logic: `boot enable`'s journal of changes and their undo,
and where a failed `maintenance begin --stop` leaves the release. The nodes are fakes at the Docker/systemctl
level: an engine holding containers (state, restart policy) and a systemd holding unit files, answering argv."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from orchestrator.deploy import privilege
from orchestrator.deploy.boot_undo import Journal, install, policy_text, turn_off
from orchestrator.docker_cli.containers import container_of
from orchestrator.maintenance.stop import StopOutcome, stop_release
from orchestrator.facts.boot import BootItem, BootMatch, ItemKind
from orchestrator.releases.record import ModelSeen, RankRecord, Release
from orchestrator.render.unit import BootUnit
from orchestrator.runner.events import Events
from orchestrator.transport.group import GroupError
from orchestrator.transport.node import NodeError, NodeUnreachable, Result


@dataclass
class Node:
    """One node: containers (id -> {"state", "policy"}), unit files (path -> text), enabled units; `refuse`
    makes every command whose argv starts with one of these words fail; `unreachable` fails everything."""

    name: str
    containers: dict[str, dict] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    enabled: set[str] = field(default_factory=set)
    refuse: tuple[str, ...] = ()
    unreachable: bool = False
    reloads: int = 0

    def _fail(self, argv, why: str) -> Result:
        return Result(self.name, tuple(argv), 1, "", why)

    def run(self, argv, timeout=None, check=False, **_kw) -> Result:
        argv = list(argv)
        if self.unreachable:
            raise NodeUnreachable(self.name, "the connection dropped")
        if any(argv[:len(w.split())] == w.split() for w in self.refuse):
            result = self._fail(argv, "sudo: a password is required")
        else:
            result = self._answer(argv)
        return result.check() if check else result

    def _answer(self, argv: list[str]) -> Result:
        ok = lambda out="": Result(self.name, tuple(argv), 0, out, "")  # noqa: E731
        if argv[0] == "cat":
            return ok(self.files[argv[-1]]) if argv[-1] in self.files else self._fail(argv, "No such file")
        if argv[:2] == ["rm", "-f"]:
            self.files.pop(argv[-1], None)
            return ok()
        if argv[0] == "systemctl":
            verb, name = argv[1], argv[-1]
            if verb == "is-enabled":
                return ok("enabled\n" if name in self.enabled else "disabled\n")
            if verb == "daemon-reload":
                self.reloads += 1
            elif verb == "enable":
                self.enabled.add(name)
            elif verb == "disable":
                self.enabled.discard(name)
            return ok()
        if argv[:2] == ["docker", "container"] and argv[2] == "inspect":
            c = self.containers[argv[-1]]
            if "--format" in argv:
                name, _, n = c["policy"].partition(":")
                return ok(json.dumps({"Name": name, "MaximumRetryCount": int(n or 0)}))
            return ok(json.dumps([{"Id": argv[-1], "Name": "/x", "State": {"Status": c["state"]}}]))
        if argv[:2] == ["docker", "update"]:
            self.containers[argv[-1]]["policy"] = argv[3]
            return ok()
        if argv[:2] == ["docker", "stop"]:
            self.containers[argv[-1]]["state"] = "exited"
            return ok()
        if argv[:2] == ["docker", "rename"]:
            raise AssertionError("a container is never renamed (its name carries its plan)")
        raise AssertionError(f"no answer for {argv}")

    def put_file(self, path: str, text: str) -> None:
        if self.unreachable:
            raise NodeUnreachable(self.name, "the connection dropped")
        self.files[path] = text


ROOT = privilege.Root("n", "root", ())
UNIT = "spark-deploy-c-tiny.service"
PATH = f"/etc/systemd/system/{UNIT}"


def unit(node: str) -> BootUnit:
    return BootUnit(node=node, name=UNIT, text="[Unit]\nnew\n", container="sd-tiny-r0", plan_hash="p3", release=3)


def test_policy_text_is_what_docker_update_takes():
    assert policy_text({"Name": "", "MaximumRetryCount": 0}) == "no"
    assert policy_text({"Name": "unless-stopped", "MaximumRetryCount": 0}) == "unless-stopped"
    assert policy_text({"Name": "on-failure", "MaximumRetryCount": 3}) == "on-failure:3"


def test_a_failed_install_puts_back_what_it_turned_off_and_removes_a_new_unit():
    n = Node("spark-2", containers={"sd-tiny-r0": {"state": "running", "policy": "on-failure:2"},
                                    "legacy": {"state": "running", "policy": "unless-stopped"}},
             enabled={"old-stack.service"}, refuse=("systemctl daemon-reload",))
    journal = Journal()
    turn_off(n, BootItem(ItemKind.UNIT, "old-stack.service", "x", None, BootMatch.OTHER), ROOT, journal)
    turn_off(n, BootItem(ItemKind.CONTAINER, "legacy", "x", None, BootMatch.OTHER), ROOT, journal)
    assert "old-stack.service" not in n.enabled and n.containers["legacy"]["policy"] == "no"
    with pytest.raises(NodeError, match="password"):
        install(n, unit("spark-2"), ROOT, "/tmp", journal)
    assert PATH in n.files and n.containers["sd-tiny-r0"]["policy"] == "no"  # half done when it failed
    undone, left = journal.roll_back()
    assert left == []
    assert undone == [f"spark-2: container sd-tiny-r0's restart policy on-failure:2 set again", f"spark-2: {PATH} removed",
                      "spark-2: container legacy's restart policy unless-stopped set again",
                      "spark-2: unit old-stack.service enabled again"]
    assert PATH not in n.files and n.reloads == 0  # systemd never read the new file: nothing to reload
    assert n.enabled == {"old-stack.service"}
    assert n.containers["legacy"]["policy"] == "unless-stopped" and n.containers["sd-tiny-r0"]["policy"] == "on-failure:2"


def test_an_earlier_unit_of_ours_is_written_back_and_stays_enabled_and_a_failed_undo_is_named():
    n = Node("spark-1", containers={"sd-tiny-r0": {"state": "running", "policy": "no"}},
             files={PATH: "[Unit]\nearlier\n"}, enabled={UNIT})
    journal = Journal()
    install(n, unit("spark-1"), ROOT, "/tmp", journal)
    assert n.files[PATH] == "[Unit]\nnew\n" and n.reloads == 1
    journal.done("spark-2", "something else", "put back", lambda: (_ for _ in ()).throw(NodeError("spark-2", "gone")))
    undone, left = journal.roll_back()
    assert left == ["spark-2: something else (undo failed: spark-2: gone)"]
    assert f"spark-1: {PATH} written back as it was" in undone
    assert n.files[PATH] == "[Unit]\nearlier\n" and UNIT in n.enabled and n.reloads == 2


# ---- maintenance begin --stop -----------------------------------------------------------------------

class Cluster:
    """`each` runs fn on every node and raises GroupError naming those that failed, as transport does."""

    def __init__(self, *nodes: Node):
        self.nodes = {n.name: n for n in nodes}

    def __getitem__(self, name: str) -> Node:
        return self.nodes[name]

    def each(self, fn, conns):
        results, failures = {}, {}
        for conn in conns:
            try:
                results[conn.name] = fn(conn)
            except Exception as exc:  # noqa: BLE001 - collected, as on_all does
                failures[conn.name] = exc
        if failures:
            raise GroupError(failures, results)
        return results


def _container(cid: str, rank: int, state: str = "running"):
    labels = {"spark-deploy.managed": "true", "spark-deploy.cluster": "c", "spark-deploy.recipe": "tiny",
              "spark-deploy.recipe-hash": "r", "spark-deploy.plan-hash": "p3", "spark-deploy.run": "run",
              "spark-deploy.rank": str(rank), "spark-deploy.world": "2", "spark-deploy.node": "n",
              "spark-deploy.serve-port": "8000", "spark-deploy.master-port": "29500",
              "spark-deploy.served-model": "tiny"}
    return container_of({"Id": cid, "Name": f"/sd-tiny-r{rank}", "State": {"Status": state},
                         "Config": {"Labels": labels}})


RELEASE = Release(id=3, cluster="c", recipe="tiny", recipe_text="", recipe_digest="d", inventory_digest="i",
                  plan_hash="p3", run_id="run", container_run="run", image_id="sha256:x", image_ref="x",
                  ranks=[RankRecord(rank=0, node="spark-1", container="sd-tiny-r0", argv=[]),
                         RankRecord(rank=1, node="spark-2", container="sd-tiny-r1", argv=[])],
                  model=ModelSeen(repo="r", revision="main"), by="me", command=[], started_at=1, updated_at=1)


def _pair(**peer) -> tuple[Cluster, dict]:
    head = Node("spark-1", containers={"h": {"state": "running", "policy": "no"}})
    peer_node = Node("spark-2", containers={"p": {"state": "running", "policy": "no"}}, **peer)
    return Cluster(head, peer_node), {"spark-1": [_container("h", 0)], "spark-2": [_container("p", 1)]}


def test_a_peer_whose_stop_fails_while_its_rank_runs_leaves_the_release_serving_and_nothing_recorded():
    cluster, containers = _pair(refuse=("docker stop",))
    result = stop_release(cluster, "spark-1", RELEASE, containers, {}, Events())
    assert result.outcome is StopOutcome.STILL_SERVING and result.stopped == []
    assert "spark-2" in result.failed and "password" in result.failed["spark-2"]
    assert cluster["spark-1"].containers["h"]["state"] == "running"
    assert "still serves on every node" in result.summary(3)


def test_a_peer_lost_mid_stop_has_the_head_stopped_too_and_every_rank_kept_for_end():
    cluster, containers = _pair(unreachable=True)
    result = stop_release(cluster, "spark-1", RELEASE, containers, {}, Events())
    assert result.outcome is StopOutcome.STOPPED and list(result.failed) == ["spark-2"]
    assert cluster["spark-1"].containers["h"]["state"] == "exited"
    assert sorted(s.node for s in result.stopped) == ["spark-1", "spark-2"]
    assert all(s.kept == s.name for s in result.stopped), "kept under the name it served under"
    assert "once spark-2 answer(s), `spark-deploy maintenance end` brings it back" in result.summary(3)


def test_a_rank_whose_node_was_not_read_stops_nothing():
    cluster, containers = _pair()
    del containers["spark-2"]
    result = stop_release(cluster, "spark-1", RELEASE, containers, {"spark-2": "unreachable: refused"}, Events())
    assert result.outcome is StopOutcome.STILL_SERVING and result.stopped == []
    assert "unreachable: refused" in result.failed["spark-2"]
    assert cluster["spark-1"].containers["h"]["state"] == "running"
