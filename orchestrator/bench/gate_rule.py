"""The upgrade gate's rule (`up RECIPE --gate`), pure: per profile, is B (the candidate) slower than A (the
release that served) by more than the noise says it could be?

A single run's absolute tok/s moves between sittings; the ratio of interleaved A and B blocks measured with
the same shots is the stable number (field notes 16 and 21). So the gate judges B/A, not B, and its bound is
the larger of the measured spread (what the two releases' own shots say the noise is) and the user's
tolerance (the smallest loss worth refusing an upgrade for): B is kept only when every gated profile's
B/A >= 1 - max(spread, tolerance). B/A is made of block medians, so the spread is how far a side's block
medians move between blocks (the drift, note 21) — one late shot on a busy machine moves a median of
shots little, and the max-min of shots a lot; with one block on a side there is no drift yet, and the
spread of that side's shots stands in.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from enum import StrEnum

from . import stats


class GateVerdict(StrEnum):
    KEPT = "kept"  # B serves
    REJECTED = "rejected"  # A serves again


class ProfileVerdict(StrEnum):
    WITHIN = "within"  # B/A at or above the bound
    BELOW = "below"  # B/A under the bound: B loses more than the noise explains
    UNMEASURED = "unmeasured"  # a side has no kept shot: nothing proves B is not slower


@dataclass(frozen=True)
class Judgment:
    """One profile's figures and verdict, as recorded with B's release."""

    profile: str
    a: float | None  # median of A's block medians, decode tok/s
    b: float | None
    ratio: float | None  # b / a
    interval: tuple[float, float] | None  # the ratio's interval (see ratio_interval)
    interval_kind: str  # "95% CI" or "min-max"
    spread: float  # the larger of A's and B's (see spread_of)
    tolerance: float  # --tolerance
    bound: float  # 1 - max(spread, tolerance)
    verdict: ProfileVerdict

    def as_dict(self) -> dict:
        return {"profile": self.profile, "a": self.a, "b": self.b, "ratio": self.ratio,
                "interval": list(self.interval) if self.interval else None, "interval_kind": self.interval_kind,
                "spread": self.spread, "tolerance": self.tolerance, "bound": self.bound, "verdict": str(self.verdict)}

    def text(self) -> str:
        """`zh B/A 0.801 (95% CI 0.792-0.811) below the bound 0.970 = 1 - max(spread 1.2%, tolerance 3.0%)`."""
        if self.ratio is None:
            return f"{self.profile}: not measured on both releases"
        span = f" ({self.interval_kind} {self.interval[0]:.3f}-{self.interval[1]:.3f})" if self.interval else ""
        word = "below" if self.verdict is ProfileVerdict.BELOW else "within"
        return (f"{self.profile} B/A {self.ratio:.3f}{span} {word} the bound {self.bound:.3f} "
                f"(1 - max(spread {self.spread:.1%}, tolerance {self.tolerance:.1%}))")


def spread_of(blocks: list[float], shots: list[float]) -> float:
    """One side's noise: (max - min) / mean of its block medians with two blocks or more, else the
    (max - min) / median of its shots (field note 16)."""
    if len(blocks) > 1:
        return (max(blocks) - min(blocks)) / statistics.mean(blocks)
    return stats.summarize(shots).spread


def ratio_interval(a: list[float], b: list[float]) -> tuple[tuple[float, float], str] | None:
    """B/A's interval from each side's shots: B's median CI over A's (low/high, high/low), distribution-free
    (stats.median_ci); with fewer than 6 shots on a side, B's range over A's (min/max, max/min)."""
    ca, cb = stats.median_ci(a), stats.median_ci(b)
    if ca and cb and ca[0] > 0:
        return (cb[0] / ca[1], cb[1] / ca[0]), "95% CI"
    if a and b and min(a) > 0:
        return (min(b) / max(a), max(b) / min(a)), "min-max"
    return None


def judge(profile: str, a_blocks: list[float], b_blocks: list[float], a_shots: list[float], b_shots: list[float],
          tolerance: float) -> Judgment:
    """One profile: B/A = the median of B's block medians over A's (as `bench --compare`), its interval, the
    spread of every shot of each side, and the verdict against 1 - max(spread, tolerance)."""
    if not a_blocks or not b_blocks or not a_shots or not b_shots:
        return Judgment(profile, None, None, None, None, "", 0.0, tolerance, 1 - tolerance,
                        ProfileVerdict.UNMEASURED)
    a, b = statistics.median(a_blocks), statistics.median(b_blocks)
    ratio = b / a
    spread = max(spread_of(a_blocks, a_shots), spread_of(b_blocks, b_shots))
    bound = 1 - max(spread, tolerance)
    interval = ratio_interval(a_shots, b_shots)
    verdict = ProfileVerdict.BELOW if ratio < bound else ProfileVerdict.WITHIN
    return Judgment(profile, a, b, ratio, interval[0] if interval else None, interval[1] if interval else "",
                    spread, tolerance, bound, verdict)


def overall(judgments: list[Judgment]) -> tuple[GateVerdict, list[Judgment]]:
    """Kept when every profile is within its bound; else rejected, with the profiles that were not."""
    failing = [j for j in judgments if j.verdict is not ProfileVerdict.WITHIN]
    return (GateVerdict.REJECTED if failing or not judgments else GateVerdict.KEPT), failing
