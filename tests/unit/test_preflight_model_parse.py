"""Unit tests for the model facts and checks (issue 10): the parser on outputs captured from a real sim
node, and the pure judges (model-files parity, model-shards, model-incomplete) on those parsed values."""

from __future__ import annotations

import pytest

import orchestrator.preflight  # noqa: F401  (registers every check)
from orchestrator.facts.model import FACT, Snapshot, parse_snapshot
from orchestrator.preflight.checks_model import model_files, model_incomplete, model_shards
from orchestrator.facts.core import FACTS, FactInput, Observed, driver_args, parse_framed
from orchestrator.checks.verdict import Scope, Status
from orchestrator.preflight.registry import CHECKS
from orchestrator.render.plan import build_plan

from fakes import deployment

# Captured on a real sim node (spark-2 of a 2-node cluster): `cluster.exec(2, ["bash", "-c", _SCRIPT, "fact",
# "/srv/hf-cache", repo, rev])` with the sim recipe's model (sim/tiny-moe@main) after the named fault
# (no_repo: repo sim/other; no_ref: revision v2; blob-deleted: the blob of shard 3 removed by hand;
# local_dir: the snapshot copied with `cp -L` to /srv/local-model, repo given as that path). The index
# after the `index` line was byte-identical in every capture that has one, so it is kept once.
INDEX_JSON = """{
  "metadata": {
    "total_size": 355904
  },
  "weight_map": {
    "lm_head.weight": "model-00003-of-00003.safetensors",
    "model.embed_tokens.weight": "model-00001-of-00003.safetensors",
    "model.layers.0.input_layernorm.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.0.down_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.0.gate_up_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.1.down_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.1.gate_up_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.2.down_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.2.gate_up_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.3.down_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.experts.3.gate_up_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.mlp.gate.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.post_attention_layernorm.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.self_attn.k_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.self_attn.o_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.self_attn.q_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.0.self_attn.v_proj.weight": "model-00002-of-00003.safetensors",
    "model.layers.1.input_layernorm.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.0.down_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.0.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.1.down_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.1.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.2.down_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.2.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.3.down_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.experts.3.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.mlp.gate.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.post_attention_layernorm.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.self_attn.k_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.self_attn.o_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.self_attn.q_proj.weight": "model-00003-of-00003.safetensors",
    "model.layers.1.self_attn.v_proj.weight": "model-00003-of-00003.safetensors",
    "model.norm.weight": "model-00003-of-00003.safetensors",
    "model.visual.blocks.0.attn.proj.weight": "model-00001-of-00003.safetensors",
    "model.visual.blocks.0.attn.qkv.weight": "model-00001-of-00003.safetensors",
    "model.visual.blocks.0.norm1.weight": "model-00001-of-00003.safetensors",
    "model.visual.merger.mlp.0.weight": "model-00001-of-00003.safetensors",
    "model.visual.patch_embed.proj.weight": "model-00001-of-00003.safetensors",
    "mtp.fc.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.input_layernorm.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.0.down_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.0.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.1.down_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.1.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.2.down_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.2.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.3.down_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.experts.3.gate_up_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.mlp.gate.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.post_attention_layernorm.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.self_attn.k_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.self_attn.o_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.self_attn.q_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.layers.0.self_attn.v_proj.weight": "model-00003-of-00003.safetensors",
    "mtp.norm.weight": "model-00003-of-00003.safetensors",
    "mtp.pre_fc_norm_embedding.weight": "model-00003-of-00003.safetensors",
    "mtp.pre_fc_norm_hidden.weight": "model-00003-of-00003.safetensors"
  }
}
"""

