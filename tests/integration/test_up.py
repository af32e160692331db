"""`spark-deploy up / status / down` end to end on the simulated cluster (real sshd, dockerd, images)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import pytest


from deploy_helpers import (
    CLI,
    assert_nothing_left,
    image_inspect,
    node_docker,
    plan_names,
    our_containers,
    pinned_id,
    recipe_variant,
    spark_deploy,
)

from orchestrator.sim import fake_model
from orchestrator.sim.state import NODE_USER
import cli_json

pytestmark = pytest.mark.integration


def _running_with_start_times(cluster) -> dict[str, list[str]]:
    """Per node: every running container's ID and StartedAt: a restart or a re-create changes it."""
    found = {}
    for node in (1, 2):
        ids = node_docker(cluster, node, "ps", "-q", "--no-trunc", check=True).stdout.split()
        assert ids, f"nothing runs on node {node}"
        found[node] = sorted(node_docker(cluster, node, "inspect", "--format", "{{.Id}} {{.State.StartedAt}}", *ids,
                                         check=True).stdout.splitlines())
    return found


def test_up_moves_the_image_serves_and_down_removes_everything(bare_peer, tmp_path):
    cluster = bare_peer
    image_id = pinned_id(cluster)
    assert image_inspect(cluster, 1, image_id) is not None
    assert image_inspect(cluster, 2, image_id) is None, "the stand-in image must start on node 1 only"

    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, "--json", env=cache)
    assert result.returncode == 0, result.stderr + result.stdout
    final = cli_json.result(result.stdout)  # the stream's last line: the envelope
    assert final["ok"] is True
    assert {e["name"]: e["status"] for e in final["expectations"]} == {"moe-backend": "ok", "cuda-graph-profile": "ok"}

    for node in (1, 2):
        data = image_inspect(cluster, node, image_id)
        assert data is not None and data["Id"] == image_id
        assert data["RepoDigests"] == []
    names = plan_names(cluster)
    for node, name in names.items():
        config_image = node_docker(cluster, node, "inspect", "--format", "{{.Config.Image}}", name, check=True)
        assert config_image.stdout.strip() == image_id, "containers must start by image ID"

    url = final["endpoint"]
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 5}).encode()
    request = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    assert answer["usage"]["completion_tokens"] == 5

    status = spark_deploy("status", "-i", cluster.inventory_path, "--json")
    assert status.returncode == 0, status.stderr
    report = cli_json.result(status.stdout)
    assert sorted((c["node"], c["rank"], c["state"]) for c in report["containers"]) == [
        ("spark-1", 0, "running"), ("spark-2", 1, "running")]
    assert report["endpoints"][0]["healthy"] and report["endpoints"][0]["models"] == ["tiny"]

    # what only a reboot changes is remembered per node under the boot id the node reported (boot_cache.py)
    boot_id = cluster.exec(1, ["cat", "/proc/sys/kernel/random/boot_id"]).stdout.strip()
    cuda = cluster.exec(1, ["sh", "-c", "nvidia-smi | grep -oE 'CUDA (UMD )?Version: [0-9.]+'"]).stdout.strip()
    [remembered] = (tmp_path / "cache" / "spark-deploy" / "boot-facts").glob("*/spark-1.json")
    entry = json.loads(remembered.read_text())
    assert entry["boot_id"] == boot_id and entry["values"]["gpu_cuda"] == cuda
    # as if read on an earlier boot: the node's boot id differs, so it reads the full report again (the stale
    # line would fail gpu-parity against spark-2) and the entry is replaced
    remembered.write_text(json.dumps({**entry, "boot_id": "00000000-0000-4000-8000-000000000000",
                                      "values": {"gpu_cuda": "CUDA Version: 9.9"}}))

    before = _running_with_start_times(cluster)
    again = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, env=cache)
    assert again.returncode == 0 and "already serving" in again.stdout, again.stdout + again.stderr
    assert _running_with_start_times(cluster) == before, "a second up of the same plan restarted something"
    assert json.loads(remembered.read_text()) == entry

    down = spark_deploy("down", "-i", cluster.inventory_path)
    assert down.returncode == 0, down.stderr
    assert f"spark-2: removed {names[2]}" in down.stdout
    assert down.stdout.index("spark-2") < down.stdout.index("spark-1"), "peers go down before the head"
    assert_nothing_left(cluster)


