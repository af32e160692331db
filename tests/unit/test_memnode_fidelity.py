"""The in-memory node is honest: its answers have the shape the real ones have.

- `docker system df` on a fresh node: byte for byte what a simulated node printed (test_disk.SIM_NODE_FRESH,
  docker 20.10.24);
- a container `docker run` by the plan, as inspected: the name, label keys and Args a simulated head showed
  (samples/replaced-sim-head.txt, captured on a simulated node), in fakes.container_inspect's shape;
- the state-dir scripts (lock, its create reading the history under it, release records written in one round
  trip and read, audit, stale secrets, revision resolver): the same stdout as the real script run by real
  bash over the same files.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.checks import model_cache
from orchestrator.deploy import down
from orchestrator.docker_cli import containers
from orchestrator.docker_cli.containers import container_of, parse_inspect
from orchestrator.docker_cli.disk import DISK_COMMAND
from orchestrator.releases import audit, identity, lock, store
from orchestrator.render.plan import build_plan
from orchestrator.transport.node import SSHTarget

from fakes import container_inspect
from memnode import MemoryNode, World, sim_image
from memnode.docker import unknown
from memnode.harness import MemCluster
from test_disk import SIM_NODE_FRESH

SAMPLES = Path(__file__).parent / "samples"


@pytest.fixture
def mem(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # up's per-boot fact cache, not ~/.cache
    return MemCluster(tmp_path)


def conn(mem: MemCluster, node: str = "spark-1") -> MemoryNode:
    inventory = mem.inventory
    return MemoryNode(mem.world, SSHTarget.of(inventory, inventory.node(node))).open()


def test_system_df_is_what_a_fresh_simulated_node_printed(mem):
    image = next(iter(mem.node("spark-1").images.values()))
    image.size = 116_100_000  # the stand-in image of that capture
    assert conn(mem).run(DISK_COMMAND, check=True).stdout == SIM_NODE_FRESH


def test_a_started_head_inspects_like_the_captured_simulated_head(mem):
    name, labels, args = map(json.loads, (SAMPLES / "replaced-sim-head.txt").read_text().splitlines()[0].split("\t"))
    plan = build_plan(mem.dep)
    node = conn(mem)
    container_id = node.run(list(plan.head.argv), check=True).stdout.strip()

    listed = node.run_script(containers._LIST,
                             "--filter", f"name=^/{plan.head.container}$", check=True).stdout
    [found] = parse_inspect(listed)
    raw = found.raw
    assert found.id == container_id and found.name == plan.head.container and raw["Name"].startswith("/")
    assert name.startswith("/")  # (the captured name is the rank-0 name of that day's naming)
    assert set(raw["Config"]["Labels"]) == set(labels)
    assert raw["Path"] == "vllm" and raw["Args"][:2] == args[:2]
    flags = [a for a in raw["Args"] if a.startswith("--")]
    assert flags == [a for a in args if a.startswith("--")]
    shape = container_inspect("x", {})
    assert set(raw) >= set(shape) and set(raw["State"]) == set(shape["State"])
    assert set(raw["Config"]) >= set(shape["Config"])
    assert container_of(raw).running and found.ours.rank == 0


def bash(script: str, *args: str, cwd: Path) -> str:
    return subprocess.run(["bash", "-c", script, "bash", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=10, check=True).stdout


def mirror(node, root: Path) -> None:
    """Write the node's files under `root` (paths kept), for the real script to read."""
    for path, text in node.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def test_state_dir_scripts_print_what_real_bash_prints(tmp_path):
    """Each step runs the real script in a scratch dir and the same constant on the in-memory node."""
    world = World()
    world.add("n", "n.local", "10.0.0.1", (sim_image(),))
    node = world.nodes["n"]
    root = tmp_path / "real"
    root.mkdir()
    fake = MemoryNode(world, SSHTarget("n", "n.local", "u", 22, None, "/dev/null")).open()

    def both(script: str, *args: str, paths: tuple[int, ...] = (0,)) -> tuple[str, str]:
        real_args = [str(root / a.lstrip("/")) if i in paths else a for i, a in enumerate(args)]
        return fake.run_script(script, *args, check=True).stdout, bash(script, *real_args, cwd=root)

    path = "/state/lock/c.json"
    releases = "/state/releases/c"
    details = json.dumps({"token": "abc", "owner": "me"}, sort_keys=True)
    steps = [
        (lock._READ, (path,)),
        (lock._CREATE, (path, details)),
        (lock._CREATE, (path, '{"token": "other"}')),
        (lock._REFRESH, (path, "nope", "{}")),
        (lock._REFRESH, (path, "abc", details)),
        (lock._READ, (path,)),
        (lock._RELEASE, (path, "nope")),
        (lock._RELEASE, (path, "abc")),
        (lock._SET_ASIDE, (path, details, "t1")),
        (store.READ, (releases,)),
        (lock._CREATE, (path, details, store.READ, releases), (0, 3)),  # taken; no history yet: MISSING
        (lock._RELEASE, (path, "abc")),
        (store._WRITE, (f"{releases}/000001.json", json.dumps({"id": 1}) + "\n")),
        (store._WRITE, (f"{releases}/000002.json", json.dumps({"id": 2}) + "\n")),
        (store._WRITE, (f"{releases}/000002.json", json.dumps({"id": 2, "outcome": "failed"}) + "\n")),
        (store.READ, (releases,)),
        (lock._CREATE, (path, details, store.READ, releases), (0, 3)),  # taken, and the history read under it
        (lock._CREATE, (path, '{"token": "other"}', store.READ, releases), (0, 3)),  # held: nothing read
        (audit._APPEND, ("/state/audit/c.jsonl", '{"id": "1"}')),
        (audit._APPEND, ("/state/audit/c.jsonl", '{"id": "2"}')),
        (audit._READ, ("/state/audit/c.jsonl",)),
        (identity._READ, ("/state/cluster.json",)),
        (identity._CREATE, ("/state/cluster.json", '{"id": "c", "token": "t1"}')),
        (identity._CREATE, ("/state/cluster.json", '{"id": "d", "token": "t2"}')),
        (identity._READ, ("/state/cluster.json",)),
    ]
    for script, args, *paths in steps:
        said, real = both(script, *args, paths=paths[0] if paths else (0,))
        assert said == real, (script[:40], args)
    assert said and "DIR" in both(store.READ, releases)[0]
    assert sorted(p.name for p in (root / "state/releases/c").iterdir()) == ["000001.json", "000002.json"]
    for rid in (3, 4):
        node.files[f"{releases}/{rid:06d}.json"] = json.dumps({"id": rid}) + "\n"
    mirror(node, root)
    said, real = both(store.READ, releases)
    assert said == real and said.startswith("DIR\n") and '"outcome": "failed"' in said
    node.files["/secrets/sim-tiny.env"] = "TOKEN=x\n"
    node.files["/secrets/other.env"] = "TOKEN=y\n"
    mirror(node, root)
    said, real = both(down._FORGET, "/secrets", "sim-tiny")
    assert said == real and sorted(p.name for p in (root / "secrets").iterdir()) == ["other.env"]
    assert "/secrets/sim-tiny.env" not in node.files and "/secrets/other.env" in node.files