_HEADS = {
    "healthy": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "commit\ta88f6e5c81edfc370f09fe9fcdfe5438352882eb\n"
        "link\tmodel-00002-of-00003.safetensors\t../../blobs/b6d0f23ed1b19bcf39892930207da64b4e8f058a3f375d8420f470a13ee5f3cd\n"
        "link\tmodel-00003-of-00003.safetensors\t../../blobs/3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644\n"
        "link\tmodel-00001-of-00003.safetensors\t../../blobs/1363e3e1a78cf021c69661793afe483972f7fa17c61b72392e5d37c383f2400f\n"
        "link\tmodel.safetensors.index.json\t../../blobs/b41555a08b3e72efcde04b80974cbc4c778b3d81499a4ce136a0b8752862c012\n"
        "link\tconfig.json\t../../blobs/46d3a94bb7d4fd8a5cf219d353ec8650c590002657f1c4d0a1fef6134893976b\n"
        "size\tmodel-00002-of-00003.safetensors\t76136\tf\n"
        "size\tmodel-00003-of-00003.safetensors\t202408\tf\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
    ),
    "no_repo": (
        "root\t/srv/hf-cache/hub/models--sim--other\n"
        "absent\tno /srv/hf-cache/hub/models--sim--other\n"
    ),
    "no_ref": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "absent\tno refs/v2 in /srv/hf-cache/hub/models--sim--tiny-moe\n"
    ),
    "model-remove-shard": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "commit\ta88f6e5c81edfc370f09fe9fcdfe5438352882eb\n"
        "link\tmodel-00003-of-00003.safetensors\t../../blobs/3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644\n"
        "link\tmodel-00001-of-00003.safetensors\t../../blobs/1363e3e1a78cf021c69661793afe483972f7fa17c61b72392e5d37c383f2400f\n"
        "link\tmodel.safetensors.index.json\t../../blobs/b41555a08b3e72efcde04b80974cbc4c778b3d81499a4ce136a0b8752862c012\n"
        "link\tconfig.json\t../../blobs/46d3a94bb7d4fd8a5cf219d353ec8650c590002657f1c4d0a1fef6134893976b\n"
        "size\tmodel-00003-of-00003.safetensors\t202408\tf\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
    ),
    "model-change-blob": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "commit\ta88f6e5c81edfc370f09fe9fcdfe5438352882eb\n"
        "link\tmodel-00002-of-00003.safetensors\t../../blobs/ae2aac641e3cd776ea002d081abc744b5504ccd950815ce0070c4c5c58105319\n"
        "link\tmodel-00003-of-00003.safetensors\t../../blobs/3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644\n"
        "link\tmodel-00001-of-00003.safetensors\t../../blobs/1363e3e1a78cf021c69661793afe483972f7fa17c61b72392e5d37c383f2400f\n"
        "link\tmodel.safetensors.index.json\t../../blobs/b41555a08b3e72efcde04b80974cbc4c778b3d81499a4ce136a0b8752862c012\n"
        "link\tconfig.json\t../../blobs/46d3a94bb7d4fd8a5cf219d353ec8650c590002657f1c4d0a1fef6134893976b\n"
        "size\tmodel-00002-of-00003.safetensors\t76136\tf\n"
        "size\tmodel-00003-of-00003.safetensors\t202408\tf\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
    ),
    "model-incomplete": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "commit\ta88f6e5c81edfc370f09fe9fcdfe5438352882eb\n"
        "link\tmodel-00002-of-00003.safetensors\t../../blobs/b6d0f23ed1b19bcf39892930207da64b4e8f058a3f375d8420f470a13ee5f3cd\n"
        "link\tmodel-00003-of-00003.safetensors\t../../blobs/3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644\n"
        "link\tmodel-00001-of-00003.safetensors\t../../blobs/1363e3e1a78cf021c69661793afe483972f7fa17c61b72392e5d37c383f2400f\n"
        "link\tmodel.safetensors.index.json\t../../blobs/b41555a08b3e72efcde04b80974cbc4c778b3d81499a4ce136a0b8752862c012\n"
        "link\tconfig.json\t../../blobs/46d3a94bb7d4fd8a5cf219d353ec8650c590002657f1c4d0a1fef6134893976b\n"
        "size\tmodel-00002-of-00003.safetensors\t76136\tf\n"
        "size\tmodel-00003-of-00003.safetensors\t202408\tf\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
        "incomplete\tb75a517ae5ece145c2a4dffa00424a37f70fa5a7028bf6bd2d3ec613d0dfcc68.incomplete\t4096\n"
    ),
    "blob-deleted": (
        "root\t/srv/hf-cache/hub/models--sim--tiny-moe\n"
        "commit\ta88f6e5c81edfc370f09fe9fcdfe5438352882eb\n"
        "link\tmodel-00002-of-00003.safetensors\t../../blobs/b6d0f23ed1b19bcf39892930207da64b4e8f058a3f375d8420f470a13ee5f3cd\n"
        "link\tmodel-00003-of-00003.safetensors\t../../blobs/3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644\n"
        "link\tmodel-00001-of-00003.safetensors\t../../blobs/1363e3e1a78cf021c69661793afe483972f7fa17c61b72392e5d37c383f2400f\n"
        "link\tmodel.safetensors.index.json\t../../blobs/b41555a08b3e72efcde04b80974cbc4c778b3d81499a4ce136a0b8752862c012\n"
        "link\tconfig.json\t../../blobs/46d3a94bb7d4fd8a5cf219d353ec8650c590002657f1c4d0a1fef6134893976b\n"
        "size\tmodel-00002-of-00003.safetensors\t76136\tf\n"
        "size\tmodel-00003-of-00003.safetensors\t76\tl\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
    ),
    "local_dir": (
        "local\t/srv/local-model\n"
        "commit\tlocal:/srv/local-model\n"
        "link\tmodel-00002-of-00003.safetensors\t\n"
        "link\tmodel-00003-of-00003.safetensors\t\n"
        "link\tmodel-00001-of-00003.safetensors\t\n"
        "link\tmodel.safetensors.index.json\t\n"
        "link\tconfig.json\t\n"
        "size\tmodel-00002-of-00003.safetensors\t76136\tf\n"
        "size\tmodel-00003-of-00003.safetensors\t202408\tf\n"
        "size\tmodel-00001-of-00003.safetensors\t83384\tf\n"
        "size\tmodel.safetensors.index.json\t4782\tf\n"
        "size\tconfig.json\t439\tf\n"
    ),
}
_WITH_INDEX = {"healthy", "model-remove-shard", "model-change-blob", "model-incomplete", "blob-deleted", "local_dir"}
CAPTURED = {k: head + ("index\n" + INDEX_JSON if k in _WITH_INDEX else "") for k, head in _HEADS.items()}

