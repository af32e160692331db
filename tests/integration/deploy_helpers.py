"""Helpers for the deploy integration tests: run the real CLI, vary the sim recipe, look at the nodes."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from ruamel.yaml import YAML

import cli_zygote
from cli_zygote import run_cli
from orchestrator.sim import fake_model
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.state import NODE_STATE_DIR

_names = itertools.count(1)
CLI = cli_zygote.CLI  # the command line, for tests that start it with Popen (signals, a second command)
MODEL_ROOT = f"{fake_model.HF_CACHE_DIR}/hub/{fake_model.CACHE_DIR_NAME}"  # the sim's model in a node's HF cache


def spark_deploy(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """The real command line, in a process of its own: real exit codes, real stdout/stderr (forked from a
    zygote that has done the imports once: cli_zygote.py). The default timeout is under pytest-timeout's 300 s,
    so a hung call ends as cli_zygote.HungCall, with the thread stacks of the CLI that hung, not with the
    test's own stack only."""
    return run_cli(args, env={**os.environ, "COLUMNS": "200", **(env or {})}, timeout=timeout)


def recipe_variant(cluster: SimCluster, dest: Path, *, env: dict | None = None, extra: dict | None = None,
                   vllm: dict | None = None, nodes: int | None = None, model: dict | None = None,
                   image: dict | None = None, secrets: list[str] | None = None) -> Path:
    """A copy of the cluster's pinned sim recipe with some values changed."""
    yaml = YAML()
    doc = yaml.load(cluster.recipe_path.read_text())
    for section, values in (("model", model), ("image", image)):
        for key, value in (values or {}).items():
            doc[section][key] = value
    for key, value in (env or {}).items():
        doc["env"][key] = value
    for key, value in (extra or {}).items():
        doc["vllm"]["extra"][key] = value
    for key, value in (vllm or {}).items():
        doc["vllm"][key] = value
    if nodes is not None:
        doc["vllm"]["tensor_parallel_size"] = nodes
    if secrets is not None:
        doc["secrets"] = secrets
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


def inventory_variant(cluster: SimCluster, dest: Path, **interconnect) -> str:
    """The cluster's inventory with these interconnect keys changed, written to `dest` (never the original)."""
    yaml = YAML()
    doc = yaml.load(cluster.inventory_path.read_text())
    doc["interconnect"].update(interconnect)
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return str(dest)


def blobs_on(cluster: SimCluster, node: int | str) -> dict[str, int]:
    """name -> size of every file in the sim model's blobs dir on that node (`.incomplete` ones included), as
    the node's own find lists them."""
    out = cluster.exec(node, ["find", f"{MODEL_ROOT}/blobs", "-type", "f", "-printf", "%f %s\n"]).stdout
    return {name: int(size) for name, size in (line.split() for line in out.splitlines())}


def node_docker(cluster: SimCluster, node: int | str, *argv: str, check: bool = False):
    return cluster.exec(node, ["docker", *argv], check=check)


def plan_names(cluster: SimCluster, recipe: str | Path | None = None, inventory: str | None = None) -> dict[int, str]:
    """Node index -> the container name `up` gives that node's rank of the recipe's plan (`sd-RECIPE-rN-HASH8`)."""
    from orchestrator.config.load import load_deployment
    from orchestrator.render.plan import build_plan

    plan = build_plan(load_deployment(str(recipe or cluster.recipe_path), str(inventory or cluster.inventory_path)))
    index = {info.name: info.index for info in cluster.nodes()}
    return {index[l.node.name]: l.container for l in plan.ranks}


def our_containers(cluster: SimCluster) -> dict[str, list[str]]:
    """Every spark-deploy container on every node, running or not."""
    found = {}
    for info in cluster.nodes():
        result = node_docker(cluster, info.index, "ps", "--all", "--format", "{{.Names}}",
                             "--filter", "label=spark-deploy.managed=true")
        found[info.name] = [line for line in result.stdout.splitlines() if line]
    return found


def assert_up_refuses(cluster: SimCluster, recipe: Path | str, check: str, node: str, *texts: str) -> None:
    """`up` stops in its preflight step on this check, naming the node (and the values), and starts nothing."""
    before = our_containers(cluster)
    up = spark_deploy("up", recipe, "-i", cluster.inventory_path, timeout=180)
    said = up.stdout + up.stderr
    assert up.returncode == 1, said
    assert "during preflight" in up.stderr and check in up.stderr and node in up.stderr, said
    for text in texts:
        assert text in said, (text, said)
    assert our_containers(cluster) == before, "up started or removed a container after preflight refused"


def assert_nothing_left(cluster: SimCluster) -> None:
    left = {node: names for node, names in our_containers(cluster).items() if names}
    assert not left, f"containers left behind: {left}"


def image_inspect(cluster: SimCluster, node: int | str, ref: str) -> dict | None:
    result = node_docker(cluster, node, "image", "inspect", ref)
    if result.code != 0:
        return None
    return json.loads(result.stdout)[0]


def pinned_id(cluster: SimCluster) -> str:
    return YAML(typ="safe").load(cluster.recipe_path.read_text())["image"]["id"]


def unique_name() -> str:
    """Cluster names unique per process, so two test runs never collide."""
    return f"d{os.getpid()}x{next(_names)}"


def completion(cluster: SimCluster, port: int = 8000) -> str:
    """One real completion from the head's API (the sim's served model name is `tiny`)."""
    head = cluster.node(1)
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 4}).encode()
    request = urllib.request.Request(f"http://{head.ip}:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["choices"][0]["text"]


# Another stack's unit that comes back on boot (field note 9), and the sudoers drop-in a test may write.
OLD_STACK = """[Unit]
Description=The old vLLM stack (field note 9)
After=docker.service
Requires=docker.service
[Service]
ExecStartPre=-/usr/bin/docker rm -f old-stack
ExecStart=/usr/bin/docker run --rm --name old-stack --entrypoint sleep other/vllm:old infinity
[Install]
WantedBy=multi-user.target
"""
SUDOERS = "/etc/sudoers.d/spark-deploy-test"


def forget_releases(cluster: SimCluster) -> None:
    """No release history, audit or lock on either node: the next release is number 1."""
    for node in (1, 2):
        cluster.exec(node, ["rm", "-rf", f"{NODE_STATE_DIR}/releases", f"{NODE_STATE_DIR}/audit",
                            f"{NODE_STATE_DIR}/lock"])


def wait_for(what: str, probe, timeout: float, every: float = 1.0):
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - not ready yet; the last cause is reported
            last = exc
        time.sleep(every)
    pytest.fail(f"{what} not within {timeout:.0f} s (last: {last!r})")
