"""Issue 21, `model pull` on the shared 2-node sim: blobs copied node to node over the fabric, verified,
only what a node lacks or holds damaged, resumable after Ctrl-C (bytes counted), and the failures named.

The source (spark-1) holds the sim's model as `sim up` installed it; the recipe copy names its commit, so
nothing is downloaded here (the download is tests/unit/test_model_download.py, the real huggingface_hub
client against the Hub stand-in). Every test puts the model back with the sim's own `model-reset`.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections import Counter

import pytest
from ruamel.yaml import YAML

from deploy_helpers import CLI, blobs_on, forget_releases, recipe_variant, spark_deploy
from deploy_helpers import MODEL_ROOT as ROOT
from orchestrator.checks.pull_mark import MARK_PREFIX
from orchestrator.model.download import HUB_WAIT
from orchestrator.sim import fake_model
from orchestrator.sim.hub import HubRepo, HubStandIn
from orchestrator.sim.state import NODE_UID, NODE_USER
import cli_json

pytestmark = pytest.mark.integration

META = fake_model.model_metadata()
BLOBS = {f["blob"]: f["size"] for f in META["files"].values()}
SHARD1 = META["files"]["model-00001-of-00003.safetensors"]["blob"]
SHARD3 = META["files"]["model-00003-of-00003.safetensors"]["blob"]


@pytest.fixture
def recipe(pair, tmp_path):
    """The sim recipe pinned to the model's commit (a branch is refused without --revision)."""
    yield recipe_variant(pair, tmp_path / "recipe.yaml", model={"revision": META["revision"]})
    for node in (1, 2):
        pair.fault(node, "heal")
        pair.exec(node, ["umount", f"{ROOT}/blobs"], check=False)
        pair.fault(node, "model-reset")


def pull(pair, recipe, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), "--json", *extra,
                        timeout=timeout)


def pulled(res) -> dict:
    assert res.returncode == 0, res.stdout + res.stderr
    return cli_json.result(res.stdout)


def verify_blobs(pair, recipe) -> dict:
    res = spark_deploy("preflight", str(recipe), "-i", str(pair.inventory_path), "--verify-blobs", "--only",
                       "model-blobs", "--json", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    return {n: c["status"] for n, c in cli_json.result(res.stdout)["checks"][0]["per_node"].items()}


def test_copies_what_is_missing_or_damaged_then_nothing(pair, recipe):
    pair.exec(2, ["rm", "-rf", "--", ROOT])
    first = pulled(pull(pair, recipe))
    assert first["nodes"]["spark-2"] == {"bytes": META["total_bytes"], "blobs": sorted(BLOBS),
                                         "linked": len(META["files"])}
    assert first["commit"] == META["revision"] and not first["downloaded"]
    assert verify_blobs(pair, recipe) == {"spark-1": "ok", "spark-2": "ok"}

    second = pulled(pull(pair, recipe))  # a second run moves nothing and touches no link
    assert second["bytes"] == 0 and second["nodes"]["spark-2"]["linked"] == 0

    # a shard's snapshot link gone: mended, and said so (not "0 blobs fetched" and nothing else)
    pair.exec(2, ["rm", "--", f"{ROOT}/snapshots/{META['revision']}/model-00002-of-00003.safetensors"])
    mended = pull(pair, recipe)
    assert pulled(mended)["nodes"]["spark-2"] == {"bytes": 0, "blobs": [], "linked": 1}
    shown = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), timeout=120)
    assert "spark-2: 0 blob(s) fetched and verified, 0 bytes; 0 snapshot link(s) made or mended" in shown.stdout, \
        shown.stdout + shown.stderr

    pair.exec(2, ["rm", "--", f"{ROOT}/blobs/{SHARD1}"])
    pair.exec(2, ["bash", "-c", 'printf x | dd of="$1" bs=1 seek=100 conv=notrunc status=none', "bash",
                  f"{ROOT}/blobs/{SHARD3}"])  # same name and size, one byte changed
    again = pulled(pull(pair, recipe))
    assert again["nodes"]["spark-2"] == {"bytes": BLOBS[SHARD1] + BLOBS[SHARD3], "blobs": sorted([SHARD1, SHARD3]),
                                         "linked": 0}
    assert verify_blobs(pair, recipe) == {"spark-1": "ok", "spark-2": "ok"}