SHARD2 = "model-00002-of-00003.safetensors"
SHARD3 = "model-00003-of-00003.safetensors"
GOOD_BLOB2 = "b6d0f23ed1b19bcf39892930207da64b4e8f058a3f375d8420f470a13ee5f3cd"
CHANGED_BLOB2 = "ae2aac641e3cd776ea002d081abc744b5504ccd950815ce0070c4c5c58105319"
PARTIAL = "b75a517ae5ece145c2a4dffa00424a37f70fa5a7028bf6bd2d3ec613d0dfcc68.incomplete"


def download(d) -> str:
    """The one command the model checks name (issue 21: `model pull`, no longer a huggingface-cli hint)."""
    return f"spark-deploy model pull {d.recipe_path} --revision main -i {d.inventory_path} (or up --sync-model)"


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    return deployment(tmp_path_factory.mktemp("model-dep"))


def seen(*captures: str, names: tuple[str, ...] = ("spark-1", "spark-2", "spark-3")) -> dict:
    return {name: {FACT: Observed(value=parse_snapshot(CAPTURED[c]))} for name, c in zip(names, captures)}


# ---- the parser -----------------------------------------------------------------------------------


def test_parse_healthy_snapshot():
    snap = parse_snapshot(CAPTURED["healthy"])
    assert snap.absent is None
    assert snap.root == "/srv/hf-cache/hub/models--sim--tiny-moe"
    assert snap.commit == "a88f6e5c81edfc370f09fe9fcdfe5438352882eb"
    assert sorted(snap.files) == ["config.json", "model-00001-of-00003.safetensors", SHARD2, SHARD3,
                                  "model.safetensors.index.json"]
    assert snap.files[SHARD2].blob == GOOD_BLOB2 and snap.files[SHARD2].size == 76136
    assert snap.shards == ("model-00001-of-00003.safetensors", SHARD2, SHARD3)
    assert snap.incomplete == {} and snap.index_error is None


def test_parse_without_the_model_or_the_ref():
    assert parse_snapshot(CAPTURED["no_repo"]).absent == "no /srv/hf-cache/hub/models--sim--other"
    no_ref = parse_snapshot(CAPTURED["no_ref"])
    assert no_ref.absent == "no refs/v2 in /srv/hf-cache/hub/models--sim--tiny-moe"
    assert no_ref.files == {} and no_ref.shards is None


def test_parse_faults():
    assert SHARD2 not in parse_snapshot(CAPTURED["model-remove-shard"]).files
    assert parse_snapshot(CAPTURED["model-change-blob"]).files[SHARD2].blob == CHANGED_BLOB2
    assert parse_snapshot(CAPTURED["model-incomplete"]).incomplete == {PARTIAL: 4096}
    hollow = parse_snapshot(CAPTURED["blob-deleted"]).files[SHARD3]
    assert hollow.blob == "3876b63750ad7d67ebce77634a5bbe1f8575842bed397749d55ecb01cb7d6644" and hollow.size is None