def _fails(cluster, recipe, *, expect: list[str], extra_args=(), env=None):
    result = spark_deploy("up", recipe, "-i", cluster.inventory_path, *extra_args, env=env)
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    for text in expect:
        assert text in result.stderr, f"{text!r} not in:\n{result.stderr}"
    ours = [line for line in result.stderr.splitlines() if not line.lstrip().startswith("|")]
    assert not any("Traceback" in line for line in ours), "a traceback of ours (not the container's) leaked"
    assert_nothing_left(cluster)
    return result


def test_unknown_vllm_flag_fails_fast_naming_the_head(clean, tmp_path):
    """Past preflight (--skip-check vllm-flags), the head's own parser refusal is caught at once."""
    recipe = recipe_variant(clean, tmp_path / "r.yaml", extra={"bogus-flag": 1})
    _fails(clean, recipe, expect=["spark-1", "unrecognized arguments: --bogus-flag 1", "exited with code 2"],
           extra_args=("--skip-check", "vllm-flags"))


def test_peer_jit_assertion_fails_naming_the_peer(clean, tmp_path):
    recipe = recipe_variant(clean, tmp_path / "r.yaml", env={"SIM_FAULT_JIT_ASSERT": "1"})
    _fails(clean, recipe, expect=["spark-2", "runtime != nullptr", "JIT"])


def test_moe_backend_not_the_expected_one(clean, tmp_path):
    recipe = recipe_variant(clean, tmp_path / "r.yaml", vllm={"moe_backend": "auto"})
    result = _fails(clean, recipe, expect=["log checks", "moe-backend", "expected 'B12X'", "DEEPGEMM_MXFP4"])
    assert "spark-2" in result.stderr


def test_cuda_graph_profile_differing(clean, tmp_path):
    recipe = recipe_variant(clean, tmp_path / "r.yaml", env={"SIM_FAULT_CUDA_GRAPH_RANK": "1"})
    _fails(clean, recipe, expect=["cuda-graph-profile", "nodes disagree", "spark-1:", "spark-2:"])


def test_enforce_eager_makes_the_profile_check_not_applicable(clean, tmp_path):
    recipe = recipe_variant(clean, tmp_path / "r.yaml", vllm={"enforce_eager": True})
    result = spark_deploy("up", recipe, "-i", clean.inventory_path, "--json")
    assert result.returncode == 0, result.stderr
    final = cli_json.result(result.stdout)
    assert {e["name"]: e["status"] for e in final["expectations"]}["cuda-graph-profile"] == "not applicable"


def test_shared_jit_directory_is_caught_before_launch(clean):
    try:
        clean.fault(1, "shared-jit")
        clean.fault(2, "shared-jit")
        result = _fails(clean, clean.recipe_path, expect=["preflight", "jit-cache", "shared with"])
        assert "head" not in [line.split()[1] for line in result.stdout.splitlines() if line.startswith("→")]
    finally:
        clean.fault(1, "local-jit")
        clean.fault(2, "local-jit")


def test_node_with_sshd_down(clean):
    try:
        clean.fault(2, "stop-sshd")
        _fails(clean, clean.recipe_path, expect=["connect", "spark-2", "cannot reach"])
    finally:
        clean.fault(2, "start-sshd")


def test_node_with_dockerd_down(clean):
    try:
        clean.fault(2, "stop-dockerd")
        _fails(clean, clean.recipe_path, expect=["preflight", "docker failed", "spark-2"])
    finally:
        clean.fault(2, "start-dockerd")