def arrived_bytes(pair, node: int) -> int:
    if pair.exec(node, ["test", "-d", f"{ROOT}/blobs"], check=False).code != 0:
        return 0
    return sum(blobs_on(pair, node).values())


def mid_blob(pair, node: int, room: int) -> bool:
    """A blob is arriving on the node with at least 1 KB there and `room` bytes still to come."""
    held = blobs_on(pair, node)
    return any(name.endswith(".incomplete") and size >= 1_000 and BLOBS[name[:-len(".incomplete")]] - size >= room
               for name, size in held.items())


def start_slow_pull(pair, recipe, arrived: int = 20_000, room: int = 0) -> subprocess.Popen:
    """A pull from a spark-1 throttled on the fabric (~12 s for the model), once `arrived` bytes are on
    spark-2 (80 KB: ~2.5 s, a progress line with a rate has been printed) and, with `room`, while a blob is
    arriving with that much of it still to come (at 32 KB/s, 40 KB is over a second: an interrupt sent
    then lands inside that blob, not between two)."""
    pair.fault(1, "throttle", rate="256kbit", net="fabric")
    proc = subprocess.Popen([*CLI, "model", "pull", str(recipe), "-i", str(pair.inventory_path), "--streams", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while arrived_bytes(pair, 2) < arrived or (room and not mid_blob(pair, 2, room)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{arrived} bytes did not arrive on spark-2 within 60 s: {proc.communicate()}")
        time.sleep(0.2)
    return proc


def test_interrupted_copy_resumes_without_resending(pair, recipe):
    pair.exec(2, ["rm", "-rf", "--", ROOT])
    proc = start_slow_pull(pair, recipe, arrived=80_000, room=40_000)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted (Ctrl-C): what had arrived stays as .incomplete" in err, err
    assert re.search(r"spark-2: [\d.]+ of 0\.4 MB, [\d.]+ MB/s, ETA \d+ s", out), out  # progress per node
    arrived = blobs_on(pair, 2)
    partial = [n for n in arrived if n.endswith(".incomplete")]
    assert partial, f"an interrupted copy leaves its partial blob as .incomplete: {arrived}"
    assert not set(arrived) - {*BLOBS, *(b + ".incomplete" for b in BLOBS)}
    pair.fault(1, "heal")
    resumed = pulled(pull(pair, recipe))
    assert resumed["bytes"] == META["total_bytes"] - sum(arrived.values())  # nothing that arrived is sent again
    assert blobs_on(pair, 2) == BLOBS  # no .incomplete left, every blob whole
    assert verify_blobs(pair, recipe) == {"spark-1": "ok", "spark-2": "ok"}


def test_failures_name_the_node_and_leave_no_half_blob(pair, recipe):
    # a full disk on the target: the blobs dir is a 100 KB tmpfs
    pair.exec(2, ["rm", "-rf", "--", ROOT])
    pair.exec(2, ["mkdir", "-p", f"{ROOT}/blobs"])
    pair.exec(2, ["mount", "-t", "tmpfs", "-o", f"size=100k,uid={NODE_UID},gid={NODE_UID}", "tmpfs", f"{ROOT}/blobs"])
    pair.exec(2, ["chown", "-R", f"{NODE_UID}:{NODE_UID}", ROOT])
    full = pull(pair, recipe, "--streams", "1")
    assert full.returncode == 1, full.stdout + full.stderr
    assert "spark-2: " in full.stderr and "No space left on device" in full.stderr, full.stderr
    held = blobs_on(pair, 2)
    assert any(n.endswith(".incomplete") for n in held), held
    whole = {n: size for n, size in held.items() if n in BLOBS}  # under its name only when whole and verified
    assert whole == {n: BLOBS[n] for n in whole}, held
    assert pair.exec(2, ["test", "-e", f"{ROOT}/snapshots/{META['revision']}/config.json"], check=False).code != 0
    pair.exec(2, ["umount", f"{ROOT}/blobs"])

    # spark-2 does not trust spark-1's host key: said before any byte moves, naming both
    trust = f"/home/{NODE_USER}/.ssh/known_hosts"
    pair.exec(2, ["mv", trust, trust + ".off"])
    try:
        untrusted = pull(pair, recipe)
    finally:
        pair.exec(2, ["mv", trust + ".off", trust])
    assert untrusted.returncode == 1 and "spark-2 cannot SSH to spark-1 at " in untrusted.stderr, untrusted.stderr

    # the fabric cut between the nodes mid-copy: bounded, both named, the partial blob not linked
    pair.exec(2, ["rm", "-rf", "--", ROOT])
    proc = start_slow_pull(pair, recipe)
    try:
        pair.fault(2, "partition", net="fabric")
        _, err = proc.communicate(timeout=60)  # ServerAlive: ~6 s of silence ends the stream
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "spark-1 → spark-2" in err and "fabric link from spark-1 to spark-2" in err, err
    assert any(n.endswith(".incomplete") for n in blobs_on(pair, 2))
    assert pair.exec(2, ["test", "-e", f"{ROOT}/snapshots/{META['revision']}"], check=False).code != 0


def test_a_partial_blob_damaged_on_the_target_is_fetched_again_and_a_damaged_source_is_named(pair, recipe):
    """spark-2's own .incomplete of shard 1 starts with other bytes: the resumed blob fails its hash, is fetched
    once more from byte 0, and the pull succeeds in one run. A blob damaged on spark-1 still fails naming spark-1."""
    partial = f"{ROOT}/blobs/{SHARD1}.incomplete"
    pair.exec(2, ["rm", "--", f"{ROOT}/blobs/{SHARD1}"])
    pair.exec(2, ["bash", "-c", 'head -c 4096 /dev/zero > "$1" && chown "$2:$2" "$1"', "bash", partial, str(NODE_UID)])
    res = pull(pair, recipe)
    got = pulled(res)
    assert got["nodes"]["spark-2"] == {"bytes": BLOBS[SHARD1] - 4096 + BLOBS[SHARD1], "blobs": [SHARD1], "linked": 0}
    assert f"spark-2: blob {SHARD1[:16]} resumed from spark-2's partial file hashed to " in res.stderr, res.stderr
    assert "fetching it again from byte 0" in res.stderr and "damaged" not in res.stderr, res.stderr
    assert blobs_on(pair, 2) == BLOBS
    assert verify_blobs(pair, recipe) == {"spark-1": "ok", "spark-2": "ok"}

    # the source's shard 1 changed past the partial spark-2 holds (its own first 4 KB, correct): resumed, fetched
    # from byte 0 again, and still wrong: spark-1 is named, nothing is linked
    pair.exec(2, ["bash", "-c", 'head -c 4096 "$1" > "$2" && rm -- "$1" && chown "$3:$3" "$2"', "bash",
                  f"{ROOT}/blobs/{SHARD1}", partial, str(NODE_UID)])
    pair.exec(1, ["bash", "-c", 'printf x | dd of="$1" bs=1 seek=50000 conv=notrunc status=none', "bash",
                  f"{ROOT}/blobs/{SHARD1}"])
    damaged = pull(pair, recipe)
    assert damaged.returncode == 1, damaged.stdout + damaged.stderr
    assert "fetching it again from byte 0" in damaged.stderr, damaged.stderr
    assert "its bytes on spark-1 are damaged" in damaged.stderr and "run preflight --verify-blobs on spark-1" \
        in damaged.stderr, damaged.stderr
    assert SHARD1 not in blobs_on(pair, 2)


def test_rollback_while_a_pull_is_copying_names_the_pull_and_never_advises_deleting_its_files(pair, recipe, tmp_path):
    """The pull takes no lock: a rollback that meets its .incomplete file is refused naming the running copy
    (node, pid, start) with the advice to wait for it, not as an interrupted download whose files may go."""
    forget_releases(pair)
    for name, vllm in (("a", None), ("b", {"max_model_len": 2048})):
        done = spark_deploy("up", str(recipe_variant(pair, tmp_path / f"{name}.yaml", vllm=vllm)), "-i",
                            str(pair.inventory_path), timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    pair.exec(2, ["rm", "--", f"{ROOT}/blobs/{SHARD3}"])
    pair.fault(1, "throttle", rate="64kbit", net="fabric")  # shard 3's 200 KB: ~25 s
    proc = subprocess.Popen([*CLI, "model", "pull", str(recipe), "-i", str(pair.inventory_path), "--streams", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while f"{SHARD3}.incomplete" not in blobs_on(pair, 2):
            assert proc.poll() is None and time.monotonic() < deadline, "the copy of shard 3 never started"
            time.sleep(0.2)
        mark = pair.exec(2, ["bash", "-c", f'cat "$1"/{MARK_PREFIX}*', "bash", ROOT], check=False).stdout.split()
        refused = spark_deploy("rollback", "1", "-i", str(pair.inventory_path), "--yes", timeout=600)
        assert proc.poll() is None, "the pull ended before the rollback looked: the test proves nothing"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    said = " ".join(refused.stderr.split())
    assert "wait for it to finish" in said and "delete" not in said and "interrupted download" not in said, said
    assert mark and f"a model pull is copying into this cache now (spark-2 pid {mark[0]}, since " in said, said


@pytest.fixture
def hub(pair):
    """The Hub stand-in serving the sim's model as a gated repo, reachable from the nodes at their gateway;
    the nodes hold no copy of the model. What the download adds beside the repo (.locks, CACHEDIR.TAG)
    is removed after."""
    with HubStandIn([HubRepo.fake(token="hf_sim_token")]) as server:
        for node in (1, 2):
            pair.exec(node, ["rm", "-rf", "--", ROOT])
        yield server
    for node in (1, 2):
        pair.exec(node, ["rm", "-rf", "--", f"{fake_model.HF_CACHE_DIR}/hub/.locks",
                         f"{fake_model.HF_CACHE_DIR}/hub/CACHEDIR.TAG"])
        pair.fault(node, "model-reset")


def test_downloads_once_in_the_pinned_image_then_copies(pair, hub, tmp_path):
    """The real huggingface_hub (in the stand-in image) on spark-1 against the Hub stand-in; a branch is
    resolved and pinned in the recipe; the token goes through an env-file, and without it nothing moves."""
    recipe = tmp_path / "branch.yaml"
    recipe.write_text(pair.recipe_path.read_text())  # model.revision: main
    refused = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path))
    assert refused.returncode == 2 and "--revision main" in refused.stderr, refused.stderr

    env = {"HF_ENDPOINT": hub.endpoint(pair.info()["gateway"])}
    gated = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), "--revision", "main",
                         env={**env, "HF_TOKEN": ""})
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert "spark-1: sim/tiny-moe is gated" in gated.stderr, gated.stderr
    assert not [p for (_, p) in hub.requests if "/resolve/" in p]  # refused before any transfer

    res = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), "--revision", "main", "--json",
                       env={**env, "HF_TOKEN": "hf_sim_token"})
    got = pulled(res)
    assert got["downloaded"] and got["recipe_updated"] and got["commit"] == META["revision"]
    assert got["nodes"]["spark-2"]["bytes"] == META["total_bytes"]
    whole = Counter(s.name for s in hub.served if not s.ranged)  # fit reads header ranges, and config.json whole
    assert whole.pop("config.json") == 2 and set(whole.values()) == {1}, whole  # downloaded once, on one node
    config_bytes = next(s.stop - s.start for s in hub.served if s.name == "config.json")
    assert hub.downloaded == META["total_bytes"] + config_bytes
    assert YAML().load(recipe.read_text())["model"]["revision"] == META["revision"]
    assert pair.exec(2, ["cat", f"{ROOT}/refs/main"]).stdout == META["revision"]
    assert verify_blobs(pair, recipe) == {"spark-1": "ok", "spark-2": "ok"}
    leaked = pair.exec(1, ["grep", "-rl", "hf_sim_token", "/srv/hf-cache", "/home/spark"], check=False)
    assert leaked.stdout == "", f"the token was left on spark-1: {leaked.stdout}"