def test_parse_plain_directory():
    snap = parse_snapshot(CAPTURED["local_dir"])
    assert snap.commit == "local:/srv/local-model"
    assert snap.files[SHARD3].blob == "" and snap.files[SHARD3].size == 202408


def test_parse_refuses_unknown_output_and_reports_a_broken_index():
    with pytest.raises(ValueError, match="unknown record"):
        parse_snapshot("Permission denied\n")
    with pytest.raises(ValueError, match="neither a commit"):
        parse_snapshot("root\t/srv/hf-cache/hub/models--sim--tiny-moe\n")
    truncated = parse_snapshot(_HEADS["healthy"] + "index\n" + INDEX_JSON[:300])
    assert truncated.shards is None and "unreadable" in truncated.index_error


def test_framed_by_the_driver_and_a_refused_output_is_an_error_not_a_value():
    """The driver strips trailing newlines ($(...)) and frames each fact; the parser still reads it."""
    framed = (f"\x1eF {FACT} 0\n{CAPTURED['healthy'].rstrip(chr(10))}\n\x1eE\n"
              f"\x1eF other 0\nx\n\x1eE\n")
    got = parse_framed(framed, {FACT: FACTS[FACT]})
    assert got[FACT].ok and got[FACT].value == parse_snapshot(CAPTURED["healthy"])
    bad = parse_framed(f"\x1eF {FACT} 0\nbash: find: command not found\n\x1eE\n", {FACT: FACTS[FACT]})
    assert not bad[FACT].ok and "unexpected output" in bad[FACT].error


def test_fact_arguments_come_from_the_node_and_the_recipe(tmp_path):
    def edit(r):
        r["model"]["revision"] = "v1.2"

    d = deployment(tmp_path, recipe=edit)
    argv = driver_args([FACTS[FACT]], FactInput(d.inventory.node("spark-2"), d, build_plan(d)))
    assert argv[0] == FACT and argv[1] == FACTS[FACT].script  # the script itself is a constant
    assert argv[2:] == ["3", "/home/spark/.cache/huggingface", "sim/tiny-moe", "v1.2"]


def test_registered():
    assert {"model-files": Scope.PARITY, "model-shards": Scope.NODE, "model-incomplete": Scope.NODE} == {
        n: CHECKS[n].scope for n in ("model-files", "model-shards", "model-incomplete")}
    assert all(CHECKS[n].facts == (FACT,) for n in ("model-files", "model-shards", "model-incomplete"))


# ---- model-files ----------------------------------------------------------------------------------


def test_files_healthy(dep):
    v = model_files(seen("healthy", "healthy"), dep)
    assert v.status is Status.OK and v.fix == ""
    assert v.cells["spark-2"].value == "a88f6e5c81edfc37: 5 files, 367149 B"


def test_files_changed_blob_names_the_node_the_file_and_both_values(dep):
    v = model_files(seen("healthy", "model-change-blob"), dep)
    cell = v.cells["spark-2"]
    assert cell.status is Status.FAIL
    assert SHARD2 in cell.value and GOOD_BLOB2[:16] in cell.value and CHANGED_BLOB2[:16] in cell.value
    assert "spark-1" in cell.value
    # two nodes, two blobs: nobody can tell which is right without hashing, so both are marked
    assert v.cells["spark-1"].status is Status.FAIL
    assert GOOD_BLOB2 in v.fix and CHANGED_BLOB2 in v.fix and "spark-2" in v.fix and download(dep) in v.fix



def test_files_values_in_rank_order_whatever_order_the_nodes_answered(dep):
    """Facts arrive in completion order; the fix must read the same every run."""
    forward = model_files(seen("healthy", "model-change-blob"), dep)
    backward = model_files(dict(reversed(list(seen("healthy", "model-change-blob").items()))), dep)
    assert backward.fix == forward.fix
    assert f"{SHARD2}: spark-1: blob {GOOD_BLOB2} (76136 B), spark-2: blob {CHANGED_BLOB2} (76136 B)" in backward.fix

def test_files_majority_marks_only_the_odd_node(dep):
    v = model_files(seen("healthy", "healthy", "model-change-blob"), dep)
    assert [n for n, c in v.cells.items() if c.status is Status.FAIL] == ["spark-3"]
    assert "spark-1: blob b6d0f23ed1b19bcf" in v.cells["spark-3"].value


