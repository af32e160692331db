"""A draft token list against the model it drafts for (issue 37, acceptance 3), on a real simulated pair:
`up` records the head's tokenizer.json hash with the release; a model revision whose tokenizer changed
under the same draft list, and a list with an id beyond the vocabulary, fail `preflight` naming both
hashes (or the id and vocab_size), `up` refuses in its preflight step, and the release keeps serving."""

from __future__ import annotations

import hashlib

import pytest
from deploy_helpers import assert_up_refuses, completion, spark_deploy
from ruamel.yaml import YAML

from orchestrator.config.load import load_deployment
from orchestrator.sim import fake_model
import cli_json

pytestmark = pytest.mark.integration

DIR = "/opt/sd-draft"
ROOT = f"{fake_model.HF_CACHE_DIR}/hub/{fake_model.CACHE_DIR_NAME}"
# a tokenizer.json the way the hub stores it: the blob under its git blob id, the snapshot's link to it
TOKENIZER_SH = r'''root=$1; text=$2
snap="$root/snapshots/$(cat "$root/refs/main")"
blob=$(printf '%s' "$text" | git hash-object --stdin 2>/dev/null) ||
  blob=$( { printf 'blob %s\0' "${#text}"; printf '%s' "$text"; } | sha1sum | cut -d' ' -f1)
printf '%s' "$text" > "$root/blobs/$blob"
ln -sfn "../../blobs/$blob" "$snap/tokenizer.json"'''


def tokenizer(cluster, text: str) -> str:
    for info in cluster.nodes():
        cluster.exec(info.index, ["bash", "-c", TOKENIZER_SH, "sh", ROOT, text])
    return hashlib.sha256(text.encode()).hexdigest()


def preflight(cluster, recipe) -> tuple[int, dict, str]:
    r = spark_deploy("preflight", recipe, "-i", cluster.inventory_path, "--only", "draft-vocab", "--json")
    try:
        return r.returncode, cli_json.result(r.stdout)["checks"][-1], r.stdout + r.stderr
    except (ValueError, IndexError):
        raise AssertionError(f"no JSON (exit {r.returncode}): {r.stdout}\n{r.stderr}") from None


def with_draft(cluster, dest, source: str):
    yaml = YAML()
    doc = yaml.load(cluster.recipe_path.read_text())
    doc["mounts"]["extra"] = [{"source": source, "target": "/etc/draft-vocab.txt", "kind": "file",
                               "draft_vocab": True}]
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


@pytest.fixture
def drafts(pair):
    for info in pair.nodes():
        pair.exec(info.index, ["sh", "-c", f'mkdir -p {DIR} && printf "1\\n5\\n200\\n" > {DIR}/list.txt && '
                                           f'printf "1\\n{fake_model.VOCAB + 44}\\n" > {DIR}/wide.txt'])
    yield pair
    pair.fault("all", "model-reset")
    for info in pair.nodes():
        pair.exec(info.index, ["rm", "-rf", DIR])


def test_a_new_tokenizer_under_the_same_draft_list_and_an_id_past_the_vocabulary(pair, drafts, tmp_path):
    cluster = pair
    head = load_deployment(cluster.recipe_path, cluster.inventory_path).inventory.head
    old = tokenizer(cluster, '{"model": {"vocab": {"hello": 0}}, "version": "1.0"}')
    recipe = with_draft(cluster, tmp_path / "draft.yaml", f"{DIR}/list.txt")
    code, check, text = preflight(cluster, recipe)
    assert code == 0 and check["status"] == "ok", text
    assert f"largest 200 < vocab_size {fake_model.VOCAB}; tokenizer {old[:12]}" in check["per_node"][head]["value"]

    up = spark_deploy("up", recipe, "-i", cluster.inventory_path, timeout=200)
    assert up.returncode == 0, up.stdout + up.stderr
    hist = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    serving = next(r for r in cli_json.result(hist.stdout) if r["serving"])
    draft = hashlib.sha256(b"1\n5\n200\n").hexdigest()
    assert serving["tokenizer"]["tokenizer_sha256"] == old and serving["tokenizer"]["draft_sha256"] == draft

    # the model's next revision retrained the tokenizer; the draft list stayed the same
    new = tokenizer(cluster, '{"model": {"vocab": {"hello": 1, "world": 0}}, "version": "2.0"}')
    code, check, text = preflight(cluster, recipe)
    assert code == 1 and check["status"] == "fail", text
    said = check["per_node"][head]["value"]
    assert f"the tokenizer changed under an unchanged draft list {DIR}/list.txt (sha256 {draft})" in said
    assert f"release {serving['id']} ran tokenizer.json {old}" in said and f"has {new}" in said
    assert_up_refuses(cluster, recipe, "draft-vocab", head, old, new)

    # a list made for a bigger vocabulary
    wide = with_draft(cluster, tmp_path / "wide.yaml", f"{DIR}/wide.txt")
    code, check, text = preflight(cluster, wide)
    assert code == 1, text
    assert (f"{DIR}/wide.txt holds token id {fake_model.VOCAB + 44}, beyond {fake_model.REPO_ID}@main's "
            f"vocabulary (vocab_size {fake_model.VOCAB})") in check["per_node"][head]["value"]
    assert completion(cluster)  # the release still serves