def test_four_nodes_blob_deleted_on_spark2_and_corrupted_on_spark3(sim_cluster_factory, tmp_path):
    """Acceptance 1 on four nodes (a cluster of its own: the suite shares only 2-node ones; ~16 s)."""
    quad = sim_cluster_factory(nodes=4, load_image_on=(1,))
    recipe = recipe_variant(quad, tmp_path / "quad.yaml", model={"revision": META["revision"]})
    for node in (2, 3, 4):
        quad.exec(node, ["rm", "-rf", "--", ROOT])
    first = pulled(pull(quad, recipe))
    assert {n: c["bytes"] for n, c in first["nodes"].items()} == {f"spark-{i}": META["total_bytes"] for i in (2, 3, 4)}
    assert pulled(pull(quad, recipe))["bytes"] == 0
    quad.exec(2, ["rm", "--", f"{ROOT}/blobs/{SHARD1}"])
    quad.exec(3, ["bash", "-c", 'printf x | dd of="$1" bs=1 seek=100 conv=notrunc status=none', "bash",
                  f"{ROOT}/blobs/{SHARD3}"])
    again = pulled(pull(quad, recipe))
    assert again["nodes"] == {"spark-2": {"bytes": BLOBS[SHARD1], "blobs": [SHARD1], "linked": 0},
                              "spark-3": {"bytes": BLOBS[SHARD3], "blobs": [SHARD3], "linked": 0},
                              "spark-4": {"bytes": 0, "blobs": [], "linked": 0}}
    assert verify_blobs(quad, recipe) == {f"spark-{i}": "ok" for i in (1, 2, 3, 4)}



