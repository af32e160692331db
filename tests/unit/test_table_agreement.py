"""preflight's vllm-flags check says when the image's parser and the shipped vLLM table disagree (issue 22)."""

from __future__ import annotations

from orchestrator.config.recipe import Recipe
from orchestrator.preflight.table_agreement import disagreements


def recipe(extra: dict) -> Recipe:
    return Recipe.model_validate({"name": "r", "image": {"ref": "img"}, "model": {"repo": "o/m"},
                                  "vllm": {"extra": extra}})


def test_a_flag_only_the_image_knows_is_named_as_a_newer_vllm():
    notes = disagreements(recipe({"brand-new-flag": True, "max-num-seqs": 4}),
                          {"--brand-new-flag": None, "--max-num-seqs": None})
    assert notes == ["--brand-new-flag: the image's parser knows it, vLLM 0.33.0's table shipped with spark-deploy "
                     "does not (the image's vLLM differs; the image decides)"]


def test_a_flag_only_the_table_knows_is_named_too():
    notes = disagreements(recipe({"enable-chunked-prefill": False}), {"--enable-chunked-prefill": None})
    assert len(notes) == 1 and notes[0].startswith("--no-enable-chunked-prefill: the image's parser does not know it")


def test_agreement_says_nothing():
    assert disagreements(recipe({"max-num-seqs": 4, "trust-remote-code": True}),
                         {"--max-num-seqs": None, "--trust-remote-code": None}) == []
