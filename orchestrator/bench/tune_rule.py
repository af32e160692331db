"""`spark-deploy tune`'s table and winner, pure: per profile and variant the median of its block medians,
the interval of its shots' median, the ratio to the no-speculation baseline measured in the same run, and
acceptance per draft position; then one winner for the recipe.

The ratio to a baseline of the same sitting is the stable number (field notes 16 and 21), and a difference
smaller than the noise is not a difference: a profile's best is named "within the noise" of the next
unless it beats it by more than the larger of their spreads (gate_rule.spread_of: the drift of block
medians) AND the interval of best/next lies wholly above 1 (gate_rule.ratio_interval: block medians can
agree while the shots behind them spread 15%). The winner replaces the original only when it beats it by
more than the spread, the gate's rule. One recipe serves every
profile, so the winner is the variant with the best geometric mean over the profiles of its ratio to the
original (each profile weighs the same); the per-profile bests say what a workload alone would pick.

A direction is stopped early (`cannot_win`): on an ordered numeric key (one --set, every value a number), a
variant below the best smaller value by more than the spread on every profile, while its saturation says
the budget does not limit (tokens per step under the budget), cannot be beaten by a larger value: more
draft positions that are rarely accepted only add their cost. Larger values not yet started are skipped.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from . import stats
from .gate_rule import ratio_interval, spread_of


LOW_SATURATION = 1.0  # tokens per step / budget below 1: fewer tokens per step than draft positions


@dataclass
class Cell:
    """One variant on one profile."""

    variant: int  # index into the variants
    blocks: list[float]  # its block medians, decode tok/s
    shots: list[float]  # every kept shot
    acceptance: stats.Acceptance | None
    median: float | None = None
    interval: tuple[float, float] | None = None  # 95% CI of the shots' median, else their min-max
    interval_kind: str = ""
    spread: float = 0.0
    ratio: float | None = None  # median / the baseline's median
    ratio_interval: tuple[float, float] | None = None
    skipped: str = ""  # why this variant was never run ("" = it was)

    def as_dict(self) -> dict:
        acc = self.acceptance
        return {"variant": self.variant, "skipped": self.skipped, "median": self.median, "blocks": self.blocks,
                "interval": list(self.interval) if self.interval else None, "interval_kind": self.interval_kind,
                "spread": self.spread, "ratio": self.ratio,
                "ratio_interval": list(self.ratio_interval) if self.ratio_interval else None,
                "per_position": [round(r, 4) for r in acc.per_pos_rates] if acc else None,
                "tokens_per_step": acc.tokens_per_step if acc else None,
                "saturation": acc.saturation if acc else None, "shots": len(self.shots)}


@dataclass
class ProfileTable:
    profile: str
    cells: list[Cell]
    best: int | None = None  # variant index
    runner_up: int | None = None
    margin: float | None = None  # best / runner-up - 1
    spread: float = 0.0  # the larger of the two's spreads
    interval: tuple[float, float] | None = None  # best / runner-up's interval
    decided: bool = False  # the best beats the runner-up beyond the spread and its interval is above 1

    def verdict(self, labels: list[str]) -> str:
        if self.best is None:
            return "nothing measured"
        if self.runner_up is None:
            return f"best: {labels[self.best]}"
        span = f"[{self.interval[0]:.2f}-{self.interval[1]:.2f}]" if self.interval else "[no interval]"
        word = "beyond the noise" if self.decided else "within the noise"
        return (f"best: {labels[self.best]} (+{self.margin:.1%} over {labels[self.runner_up]}, {word}: spread "
                f"{self.spread:.1%}, interval {span})")

    def as_dict(self, labels: list[str]) -> dict:
        return {"profile": self.profile, "best": self.best, "runner_up": self.runner_up, "margin": self.margin,
                "spread": self.spread,
                "interval": list(self.interval) if self.interval else None, "decided": self.decided, "verdict": self.verdict(labels),
                "rows": [c.as_dict() for c in self.cells]}


@dataclass
class Winner:
    variant: int  # the variant left serving (the original when nothing beats it beyond the spread)
    best: int | None  # the best geometric mean, whether or not it won
    score: dict[int, float] = field(default_factory=dict)  # variant -> geometric mean of ratios to the original
    spread: float = 0.0
    reason: str = ""


def _fill(cell: Cell, base: Cell | None) -> None:
    if not cell.blocks or not cell.shots:
        return
    cell.median = statistics.median(cell.blocks)
    ci = stats.median_ci(cell.shots)
    cell.interval, cell.interval_kind = (ci, "95% CI") if ci else ((min(cell.shots), max(cell.shots)), "min-max")
    cell.spread = spread_of(cell.blocks, cell.shots)
    if base is not None and base.blocks and base.shots:
        cell.ratio = cell.median / statistics.median(base.blocks)
        ri = ratio_interval(base.shots, cell.shots)
        cell.ratio_interval = ri[0] if ri else None


def profile_table(profile: str, cells: list[Cell], baseline: int | None) -> ProfileTable:
    """The figures of every variant on one profile, and its best (and whether the spread decides it)."""
    base = next((c for c in cells if c.variant == baseline), None)
    for cell in cells:
        _fill(cell, base)
    table = ProfileTable(profile, cells)
    ranked = sorted((c for c in cells if c.median is not None), key=lambda c: c.median, reverse=True)
    if ranked:
        table.best = ranked[0].variant
    if len(ranked) > 1:
        first, second = ranked[0], ranked[1]
        table.runner_up = second.variant
        table.margin = first.median / second.median - 1
        table.spread = max(first.spread, second.spread)
        ri = ratio_interval(second.shots, first.shots)
        table.interval = ri[0] if ri else None
        table.decided = table.margin > table.spread and table.interval is not None and table.interval[0] > 1
    return table


def winner(tables: list[ProfileTable], original: int, labels: list[str]) -> Winner:
    """The variant with the best geometric mean of median / original's median over the profiles; it wins
    only when that mean beats 1 by more than the larger spread of it and the original on any profile."""
    medians = {t.profile: {c.variant: c.median for c in t.cells if c.median is not None} for t in tables}
    spreads = {t.profile: {c.variant: c.spread for c in t.cells} for t in tables}
    if not tables or any(original not in m for m in medians.values()):
        return Winner(original, None, reason="the original was not measured on every profile: it stays")
    score = {}
    for v in range(len(labels)):
        if all(v in m for m in medians.values()):
            score[v] = math.exp(statistics.mean(math.log(m[v] / m[original]) for m in medians.values()))
    best = max(score, key=score.get)
    spread = max(max(spreads[p].get(best, 0.0), spreads[p].get(original, 0.0)) for p in spreads)
    result = Winner(original, best, score, spread)
    if best == original:
        result.reason = f"the original ({labels[original]}) measured best: it stays"
    elif score[best] - 1 > spread:
        result.variant = best
        result.reason = (f"{labels[best]} beats the original ({labels[original]}) by {score[best] - 1:+.1%} "
                         f"(geometric mean over {', '.join(medians)}), beyond the spread {spread:.1%}")
    else:
        result.reason = (f"{labels[best]} is {score[best] - 1:+.1%} over the original ({labels[original]}), within "
                         f"the spread {spread:.1%}: the original stays")
    return result


def axis(changes: list[tuple[tuple[str, object], ...]], fixed: set[int]) -> list[tuple[float, int]] | None:
    """(value, variant) along an ordered numeric key, ascending: every variant but those in `fixed` (the
    baseline) changes the same one key to a number; None when the variants are not such a line."""
    points, keys = [], set()
    for i, change in enumerate(changes):
        if i in fixed:
            continue
        if len(change) != 1:
            return None
        key, value = change[0]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        keys.add(key)
        points.append((float(value), i))
    return sorted(points) if len(keys) == 1 and len(points) > 2 else None


def cannot_win(tables: list[ProfileTable], line: list[tuple[float, int]], labels: list[str],
               started: set[int], keep: set[int]) -> dict[int, str]:
    """Variants along `line` not yet started (and not in `keep`: the original) that cannot win: a larger
    value than one measured below the best smaller value by more than the spread on every profile, with
    low saturation there. -> {variant: why}."""
    if not tables:
        return {}
    cells = [{c.variant: c for c in t.cells} for t in tables]
    for n, (value, v) in enumerate(line):
        smaller = [u for _, u in line[:n]]
        why = []
        for table, by in zip(tables, cells):
            cell = by.get(v)
            measured = [by[u] for u in smaller if u in by and by[u].median is not None]
            if cell is None or cell.median is None or not measured or cell.acceptance is None:
                break
            best = max(measured, key=lambda c: c.median)
            spread = max(cell.spread, best.spread)
            sat = cell.acceptance.saturation
            if not (cell.median < best.median * (1 - spread) and sat < LOW_SATURATION):
                break
            why.append(f"{table.profile}: {cell.median / best.median - 1:+.1%} against {labels[best.variant]}, "
                       f"spread {spread:.1%}, saturation {sat:.0%}")
        else:
            reason = (f"{labels[v]} is below a smaller value by more than the spread with the budget not limiting ("
                      + "; ".join(why) + ")")
            return {u: reason for _, u in line[n + 1:] if u not in started and u not in keep}
    return {}