def test_head_port_taken_by_something_else(clean):
    try:
        clean.fault(1, "occupy-port", port=8000)
        _fails(clean, clean.recipe_path, expect=["ports", "spark-1: 8000", "a process of root", "sudo ss -ltnp"])
    finally:
        clean.fault(1, "free-port", port=8000)


def test_different_image_under_the_same_reference_is_refused_then_synced(clean):
    import_cmd = 'tar -C /etc -cf - hostname | docker import - vllm-sim:latest'
    clean.exec(2, ["sh", "-c", import_cmd])
    try:
        _fails(clean, clean.recipe_path, expect=["image", "different image under the same reference",
                                                          "spark-2", "--sync"])
        impostor = image_inspect(clean, 2, "vllm-sim:latest")
        assert impostor is not None and impostor["Id"] != pinned_id(clean), "refusal must change nothing"
        synced = spark_deploy("up", clean.recipe_path, "-i", clean.inventory_path, "--sync")
        assert synced.returncode == 0, synced.stderr
        assert image_inspect(clean, 2, "vllm-sim:latest")["Id"] == pinned_id(clean)
    finally:
        node_docker(clean, 2, "rm", "-f", plan_names(clean)[2])


def test_ctrl_c_during_the_wait_removes_everything(clean, tmp_path):
    recipe = recipe_variant(clean, tmp_path / "r.yaml", env={"SIM_LOAD_SECONDS": "60"})
    proc = subprocess.Popen([*CLI, "up", str(recipe), "-i", str(clean.inventory_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "phase-start" and event.get("phase") == "ready":
                break
        assert sum(len(v) for v in our_containers(clean).values()) == 2, "both ranks should be running by now"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "ready" in stderr
    assert_nothing_left(clean)


def test_unknown_host_key_is_refused(clean, tmp_path):
    known = clean.known_hosts_path.read_text().splitlines()
    node2 = clean.nodes()[1].ip
    trimmed = tmp_path / "known_hosts"
    trimmed.write_text("\n".join(line for line in known if not line.startswith(node2)) + "\n")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(clean.inventory_path.read_text().replace(str(clean.known_hosts_path), str(trimmed)))
    result = spark_deploy("up", clean.recipe_path, "-i", inventory)
    assert result.returncode == 1
    assert "spark-2" in result.stderr and "not in" in result.stderr and "known_hosts" in result.stderr
    assert_nothing_left(clean)


def test_four_nodes(sim_cluster_factory, tmp_path):
    cluster = sim_cluster_factory(nodes=4)
    result = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    status = cli_json.result(spark_deploy("status", "-i", cluster.inventory_path, "--json").stdout)
    assert sorted(c["rank"] for c in status["containers"]) == [0, 1, 2, 3]
    image_id = pinned_id(cluster)
    assert all(image_inspect(cluster, n, image_id)["Id"] == image_id for n in (1, 2, 3, 4))
    assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0
    assert_nothing_left(cluster)


def test_logs_and_a_half_dead_deployment_is_replaced_not_reported_as_serving(clean):
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    merged = spark_deploy("logs", "-i", cluster.inventory_path, "--tail", "5")
    assert merged.returncode == 0
    prefixes = {line.split("|", 1)[0].strip() for line in merged.stdout.splitlines() if "|" in line}
    assert prefixes == {"spark-1", "spark-2"}
    as_json = cli_json.result(spark_deploy("logs", "-i", cluster.inventory_path, "--tail", "5", "--json").stdout)
    per_node = {n: [l for l in as_json["lines"] if l["node"] == n] for n in ("spark-1", "spark-2")}
    assert all(1 <= len(lines) <= 5 for lines in per_node.values()), per_node  # one container each: --tail 5
    only = spark_deploy("logs", "-i", cluster.inventory_path, "--node", "spark-2")
    assert {line.split("|", 1)[0].strip() for line in only.stdout.splitlines() if "|" in line} == {"spark-2"}
    assert "Profiling CUDA graph memory" in only.stdout
    bad = spark_deploy("logs", "-i", cluster.inventory_path, "--node", "spark-9")
    assert bad.returncode == 2 and "spark-9" in bad.stderr

    node_docker(cluster, 2, "kill", plan_names(cluster)[2], check=True)  # the peer dies; the head stays "up"
    status = spark_deploy("status", "-i", cluster.inventory_path, "--json")
    states = {c["node"]: c["state"] for c in cli_json.result(status.stdout)["containers"]}
    assert states["spark-1"] == "running" and states["spark-2"].startswith("exited")
    again = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
    assert again.returncode == 0, again.stderr
    assert "already serving" not in again.stdout and "will replace" in again.stdout and "rank 1 exited" in again.stdout
    down = spark_deploy("down", "-i", cluster.inventory_path, "--json")  # issue 22: one object, events on stderr
    said = cli_json.result(down.stdout)
    assert down.returncode == 0 and said["ok"] and {r["node"] for r in said["removed"]} == {"spark-1", "spark-2"}


def test_secret_reaches_the_container_by_env_file_only(clean, tmp_path):
    import secrets as pysecrets

    from ruamel.yaml import YAML

    cluster = clean
    recipe = recipe_variant(cluster, tmp_path / "r.yaml")
    yaml = YAML()
    doc = yaml.load(recipe.read_text())
    doc["secrets"] = ["HF_TOKEN"]
    with recipe.open("w") as handle:
        yaml.dump(doc, handle)

    without = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    missing = subprocess.run([*CLI, "up", str(recipe), "-i", str(cluster.inventory_path)], capture_output=True,
                             text=True, timeout=300, env=without)
    # bad input found before any connection (issue 8 item 2): exit 2, the recipe's file:line of the secret
    assert missing.returncode == 2 and "HF_TOKEN is not set" in missing.stderr and f"{recipe}:" in missing.stderr
    assert_nothing_left(cluster)

    token = "hf_" + pysecrets.token_hex(16)
    result = spark_deploy("up", recipe, "-i", cluster.inventory_path, "--json", env={"HF_TOKEN": token})
    assert result.returncode == 0, result.stderr
    assert token not in result.stdout + result.stderr
    for node, name in plan_names(cluster, recipe).items():
        args = node_docker(cluster, node, "inspect", "--format", "{{json .Args}} {{json .Path}}", name, check=True)
        assert token not in args.stdout, "a secret must never be in argv"
        env = node_docker(cluster, node, "inspect", "--format", "{{json .Config.Env}}", name, check=True)
        assert f"HF_TOKEN={token}" in env.stdout, "the container did not get the secret"
        leftover = cluster.exec(node, ["sh", "-c", "cat /var/lib/spark-deploy/secrets/*.env 2>/dev/null; true"])
        assert token not in leftover.stdout, "the env-file must not outlive the launch"
    logs = spark_deploy("logs", "-i", cluster.inventory_path)
    assert token not in logs.stdout


def test_status_names_an_unreachable_node_and_still_reports_the_others(clean):
    try:
        clean.fault(2, "stop-sshd")
        result = spark_deploy("status", "-i", clean.inventory_path, "--json")
        assert result.returncode == 1
        report = cli_json.result(result.stdout)
        assert list(report["unreachable"]) == ["spark-2"] and "cannot reach" in report["unreachable"]["spark-2"]
    finally:
        clean.fault(2, "start-sshd")


def test_image_is_relayed_through_the_controller_when_nodes_cannot_ssh_to_each_other(bare_peer):
    cluster = bare_peer
    trust = f"/home/{NODE_USER}/.ssh/known_hosts"  # the login's: the direct copy runs as that user
    cluster.exec(1, ["mv", trust, trust + ".off"])  # node 1 trusts no peer now
    try:
        result = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
        assert result.returncode == 0, result.stderr
        assert "relayed through this machine" in result.stdout
        image_id = pinned_id(cluster)
        assert image_inspect(cluster, 2, image_id)["Id"] == image_id
        assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0
    finally:
        cluster.exec(1, ["mv", trust + ".off", trust])


def test_pin_writes_the_image_id_keeping_comments(clean, tmp_path):
    from ruamel.yaml import YAML

    recipe = tmp_path / "r.yaml"
    text = clean.recipe_path.read_text()
    doc = YAML(typ="safe").load(text)
    pinned = doc["image"]["id"]
    recipe.write_text("# my notes stay\n" + text.replace(pinned, "null"))
    assert spark_deploy("up", recipe, "-i", clean.inventory_path).returncode == 2, "an unpinned recipe is bad input"

    node_docker(clean, 2, "rmi", "--force", pinned)  # earlier tests in this module may have synced it there
    missing = spark_deploy("pin", recipe, "-i", clean.inventory_path, "--node", "spark-2")
    assert missing.returncode == 1 and "spark-2 has no image vllm-sim:latest" in missing.stderr

    done = spark_deploy("pin", recipe, "-i", clean.inventory_path)
    assert done.returncode == 0, done.stderr
    assert YAML(typ="safe").load(recipe.read_text())["image"]["id"] == pinned
    assert recipe.read_text().startswith("# my notes stay")
    again = spark_deploy("pin", recipe, "-i", clean.inventory_path)
    assert again.returncode == 0 and "already pinned" in again.stdout
    said = cli_json.result(spark_deploy("pin", recipe, "-i", clean.inventory_path, "--json").stdout)  # issue 22
    assert (said["ok"], said["image_id"], said["outcome"], said["node"]) == (True, pinned, "already pinned", "spark-1")

    other = recipe.read_text().replace(pinned, "sha256:" + "0" * 64)
    recipe.write_text(other)
    refused = spark_deploy("pin", recipe, "-i", clean.inventory_path)
    assert refused.returncode == 1 and "--replace" in refused.stderr
    assert recipe.read_text() == other, "a refused pin changes nothing"
    assert spark_deploy("pin", recipe, "-i", clean.inventory_path, "--replace").returncode == 0


def test_model_missing_on_the_peer(clean):
    """Preflight reads each node's HF cache first; past it (--skip-check), the peer's own load fails fast."""
    clean.exec(2, ["mv", "/srv/hf-cache/hub", "/srv/hf-cache/hub.off"])
    try:
        result = _fails(clean, clean.recipe_path, expect=["during preflight", "model-files", "spark-2",
                                                          f"spark-deploy model pull {clean.recipe_path} --revision main"])
        assert "started sd-sim-tiny" not in result.stdout
        skip = [arg for name in ("model-files", "model-shards", "model-incomplete") for arg in ("--skip-check", name)]
        _fails(clean, clean.recipe_path, expect=["spark-2", "exited with code 1", "not in this node's HF cache"],
               extra_args=skip)
        # the fix the message names, inside up: the blobs spark-2 lacks, copied from spark-1 over the fabric
        synced = spark_deploy("up", clean.recipe_path, "-i", clean.inventory_path, "--sync-model")
        assert synced.returncode == 0, synced.stdout + synced.stderr
        assert "5 of 5 blobs to fetch from spark-1" in synced.stdout
        assert f"sim/tiny-moe@main on every node ({fake_model.model_metadata()['total_bytes']} bytes copied from spark-1)" \
            in synced.stdout, synced.stdout
        assert spark_deploy("down", "-i", clean.inventory_path).returncode == 0
    finally:
        clean.exec(2, ["rm", "-rf", "/srv/hf-cache/hub"])
        clean.exec(2, ["mv", "/srv/hf-cache/hub.off", "/srv/hf-cache/hub"])


def test_missing_jit_directory_is_caught_before_launch(clean):
    clean.exec(2, ["mv", "/var/cache/vllm-jit", "/var/cache/vllm-jit.off"])
    try:
        _fails(clean, clean.recipe_path, expect=["preflight", "jit-cache", "spark-2", "missing or not writable",
                                                 "sudo install -d -o USER"])
    finally:
        clean.exec(2, ["mv", "/var/cache/vllm-jit.off", "/var/cache/vllm-jit"])