def test_the_revision_resolver_answers_as_a_real_cache_does(tmp_path):
    world = World()
    node = world.add("n", "n.local", "10.0.0.1")
    fake = MemoryNode(world, SSHTarget("n", "n.local", "u", 22, None, "/dev/null")).open()
    commit = node.commit("sim/tiny-moe", "main")
    repo = tmp_path / "hub" / "models--sim--tiny-moe"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    real = bash(model_cache._RESOLVE, str(tmp_path), "sim/tiny-moe", "main", cwd=tmp_path)
    said = fake.run_script(model_cache._RESOLVE, "/cache", "sim/tiny-moe", "main", check=True).stdout
    assert said == real == f"SNAPSHOT {commit}\n"


def test_an_unknown_command_is_named_not_answered(mem):
    node = conn(mem)
    with pytest.raises(AssertionError, match="docker volume"):
        node.run(["docker", "volume", "ls"])
    with pytest.raises(AssertionError, match="script 'echo hi'"):
        node.run_script("echo hi")
    assert len(mem.world.unknown) == 2
    assert "teach tests/memnode" in str(unknown("x"))


def test_boot_units_of_an_enabled_unit_read_like_the_captured_systemd_node(mem):
    """After `boot enable`, the fact's lines for our unit are the captured simulated systemd node's
    (samples/boot_units_sim_head.txt, systemd 252), but for the names of that day's cluster."""
    from orchestrator.deploy import boot
    from orchestrator.facts.boot import parse_boot_units
    from memnode import connector as memconnector

    mem.up()
    result = boot.enable(mem.dep, mem.events, yes=False, connector=memconnector(mem.world))
    unit = next(u for u in result.units if u.node == "spark-1")
    captured = (SAMPLES / "boot_units_sim_head.txt").read_text()
    captured_unit = "spark-deploy-sim-bootdbg-sim-tiny.service"
    said = mem.node("spark-1").systemd.boot_units(mem.node("spark-1"))[1]

    def ours(text: str, name: str, container: str) -> list[str]:
        lines = [line for line in text.splitlines() if name in line or f" {container} " in line]
        return [line.replace(name, "UNIT").replace(container, "CONTAINER") for line in lines
                if not line.startswith("ExecStartPre=")]

    assert ours(said, unit.name, unit.container) == ours(captured, captured_unit, "sd-sim-tiny-r0")
    parsed = parse_boot_units(said)
    assert [u.started_container() for u in parsed.units if u.ours] == [unit.container]
    assert parsed.engine_enabled