def test_a_hub_that_does_not_answer_fails_the_branch_within_the_wait_and_offline_says_it_used_the_cache(pair,
                                                                                                     tmp_path):
    """spark-1's cache names main's commit already. With HF_ENDPOINT at a closed port, then at an address that
    accepts and never answers (a socket on this machine that listens and reads nothing, reached at the nodes'
    gateway like the Hub stand-in), `--revision main` exits 1 naming the Hub within HUB_WAIT s of waiting for
    it (plus the container's start), and the recipe is byte for byte as it was. `--offline` takes the cache's
    commit and says where it came from."""
    recipe = tmp_path / "branch.yaml"
    recipe.write_text(pair.recipe_path.read_text())  # model.revision: main
    before = recipe.read_bytes()
    gateway = pair.info()["gateway"]
    closed = socket.socket()
    closed.bind(("0.0.0.0", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("0.0.0.0", 0))
    silent.listen(8)
    try:
        for port in (closed_port, silent.getsockname()[1]):
            endpoint = f"http://{gateway}:{port}"
            started = time.monotonic()
            res = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), "--revision", "main",
                               env={"HF_ENDPOINT": endpoint})
            elapsed = time.monotonic() - started
            assert res.returncode == 1, res.stdout + res.stderr
            said = " ".join(res.stderr.split())
            assert f"spark-1: the Hub at {endpoint} did not say which commit sim/tiny-moe@main names" in said, said
            assert "nothing was downloaded and the recipe is unchanged" in said, said
            assert f"waiting at most {HUB_WAIT:g} s for its answer" in res.stdout, res.stdout  # announced first
            assert elapsed < HUB_WAIT + 30, f"{elapsed:.0f} s: the wait is not bounded"
            assert recipe.read_bytes() == before
    finally:
        silent.close()

    offline = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), "--revision", "main",
                           "--offline", env={"HF_ENDPOINT": f"http://{gateway}:{closed_port}"})
    assert offline.returncode == 0, offline.stdout + offline.stderr
    said = " ".join(offline.stdout.split())
    assert f"main resolved from spark-1's cache to {META['revision']}, the Hub was not reached" in said, said
    assert f"model.revision = {META['revision']} (was main), resolved from spark-1's cache" in said, said
    assert YAML().load(recipe.read_text())["model"]["revision"] == META["revision"]
