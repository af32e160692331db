"""Community patches against the image they run on (issue 37), on a real simulated pair while a release
serves: `overlay hash` prints the pinned image's hashes; an upstream image that renamed one target and
changed another's bytes, a `.py` overlay that does not compile with the image's Python, a `.so` (a real
shared object of the node) without a declared symbol, overlay bytes that differ on the peer and an extra
mount missing there: `preflight` exits 1 naming node, file and cause for each, `up` refuses in its
preflight step, and the serving containers are the same ones, still serving."""

from __future__ import annotations

import hashlib
import json

import pytest
from deploy_helpers import assert_up_refuses, completion, node_docker, spark_deploy
from image_variants import derive_by_script
from ruamel.yaml import YAML

from orchestrator.config.load import load_deployment
import cli_json

pytestmark = pytest.mark.integration

DIR = "/opt/sd-ov"
STANDIN = "/usr/lib/python3/dist-packages/orchestrator/sim/standin"
LIBZ = "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"  # in the image, and a real shared object on each node
CHECKS = [a for c in ("overlay-base", "overlay-compile", "overlay-symbols", "overlay-parity", "extra-mounts")
          for a in ("--only", c)]
UPSTREAM = f'echo "# upstream fix" >> {STANDIN}/answers.py && mv {STANDIN}/jit.py {STANDIN}/jit_cache.py'


def preflight(cluster, recipe, *extra: str) -> tuple[int, dict, str]:
    r = spark_deploy("preflight", recipe, "-i", cluster.inventory_path, *CHECKS, "--json", *extra)
    try:
        doc = cli_json.result(r.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {r.returncode}): {r.stdout}\n{r.stderr}") from None
    return r.returncode, {c["name"]: c for c in doc["checks"]}, r.stdout + r.stderr


