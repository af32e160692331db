"""`vllm.extra` may not reach a typed field through argparse's prefixes or negations, and `false` renders
the real negative form (issue 10)."""

from __future__ import annotations

import pytest

from orchestrator.config.recipe import _not_owned, _owned_alias
from orchestrator.render.spec import _extra_args


@pytest.mark.parametrize("flag, owned", [
    ("max-model", "max-model-len"), ("gpu-memory", "gpu-memory-utilization"),
    ("no-enable-prefix-caching", "enable-prefix-caching"), ("disable-prefix-caching", "enable-prefix-caching"),
    ("no-enforce-eager", "enforce-eager"), ("tensor-parallel", "tensor-parallel-size"),
])
def test_abbreviations_and_negations_of_owned_flags_are_refused(flag, owned):
    assert _owned_alias(flag) == owned
    with pytest.raises(ValueError, match=f"--{flag} abbreviates or negates --{owned}"):
        _not_owned(flag)


@pytest.mark.parametrize("flag", ["block-size", "max-num-seqs", "no-enable-chunked-prefill", "trust-remote-code",
                                  "ma", "enable-chunked-prefill"])
def test_other_flags_pass(flag):
    assert _not_owned(flag) == flag


def test_false_renders_the_negative_form_and_true_the_switch():
    class Vllm:
        extra = {"enable-chunked-prefill": False, "trust-remote-code": True, "block-size": 256}

    class Recipe:
        vllm = Vllm()

    assert _extra_args(Recipe()) == [("no-enable-chunked-prefill", True), ("trust-remote-code", True),
                                     ("block-size", "256")]