def test_files_missing_file_fails_only_where_missing(dep):
    v = model_files(seen("healthy", "model-remove-shard"), dep)
    assert v.cells["spark-1"].status is Status.OK
    assert v.cells["spark-2"].status is Status.FAIL
    assert v.cells["spark-2"].value == f"{SHARD2}: missing vs spark-1: blob b6d0f23ed1b19bcf (76136 B)"


def test_files_a_deleted_blob_fails_even_when_every_node_agrees(dep):
    v = model_files(seen("blob-deleted", "blob-deleted"), dep)
    assert all(c.status is Status.FAIL and SHARD3 in c.value and "missing from blobs/" in c.value
               for c in v.cells.values())


def test_files_different_revision(dep):
    other = _HEADS["healthy"].replace("a88f6e5c81edfc370f09fe9fcdfe5438352882eb", "0" * 40)
    s = seen("healthy", "healthy")
    s["spark-2"][FACT] = Observed(value=parse_snapshot(other))
    v = model_files(s, dep)
    assert "revision 0000000000000000 vs spark-1: a88f6e5c81edfc37" in v.cells["spark-2"].value
    assert "a88f6e5c81edfc370f09fe9fcdfe5438352882eb" in v.fix and "0" * 40 in v.fix


def test_files_no_snapshot_fails_with_the_download_fix(dep):
    v = model_files(seen("healthy", "no_ref"), dep)
    assert v.cells["spark-1"].status is Status.OK
    assert v.cells["spark-2"].status is Status.FAIL and "no refs/v2" in v.cells["spark-2"].value
    assert f"on spark-2: copy the model there: {download(dep)}" in v.fix


def test_files_unreadable_fact_is_a_skip_that_says_why(dep):
    s = seen("healthy", "healthy")
    s["spark-2"][FACT] = Observed(error="unexpected output (unknown record 'Permission denied')")
    v = model_files(s, dep)
    assert v.cells["spark-2"].status is Status.SKIP and "Permission denied" in v.cells["spark-2"].value
    assert v.cells["spark-1"].status is Status.OK


# ---- model-shards and model-incomplete -----------------------------------------------------------------


def test_shards(dep):
    ok = model_shards(seen("healthy", "local_dir"), dep)
    assert ok.status is Status.OK and ok.cells["spark-2"].value == "all 3 shards the index names are present"
    v = model_shards(seen("healthy", "model-remove-shard", "blob-deleted"), dep)
    assert v.cells["spark-1"].status is Status.OK
    assert v.cells["spark-2"].status is Status.FAIL
    assert v.cells["spark-2"].value == f"missing: {SHARD2} (the index names 3)"
    assert v.cells["spark-3"].status is Status.FAIL and f"blob missing: {SHARD3}" in v.cells["spark-3"].value
    assert "spark-2, spark-3" in v.fix and download(dep) in v.fix


def test_shards_without_an_index(dep):
    s = {"spark-1": {FACT: Observed(value=parse_snapshot(_HEADS["healthy"]))}}
    assert model_shards(s, dep).cells["spark-1"].value == "no model.safetensors.index.json; 3 .safetensors file(s)"
    bare = Snapshot(root="/r", commit="c")
    assert model_shards({"spark-1": {FACT: Observed(value=bare)}}, dep).cells["spark-1"].status is Status.SKIP


def test_shards_unreadable_index_fails(dep):
    s = {"spark-1": {FACT: Observed(value=parse_snapshot(_HEADS["healthy"] + "index\n{"))}}
    cell = model_shards(s, dep).cells["spark-1"]
    assert cell.status is Status.FAIL and "model.safetensors.index.json unreadable" in cell.value


def test_incomplete(dep):
    assert model_incomplete(seen("healthy", "healthy"), dep).status is Status.OK
    v = model_incomplete(seen("healthy", "model-incomplete"), dep)
    assert v.cells["spark-1"].status is Status.OK
    assert v.cells["spark-2"].status is Status.FAIL
    assert v.cells["spark-2"].value == f"partial download: blobs/{PARTIAL} (4096 B)"
    assert "spark-2" in v.fix and download(dep) in v.fix


def test_incomplete_and_shards_fail_without_the_snapshot(dep):
    for judge in (model_incomplete, model_shards):
        v = judge(seen("healthy", "no_repo"), dep)
        assert v.cells["spark-2"].status is Status.FAIL, judge.__name__
        assert "no /srv/hf-cache/hub/models--sim--other" in v.cells["spark-2"].value
        assert f"copy the model there: {download(dep)}" in v.fix
