"""`upgrade` (issue 37, acceptance 2) on a real simulated pair: release A serves with a patched module
mounted over the stand-in and a flag the next "vLLM" drops; image B (a newer stand-in: version 0.34.0, no
--max-log-len, --disable-log-stats on by default, the patched module changed upstream) is made on the head. `upgrade` exits 2 listing both
before anything stops; with the flag removed and the patch ported, `upgrade` ends with B serving and the
release recording both vLLM versions."""

from __future__ import annotations

import hashlib

import pytest
from deploy_helpers import completion, node_docker, spark_deploy
from image_variants import STANDIN_OPTIONS, derive_by_script
from ruamel.yaml import YAML

from orchestrator.config.load import load_deployment
import cli_json

pytestmark = pytest.mark.integration

DIR = "/opt/sd-upgrade"
STANDIN = "/usr/lib/python3/dist-packages/orchestrator/sim/standin"
PATCH = "\n# community patch: nothing changes in behaviour\n"
NEWER = (f"sed -i \"/^    (('--max-log-len',)/d\" {STANDIN_OPTIONS} && ! grep -q \"'--max-log-len'\" {STANDIN_OPTIONS} && "
         f"sed -i 's/^VERSION = \"0.33.0\"/VERSION = \"0.34.0\"/' {STANDIN}/__init__.py && "
         f"grep -q '^VERSION = \"0.34.0\"' {STANDIN}/__init__.py && "
         f"printf '\\n# upstream change in 0.34\\n' >> {STANDIN}/answers.py && "
         f"sed -i \"s/^\\(    (('--disable-log-stats',).*, 0, \\)False, None),$/\\1True, None),/\" {STANDIN_OPTIONS} && "
         f"grep -q \"^    (('--disable-log-stats',).*, 0, True, None),$\" {STANDIN_OPTIONS}")


def in_image(cluster, image: str, path: str) -> str:
    return node_docker(cluster, 1, "run", "--rm", "--network", "none", "--entrypoint", "cat", image, path,
                       check=True).stdout


def place_patch(cluster, text: str) -> None:
    """The overlay, the same bytes on both nodes."""
    for info in cluster.nodes():
        cluster.exec(info.index, ["sh", "-c", 'mkdir -p "$(dirname "$1")" && printf "%s" "$2" > "$1"', "sh",
                                  f"{DIR}/answers.py", text])


def edit(path, change) -> None:
    yaml = YAML()
    doc = yaml.load(path.read_text())
    change(doc)
    with path.open("w") as handle:
        yaml.dump(doc, handle)


def image_of_ours(cluster) -> set[str]:
    """Each running container of ours as "ID IMAGE-ID" (a stop, a restart or another image changes it)."""
    found = set()
    for i in cluster.nodes():
        ids = node_docker(cluster, i.index, "ps", "-q", "--filter", "label=spark-deploy.managed=true",
                          check=True).stdout.split()
        for cid in ids:
            found.add(node_docker(cluster, i.index, "inspect", "--format", "{{.Id}} {{.Image}}", cid,
                                  check=True).stdout.strip())
    return found


@pytest.fixture
def patches(pair):
    yield pair
    for info in pair.nodes():
        pair.exec(info.index, ["rm", "-rf", DIR])


def test_upgrade_refuses_listing_what_to_fix_then_serves_the_new_image(pair, patches, tmp_path):
    cluster = pair
    image = load_deployment(cluster.recipe_path, cluster.inventory_path).recipe.image.id
    upstream_a = in_image(cluster, image, f"{STANDIN}/answers.py")
    place_patch(cluster, upstream_a + PATCH)
    recipe = tmp_path / "a.yaml"
    recipe.write_text(cluster.recipe_path.read_text())

    def release_a(doc):
        doc["vllm"]["extra"]["max-log-len"] = 100
        doc["mounts"]["overlays"] = [{"source": f"{DIR}/answers.py", "target": f"{STANDIN}/answers.py",
                                      "base_sha256": hashlib.sha256(upstream_a.encode()).hexdigest()}]
    edit(recipe, release_a)
    up = spark_deploy("up", recipe, "-i", cluster.inventory_path, timeout=200)
    assert up.returncode == 0, up.stdout + up.stderr
    serving_a = image_of_ours(cluster)
    assert serving_a and {line.split()[1] for line in serving_a} == {image}, serving_a

    newer = derive_by_script(cluster, 1, image, "vllm-sim:0.34", NEWER)
    upstream_b = in_image(cluster, newer, f"{STANDIN}/answers.py")
    new_recipe = tmp_path / "b.yaml"
    r = spark_deploy("upgrade", recipe, "-i", cluster.inventory_path, "--image", "vllm-sim:0.34", "-o", new_recipe)
    said = r.stdout + r.stderr
    assert r.returncode == 2, said
    assert "vLLM 0.33.0" in said and "-> 0.34.0" in said
    assert "defaults the new vLLM changed for flags this recipe leaves unset (1):\n  --disable-log-stats: False -> True" \
        in r.stdout, r.stdout
    assert "the new image's vLLM rejects unknown flag --max-log-len" in said
    assert (f"the new image changed {STANDIN}/answers.py under overlay {DIR}/answers.py: port the patch again "
            f"and update base_sha256 (new: {hashlib.sha256(upstream_b.encode()).hexdigest()}") in said
    assert image_of_ours(cluster) == serving_a  # nothing stopped or started
    assert YAML(typ="safe").load(new_recipe.read_text())["image"] == {"ref": "vllm-sim:0.34", "id": newer,
                                                                       "serve_entrypoint": True}

    # the flag dropped, the patch ported onto B's file and its new base recorded
    place_patch(cluster, upstream_b + PATCH)

    def fixed(doc):
        del doc["vllm"]["extra"]["max-log-len"]
        doc["mounts"]["overlays"][0]["base_sha256"] = hashlib.sha256(upstream_b.encode()).hexdigest()
    edit(new_recipe, fixed)
    r = spark_deploy("upgrade", new_recipe, "-i", cluster.inventory_path, "--image", "vllm-sim:0.34", timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    assert completion(cluster)
    assert {line.split()[1] for line in image_of_ours(cluster)} == {newer}, image_of_ours(cluster)
    hist = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    now = next(rec for rec in cli_json.result(hist.stdout) if rec["serving"])
    assert now["image_id"] == newer
    assert now["upgrade"]["from"]["vllm_version"] == "0.33.0" and now["upgrade"]["to"] == {
        "image_id": newer, "vllm_version": "0.34.0"}, now["upgrade"]
    assert now["upgrade"]["defaults_changed"] == ["--disable-log-stats: False -> True"], now["upgrade"]
    assert not (tmp_path / "b.yaml.before-upgrade").exists()  # b.yaml already named B: nothing to keep