def test_the_facts_driver_frames_a_fact_as_the_real_driver_does():
    """The real facts/core.DRIVER run by real bash over this machine's boot id, and the in-memory
    node holding the same boot id: the same framed bytes (header, stdout, stderr marker)."""
    from orchestrator.facts import boot_cache
    from orchestrator.facts import core as facts

    world = World()
    node = world.add("n", "n.local", "10.0.0.1")
    node.boot_id = Path(boot_cache.BOOT_ID).read_text().strip()
    fake = MemoryNode(world, SSHTarget("n", "n.local", "u", 22, None, "/dev/null")).open()
    spec = facts.FACTS["boot_id"]
    argv = facts.driver_args([spec, spec], None)
    real = bash(facts.DRIVER, *argv, cwd=Path("/"))
    said = fake.run_script(facts.DRIVER, *argv, check=True).stdout
    assert said == real
    assert facts.parse_framed(said, {"boot_id": spec})["boot_id"].value == node.boot_id


def test_the_gpu_fact_prints_what_the_real_script_prints_over_the_captured_nvidia_smi(tmp_path):
    """facts/host.GPU_SCRIPT by real bash with an nvidia-smi that prints the captured GB10 report (and the
    query line), and the in-memory node: the same stdout, with nothing remembered and on the same boot."""
    from orchestrator.facts import boot_cache
    from orchestrator.facts import host as host_facts
    from memnode.facts import GPU_QUERY_LINE, fact_answer

    (tmp_path / "nvidia-smi").write_text(f'#!/bin/sh\nif [ -n "$1" ]; then echo "{GPU_QUERY_LINE}"; '
                                         f'else cat {SAMPLES / "nvidia-smi-gb10-580.126.09.txt"}; fi\n')
    (tmp_path / "nvidia-smi").chmod(0o755)
    world = World()
    node = world.add("n", "n.local", "10.0.0.1")
    node.boot_id = Path(boot_cache.BOOT_ID).read_text().strip()

    def real(*args: str) -> str:
        return subprocess.run(["bash", "-c", host_facts.GPU_SCRIPT, "fact", *args], capture_output=True, text=True,
                              check=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"}).stdout

    for args in (["", ""], [node.boot_id, "CUDA Version: 12.9"], ["00000000-0000-4000-8000-000000000000", "x"]):
        assert fact_answer(node, "gpu", host_facts.GPU_SCRIPT, args)[1] == real(*args), args
