"""`tune`'s pure parts: --set parsing, the variants (original and baseline added), the balanced order, and
the table's rule (best per profile against the spread, one winner by the geometric mean)."""

from __future__ import annotations

import pytest
from ruamel.yaml import YAML

from orchestrator.bench.tune_plan import BASELINE, TuneInputError, expand, order, parse_set, speculates
from orchestrator.bench.tune_rule import Cell, profile_table, winner

RECIPE = """\
name: r  # kept comment
vllm:
  moe_backend: flashinfer_b12x
  speculative_config:
    method: mtp
    num_speculative_tokens: 4
"""
KEY = "vllm.speculative_config.num_speculative_tokens"


def _load(text: str):
    return YAML(typ="safe").load(text)


def test_parse_set_reads_values_as_yaml():
    s = parse_set(f"{KEY}=2,4, 6")
    assert s.key == ("vllm", "speculative_config", "num_speculative_tokens") and s.values == (2, 4, 6)
    assert parse_set("vllm.moe_backend=auto,flashinfer_b12x").values == ("auto", "flashinfer_b12x")
    for bad in (KEY, "=2,4", f"{KEY}=2,,4", f"{KEY}=", "a..b=1", f"{KEY}=2,2"):
        with pytest.raises(TuneInputError):
            parse_set(bad)


def test_expand_marks_the_original_and_adds_the_baseline():
    variants = expand(RECIPE, [parse_set(f"{KEY}=2,4,8")])
    assert [v.label for v in variants] == ["num_speculative_tokens=2", "num_speculative_tokens=4 (original)",
                                           "num_speculative_tokens=8", BASELINE]
    assert variants[1].original and variants[1].text == RECIPE
    assert _load(variants[0].text)["vllm"]["speculative_config"]["num_speculative_tokens"] == 2
    assert "# kept comment" in variants[0].text  # only the named key changes
    base = variants[-1]
    assert base.baseline and _load(base.text)["vllm"]["speculative_config"] is None
    assert sum(v.baseline for v in variants) == 1 and sum(v.original for v in variants) == 1


def test_expand_adds_the_original_when_no_value_is_it_and_combines_keys():
    variants = expand(RECIPE, [parse_set(f"{KEY}=2,6"), parse_set("vllm.moe_backend=auto,flashinfer_b12x")])
    labels = [v.label for v in variants]
    assert labels[:4] == ["num_speculative_tokens=2, moe_backend=auto",
                          "num_speculative_tokens=2, moe_backend=flashinfer_b12x",
                          "num_speculative_tokens=6, moe_backend=auto",
                          "num_speculative_tokens=6, moe_backend=flashinfer_b12x"]
    assert labels[4] == "num_speculative_tokens=4, moe_backend=flashinfer_b12x (original)"
    assert labels[5] == BASELINE


def test_no_baseline_without_speculation_or_when_a_value_turns_it_off():
    plain = RECIPE.replace("  speculative_config:\n    method: mtp\n    num_speculative_tokens: 4\n", "")
    assert not speculates(plain)
    assert [v.label for v in expand(plain, [parse_set("vllm.moe_backend=auto,flashinfer_b12x")])] == [
        "moe_backend=auto", "moe_backend=flashinfer_b12x (original)"]
    off = expand(RECIPE, [parse_set("vllm.speculative_config=null")])
    assert [v.baseline for v in off] == [True, False]


def test_refusals():
    with pytest.raises(TuneInputError, match="nothing to tune"):
        expand(RECIPE, [])
    with pytest.raises(TuneInputError, match="two --set"):
        expand(RECIPE, [parse_set(f"{KEY}=2"), parse_set(f"{KEY}=4")])
    with pytest.raises(TuneInputError, match="is not a mapping"):
        expand(RECIPE, [parse_set("name.x=1,2")])


def test_order_is_balanced():
    assert order(3, 1) == [0, 1, 2]
    assert order(3, 3) == [0, 1, 2, 2, 1, 0, 0, 1, 2]
    # the original (1) where the run ends: nothing to start again when it stays
    assert order(4, 1, last=1) == [0, 2, 3, 1]
    assert order(4, 2, last=1) == [1, 0, 2, 3, 3, 2, 0, 1]
    assert order(4, 3, last=1) == [0, 2, 3, 1, 1, 3, 2, 0, 0, 2, 3, 1]
    with pytest.raises(TuneInputError):
        order(3, 0)


def _cell(i: int, level: float, wobble: float = 0.01) -> Cell:
    blocks = [level * (1 - wobble / 2), level * (1 + wobble / 2)]
    return Cell(i, blocks, [level * (1 + d) for d in (-wobble, -wobble / 2, 0, 0, wobble / 2, wobble)], None)


def test_best_per_profile_and_whether_the_spread_decides_it():
    t = profile_table("code", [_cell(0, 100), _cell(1, 130), _cell(2, 120), _cell(3, 50)], baseline=3)
    assert t.best == 1 and t.runner_up == 2 and t.decided and t.interval[0] > 1
    assert "beyond the noise" in t.verdict(["a", "b", "c", "d"])
    assert t.cells[1].ratio == pytest.approx(130 / 50) and t.cells[3].ratio == pytest.approx(1)
    assert t.cells[1].interval_kind == "95% CI"
    close = profile_table("chat", [_cell(0, 100, 0.1), _cell(1, 103, 0.1)], baseline=None)
    assert close.best == 1 and not close.decided and close.cells[1].ratio is None
    assert "within the noise" in close.verdict(["a", "b"])
    # block medians that agree (a replayed sitting) do not decide it when the shots overlap
    wide = [Cell(0, [100, 100.1], [80, 90, 100, 100, 110, 120], None),
            Cell(1, [105, 105.1], [85, 95, 105, 105, 115, 125], None)]
    t = profile_table("code", wide, baseline=None)
    assert t.best == 1 and t.margin > t.spread and t.interval[0] < 1 and not t.decided


def test_winner_by_geometric_mean_beyond_the_spread_else_the_original():
    labels = ["k2", "k4 (original)", "k6"]
    code = profile_table("code", [_cell(0, 100), _cell(1, 120), _cell(2, 140)], None)
    chat = profile_table("chat", [_cell(0, 90), _cell(1, 80), _cell(2, 60)], None)
    w = winner([code, chat], original=1, labels=labels)
    # k6: sqrt(140/120 * 60/80) = 0.935; k2: sqrt(100/120 * 90/80) = 0.968: the original stays
    assert w.variant == 1 and w.best == 1 and "stays" in w.reason
    fast = profile_table("chat", [_cell(0, 90), _cell(1, 80), _cell(2, 85)], None)
    w = winner([code, fast], original=1, labels=labels)
    assert w.best == 2 and w.variant == 2 and w.score[2] == pytest.approx((140 / 120 * 85 / 80) ** 0.5)
    noisy = profile_table("chat", [_cell(0, 90, 0.3), _cell(1, 80, 0.3), _cell(2, 70, 0.3)], None)
    w = winner([noisy], original=1, labels=labels)
    assert w.best == 0 and w.variant == 1 and "within the spread" in w.reason
