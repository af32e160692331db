"""Issue 7 on the simulated cluster: plan identity, containers tracked by label and ID, nothing serving lost.

- an inventory change on the peer alone redeploys; a description-only edit does not;
- a foreign container holding our name survives a failed `up` untouched;
- a `docker rm` that fails makes `down` exit 1 naming the node and the container;
- the previous deployment keeps serving through the whole image phase of the next `up`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.request

import pytest
from ruamel.yaml import YAML


from deploy_helpers import CLI, assert_nothing_left, node_docker, plan_names, spark_deploy

pytestmark = pytest.mark.integration


def _yaml_edit(src, dest, edit):
    yaml = YAML()
    doc = yaml.load(src.read_text())
    edit(doc)
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


def _plan_labels(cluster) -> dict[str, tuple[str, str]]:
    """node -> (container ID, plan-hash label) of the running spark-deploy containers."""
    found = {}
    for node in ("spark-1", "spark-2"):
        out = node_docker(cluster, node, "ps", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                          "--format", '{{.ID}} {{.Label "spark-deploy.plan-hash"}}', check=True).stdout.split()
        found[node] = tuple(out)
    return found


def _completes(cluster) -> bool:
    url = f"http://{cluster.nodes()[0].ip}:8000/v1/completions"
    body = json.dumps({"model": "tiny", "prompt": "still there?", "max_tokens": 2}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200 and bool(json.loads(response.read())["choices"])
    except OSError:
        return False


def test_peer_only_inventory_change_redeploys_and_a_description_edit_does_not(clean, tmp_path):
    cluster = clean
    first = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
    assert first.returncode == 0, first.stderr
    before = _plan_labels(cluster)

    described = _yaml_edit(cluster.recipe_path, tmp_path / "described.yaml",
                           lambda d: d.__setitem__("description", "only the words changed"))
    same = spark_deploy("up", described, "-i", cluster.inventory_path)
    assert same.returncode == 0 and "already serving" in same.stdout, same.stdout + same.stderr
    assert _plan_labels(cluster) == before

    def peer_env(doc):
        peer = next(n for n in doc["nodes"] if n["name"] == "spark-2")
        peer.setdefault("env", {})["NCCL_DEBUG"] = "INFO"

    inventory = _yaml_edit(cluster.inventory_path, tmp_path / "inventory.yaml", peer_env)
    changed = spark_deploy("up", cluster.recipe_path, "-i", inventory)
    assert changed.returncode == 0, changed.stderr + changed.stdout
    assert "already serving" not in changed.stdout
    after = _plan_labels(cluster)
    assert after["spark-1"][1] == after["spark-2"][1] != before["spark-1"][1], "a new plan hash on every rank"
    peer_env_now = node_docker(cluster, 2, "inspect", "--format", "{{json .Config.Env}}", after["spark-2"][0],
                               check=True).stdout
    assert "NCCL_DEBUG=INFO" in json.loads(peer_env_now)


def test_a_foreign_container_with_our_name_survives_a_failed_up(clean):
    cluster = clean
    image = node_docker(cluster, 1, "image", "inspect", "--format", "{{.Id}}", "vllm-sim:latest", check=True).stdout.strip()
    ours = plan_names(cluster)[1]  # the plan's own name for the head's container
    node_docker(cluster, 1, "run", "-d", "--name", ours, "--entrypoint", "sleep", image, "600", check=True)
    try:
        foreign = node_docker(cluster, 1, "inspect", "--format", "{{.Id}} {{.State.Status}}", ours,
                              check=True).stdout.split()
        result = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
        assert result.returncode == 1
        assert "spark-1" in result.stderr and ours in result.stderr and "did not create" in result.stderr
        still = node_docker(cluster, 1, "inspect", "--format", "{{.Id}} {{.State.Status}}", ours,
                            check=True).stdout.split()
        assert still == foreign == [foreign[0], "running"], "the foreign container must be left exactly as it was"
        assert_nothing_left(cluster)
    finally:
        node_docker(cluster, 1, "rm", "-f", ours)


def test_a_failing_docker_rm_makes_down_exit_1_naming_node_and_container(clean):
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    peer_id = _plan_labels(cluster)["spark-2"][0]
    directory = f"/var/lib/docker/containers/{peer_id}"
    cluster.exec(2, ["chattr", "+i", directory])  # the engine can no longer delete the container's directory
    try:
        result = spark_deploy("down", "-i", cluster.inventory_path)
        assert result.returncode == 1, result.stdout + result.stderr
        names = plan_names(cluster)
        assert "spark-2" in result.stderr and names[2] in result.stderr
        assert f"spark-1: removed {names[1]}" in result.stdout, "the reachable head is still removed"
    finally:
        cluster.exec(2, ["chattr", "-i", directory], check=False)
    assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0


def test_the_previous_deployment_serves_through_the_image_phase_of_the_next_up(clean, tmp_path):
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    # A new image only node 1 holds (same layers, one more label): the next `up` must move it to node 2.
    base = node_docker(cluster, 1, "image", "inspect", "--format", "{{.Id}}", "vllm-sim:latest", check=True).stdout.strip()
    cluster.exec(1, ["sh", "-c", f"printf 'FROM {base}\\nLABEL sd-test=v2\\n' | docker build -q -t vllm-sim:v2 -"])
    new_id = node_docker(cluster, 1, "image", "inspect", "--format", "{{.Id}}", "vllm-sim:v2", check=True).stdout.strip()
    recipe = _yaml_edit(cluster.recipe_path, tmp_path / "v2.yaml",
                        lambda d: d["image"].update({"ref": "vllm-sim:v2", "id": new_id}))
    cluster.fault(1, "throttle", rate="200mbit")
    proc = subprocess.Popen([*CLI, "up", str(recipe), "-i", str(cluster.inventory_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probes: list[bool] = []
    in_image = threading.Event()
    image_done = threading.Event()

    def probe() -> None:
        in_image.wait(120)
        while not image_done.is_set():
            probes.append(_completes(cluster))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "phase-start" and event.get("phase") == "image":
                in_image.set()
            if event.get("event") == "phase-end" and event.get("phase") == "image":
                image_done.set()
                assert event["status"] == "ok"
        proc.wait(timeout=300)
    finally:
        image_done.set()
        cluster.fault(1, "heal")
        if proc.poll() is None:
            proc.kill()
    prober.join(30)
    assert proc.returncode == 0, proc.stderr.read()
    assert probes and all(probes), f"the previous deployment stopped serving during the image phase: {probes}"
    assert node_docker(cluster, 2, "image", "inspect", "--format", "{{.Id}}", new_id, check=True).stdout.strip() == new_id



def test_ctrl_c_while_the_previous_deployment_stops_brings_it_back(clean, tmp_path):
    """The interrupt cancels the group call that stops the previous containers; undoing must still be able
    to talk to the nodes (a fresh cancel token) and start them again under their own names."""
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    before = _plan_labels(cluster)
    changed = _yaml_edit(cluster.recipe_path, tmp_path / "changed.yaml",
                         lambda d: d["vllm"].__setitem__("max_model_len", 2048))
    proc = subprocess.Popen([*CLI, "up", str(changed), "-i", str(cluster.inventory_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "phase-start" and event.get("phase") == "stop previous":
                proc.send_signal(signal.SIGINT)
                break
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert _plan_labels(cluster) == before, stderr + "\nthe previous containers must run again, the same ones"
    names = node_docker(cluster, 1, "ps", "--format", "{{.Names}}", check=True).stdout.split()
    assert plan_names(cluster)[1] in names, names
    deadline = time.monotonic() + 60  # restarted containers load again before they serve
    while not _completes(cluster):
        assert time.monotonic() < deadline, "the restored deployment does not serve"
        time.sleep(0.5)
