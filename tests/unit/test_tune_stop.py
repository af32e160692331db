"""`tune` stops a direction early: along an ordered numeric key, a value below the best smaller one by more
than the spread on every profile, with low saturation there, makes the larger values not yet started
`skipped: cannot win`; never the original, never one already run, never when one profile still gains or
the budget limits (saturation at or above 1)."""

from __future__ import annotations

from orchestrator.bench.stats import Acceptance
from orchestrator.bench.tune_plan import BASELINE, expand, parse_set
from orchestrator.bench.tune_rule import Cell, axis, cannot_win, profile_table

KEY = "vllm.speculative_config.num_speculative_tokens"
RECIPE = "name: r\nvllm:\n  speculative_config:\n    method: mtp\n    num_speculative_tokens: 8\n"
# expand(2,4,6,8): 0 k2, 1 k4, 2 k6, 3 k8 (original), 4 no speculation
LABELS = ["k2", "k4", "k6", "k8 (original)", BASELINE]
LINE = [(2.0, 0), (4.0, 1), (6.0, 2), (8.0, 3)]


def _acc(k: int, tokens_per_step: float) -> Acceptance:
    drafts = 100.0
    accepted = (tokens_per_step - 1) * drafts
    return Acceptance(drafts, k * drafts, accepted, (accepted,), k, "recipe")


def _cell(i: int, level: float, k: int | None, tokens_per_step: float, wobble: float = 0.01) -> Cell:
    shots = [level * (1 + d) for d in (-wobble, -wobble / 2, 0, 0, wobble / 2, wobble)]
    return Cell(i, [level], shots, _acc(k, tokens_per_step) if k else None)


def _tables(code: dict[int, tuple[float, float]], chat: dict[int, tuple[float, float]], wobble: float = 0.01):
    k = {0: 2, 1: 4, 2: 6, 3: 8, 4: None}
    return [profile_table(name, [_cell(i, lvl, k[i], tps, wobble) for i, (lvl, tps) in rows.items()], 4)
            for name, rows in (("code", code), ("chat", chat))]


def test_the_axis_is_one_numeric_key_ascending_without_the_baseline():
    variants = expand(RECIPE, [parse_set(f"{KEY}=6,2,4")])
    line = axis([v.changes for v in variants], {4})
    assert [(x, variants[i].label) for x, i in line] == [
        (2.0, "num_speculative_tokens=2"), (4.0, "num_speculative_tokens=4"), (6.0, "num_speculative_tokens=6"),
        (8.0, "num_speculative_tokens=8 (original)")]
    words = expand(RECIPE, [parse_set("vllm.moe_backend=auto,flashinfer_b12x,cutlass")])
    assert axis([v.changes for v in words], {len(words) - 1}) is None  # not ordered
    two = expand(RECIPE, [parse_set(f"{KEY}=2,4"), parse_set("vllm.moe_backend=auto,cutlass")])
    assert axis([v.changes for v in two], {len(two) - 1}) is None  # two keys: no single direction


def test_a_losing_direction_with_low_saturation_skips_the_larger_values_not_the_original():
    tables = _tables(code={0: (300, 2.9), 1: (250, 2.6), 4: (150, 1)}, chat={0: (250, 2.3), 1: (220, 2.6), 4: (150, 1)})
    skipped = cannot_win(tables, LINE, LABELS, started={0, 1, 4}, keep={3})
    assert list(skipped) == [2]  # k6; k8 is the original and is measured whatever
    assert skipped[2].startswith("k4 is below a smaller value by more than the spread")
    assert "code: -16.7% against k2" in skipped[2] and "saturation 65%" in skipped[2] and "chat: -12.0%" in skipped[2]


def test_no_skip_when_one_profile_still_gains():
    tables = _tables(code={0: (300, 2.9), 1: (400, 3.8), 4: (150, 1)}, chat={0: (250, 2.3), 1: (220, 2.6), 4: (150, 1)})
    assert cannot_win(tables, LINE, LABELS, started={0, 1, 4}, keep={3}) == {}


def test_no_skip_when_the_budget_limits():
    """Saturation at 100% or more: every draft position is taken, a larger budget may pay."""
    tables = _tables(code={0: (300, 2.9), 1: (250, 4.4), 4: (150, 1)}, chat={0: (250, 2.3), 1: (220, 4.2), 4: (150, 1)})
    assert cannot_win(tables, LINE, LABELS, started={0, 1, 4}, keep={3}) == {}


def test_no_skip_within_the_spread():
    tables = _tables(code={0: (300, 2.9), 1: (290, 2.6), 4: (150, 1)}, chat={0: (250, 2.3), 1: (240, 2.6), 4: (150, 1)},
                     wobble=0.1)  # shots spread 20%: -3% and -4% are noise
    assert cannot_win(tables, LINE, LABELS, started={0, 1, 4}, keep={3}) == {}


def test_only_values_not_yet_started_are_skipped():
    tables = _tables(code={0: (300, 2.9), 1: (250, 2.6), 2: (200, 2.2), 4: (150, 1)},
                     chat={0: (250, 2.3), 1: (220, 2.6), 2: (180, 2.2), 4: (150, 1)})
    assert list(cannot_win(tables, LINE, LABELS, started={0, 1, 2, 4}, keep=set())) == [3]
    assert cannot_win(tables, LINE, LABELS, started={0, 1, 2, 3, 4}, keep=set()) == {}


def test_a_skipped_variant_has_no_median_and_cannot_be_the_best():
    cells = [_cell(0, 300, 2, 2.9), Cell(2, [], [], None, skipped="k4 is below ..."), _cell(4, 150, None, 1)]
    table = profile_table("code", cells, 4)
    assert table.best == 0 and cells[1].median is None and table.as_dict(LABELS)["rows"][1]["skipped"]


def test_the_table_says_skipped_cannot_win_and_why():
    from orchestrator.bench.render_tune import lines
    from orchestrator.bench.tune import TuneResult

    variants = expand(RECIPE, [parse_set(f"{KEY}=2,4,6")])  # 2, 4, 6, 8 (original), no speculation
    result = TuneResult("r.yaml", variants, [0, 1, 2, 3, 4], skipped={2: "k4 is below k2 (code: -16.7%)"})
    result.tables = _tables(code={0: (300, 2.9), 1: (250, 2.6), 3: (200, 2), 4: (150, 1)},
                            chat={0: (250, 2.3), 1: (220, 2.6), 3: (180, 2), 4: (150, 1)})
    for t in result.tables:
        t.cells.insert(2, Cell(2, [], [], None, skipped=result.skipped[2]))
    text = lines(result)
    rows = [ln for ln in text if ln.startswith("  num_speculative_tokens=6 ")]
    assert len(rows) == 2 and all("skipped: cannot win" in r for r in rows)
    assert "num_speculative_tokens=6: skipped: cannot win (k4 is below k2 (code: -16.7%))" in text