def write(cluster, node: int, path: str, text: str) -> None:
    cluster.exec(node, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf "%s" "$2" > "$1"', "sh", path, text])


def variant(cluster, dest, overlays, extra=(), image=None):
    yaml = YAML()
    doc = yaml.load(cluster.recipe_path.read_text())
    doc["mounts"]["overlays"] = list(overlays)
    doc["mounts"]["extra"] = list(extra)
    if image:
        doc["image"]["id"] = image
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


def serving(cluster) -> dict[str, list[tuple[str, str, bool]]]:
    """Each node's containers of ours: (ID, StartedAt, running): a stop or restart changes them."""
    found = {}
    for info in cluster.nodes():
        ids = node_docker(cluster, info.index, "ps", "-aq", "--no-trunc", "--filter",
                          "label=spark-deploy.managed=true", check=True).stdout.split()
        rows = []
        for cid in ids:
            got = node_docker(cluster, info.index, "inspect", "--format",
                              "{{json .Id}} {{json .State.StartedAt}} {{json .State.Running}}", cid, check=True)
            rows.append(tuple(json.loads(part) for part in got.stdout.split()))
        found[info.name] = sorted(rows)
    return found


def all_containers(cluster) -> dict[str, list[str]]:
    return {i.name: node_docker(cluster, i.index, "ps", "-a", "--format", "{{.ID}}", check=True).stdout.split()
            for i in cluster.nodes()}


@pytest.fixture
def overlay_files(pair):
    """The overlay sources on both nodes (removed after); the vocabulary list only on the head."""
    for node in (1, 2):
        write(pair, node, f"{DIR}/answers.py", "ANSWER = 42\n")
        write(pair, node, f"{DIR}/good.py", "def jit():\n    return 1\n")
        write(pair, node, f"{DIR}/bad.py", "def broken(:\n    return 1\n")
        write(pair, node, f"{DIR}/odd.py", "ODD = 1\n")
    write(pair, 1, f"{DIR}/vocab.txt", "1\n2\n3\n")
    yield pair
    for node in (1, 2):
        pair.exec(node, ["rm", "-rf", DIR])


def test_stale_broken_and_uneven_overlays_fail_before_anything_stops(pair, overlay_files, tmp_path):
    cluster = pair
    dep = load_deployment(cluster.recipe_path, cluster.inventory_path)
    image, head = dep.recipe.image.id, dep.inventory.head
    peer = next(i.name for i in cluster.nodes() if i.name != head)
    up = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, timeout=200)
    assert up.returncode == 0, up.stdout + up.stderr
    before = serving(cluster)
    assert all(rows and all(r[2] for r in rows) for rows in before.values()), before

    # overlay hash: the pinned image's own bytes, as sha256sum in the image reads them; nothing left behind
    pinned = variant(cluster, tmp_path / "pinned.yaml", [{"source": f"{DIR}/answers.py",
                                                         "target": f"{STANDIN}/answers.py"}])
    left = all_containers(cluster)
    r = spark_deploy("overlay", "hash", pinned, "-i", cluster.inventory_path, "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    row = cli_json.result(r.stdout)["overlays"][0]
    by_image = node_docker(cluster, 1, "run", "--rm", "--network", "none", "--entrypoint", "sha256sum", image,
                           f"{STANDIN}/answers.py", check=True).stdout.split()[0]
    assert row["sha256"] == by_image and row["base_sha256"] is None and row["in_image"], row
    assert all_containers(cluster) == left
    base = row["sha256"]

    # the patch as written against the pinned image: every check passes, having looked
    good = variant(cluster, tmp_path / "good.yaml", [
        {"source": f"{DIR}/answers.py", "target": f"{STANDIN}/answers.py", "base_sha256": base},
        {"source": f"{DIR}/good.py", "target": f"{STANDIN}/jit.py"},
        {"source": LIBZ, "target": LIBZ, "symbols": ["deflate", "inflate"]}],
        [{"source": f"{DIR}/vocab.txt", "target": "/etc/vocab.txt", "kind": "file"}])
    write(cluster, 2, f"{DIR}/vocab.txt", "1\n2\n3\n")
    code, checks, text = preflight(cluster, good)
    assert code == 0, text
    assert {n: c["status"] for n, c in checks.items() if n != "reachable"} == {
        "overlay-base": "ok", "overlay-compile": "ok", "overlay-symbols": "ok", "overlay-parity": "ok",
        "extra-mounts": "ok"}, text
    assert "2 symbol(s) exported by 1 .so overlay(s)" in checks["overlay-symbols"]["per_node"][head]["value"]
    cluster.exec(2, ["rm", "-f", f"{DIR}/vocab.txt"])

    # upstream moved on (one target renamed, another's bytes changed), and every other fault at once
    newer = derive_by_script(cluster, 1, image, "vllm-sim:upstream-moved", UPSTREAM)
    write(cluster, 2, f"{DIR}/odd.py", "ODD = 2  # edited on one node only\n")
    odd = hashlib.sha256(b"ODD = 2  # edited on one node only\n").hexdigest()
    bad = variant(cluster, tmp_path / "bad.yaml", [
        {"source": f"{DIR}/answers.py", "target": f"{STANDIN}/answers.py", "base_sha256": base},
        {"source": f"{DIR}/good.py", "target": f"{STANDIN}/jit.py"},
        {"source": f"{DIR}/bad.py", "target": f"{STANDIN}/base.py"},
        {"source": LIBZ, "target": LIBZ, "symbols": ["deflate", "sd_not_exported"]},
        {"source": f"{DIR}/odd.py", "target": f"{STANDIN}/cli.py"}],
        [{"source": f"{DIR}/vocab.txt", "target": "/etc/vocab.txt", "kind": "file"}], image=newer)
    changed = node_docker(cluster, 1, "run", "--rm", "--network", "none", "--entrypoint", "sha256sum", newer,
                          f"{STANDIN}/answers.py", check=True).stdout.split()[0]
    left = all_containers(cluster)
    code, checks, text = preflight(cluster, bad)
    assert code == 1, text
    assert all_containers(cluster) == left  # the probe's container is gone
    cell = checks["overlay-base"]["per_node"][head]
    assert cell["status"] == "fail"
    assert (f"upstream changed {STANDIN}/answers.py since this overlay was written: port the patch again or "
            f"update base_sha256 (image: {changed}, base_sha256: {base})") in cell["value"]
    assert f"{STANDIN}/jit.py is not in image {newer[:19]}" in cell["value"]
    assert checks["overlay-base"]["fix"].startswith(f"{head}: ")
    cell = checks["overlay-compile"]["per_node"][head]
    assert cell["status"] == "fail" and f"{DIR}/bad.py does not compile with the image's Python 3." in cell["value"]
    assert f"{STANDIN}/base.py line 1: SyntaxError" in cell["value"]
    cell = checks["overlay-symbols"]["per_node"][head]
    assert cell == {"status": "fail", "value": f"{LIBZ} does not export sd_not_exported"}
    parity = checks["overlay-parity"]
    assert parity["per_node"][head]["status"] == "ok" and parity["per_node"][peer]["status"] == "fail"
    assert f"{peer}: {DIR}/odd.py differs: sha256 {odd} here" in parity["fix"]
    extra = checks["extra-mounts"]
    assert extra["per_node"][head]["status"] == "ok"
    assert extra["per_node"][peer] == {"status": "fail", "value": f"{DIR}/vocab.txt missing (docker would mount "
                                                                  "an empty directory it creates at /etc/vocab.txt)"}

    # up refuses in its preflight step; the serving release is the same containers, still serving
    assert_up_refuses(cluster, bad, "overlay-base", head, "upstream changed", "overlay-parity", "extra-mounts",
                      "sd_not_exported", "SyntaxError")
    assert serving(cluster) == before
    assert completion(cluster)
    assert cluster.exec(2, ["test", "-e", f"{DIR}/vocab.txt"], check=False).code != 0  # docker created nothing
