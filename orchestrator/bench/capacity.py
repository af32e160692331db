"""The capacity figure of `bench --replicates N`: what to plan from when one run after a start can lie.

Field note 16: a first run said 69.3 tok/s, four re-runs 38-42. One sitting's median is not a capacity.
Each replicate (a fresh engine process) gives one median per profile and level; from those:

- a replicate whose median lies outside the 95% **prediction interval** of the others (where one more
  replicate like them falls 95% of the time: mean ± t · s · √(1 + 1/m) over the m others) is named and
  left out. A prediction interval, not the others' confidence interval: that one bounds their *mean*, and
  an honest replicate falls outside it about one time in six with three others;
- **capacity** = the lower bound of the 95% **t interval** of the mean of the replicates used
  (mean − t(0.975, n−1) · s / √n). A t interval, not a bootstrap: with 3-10 replicates a bootstrap cannot
  reach outside [min, max] and under-covers, while a replicate median (itself a median of shots) is close to
  normal. It needs 2 replicates; the t quantiles are tabled (no scipy).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

# t(0.975, df) for df = 1..30; above 30 the normal quantile is within 4%
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z975 = 1.960


def t975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError("a t interval needs at least 2 values")
    return T975[df - 1] if df <= len(T975) else Z975


def mean_interval(values: list[float]) -> tuple[float, float] | None:
    """95% t interval of the mean; None with fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    mean, half = statistics.mean(values), t975(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean - half, mean + half


def prediction_interval(values: list[float]) -> tuple[float, float] | None:
    """95% interval for one more value drawn like these; None with fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    mean, half = statistics.mean(values), t975(n - 1) * statistics.stdev(values) * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


@dataclass(frozen=True)
class Outlier:
    replicate: int  # 1-based, in the order run
    median: float
    others: tuple[float, float]  # the others' prediction interval
    others_range: tuple[float, float]  # their min and max, as a reader quotes them

    def words(self, first_after_start: bool = True) -> str:
        lo, hi = self.others_range
        where = " (first run after start)" if self.replicate == 1 and first_after_start else ""
        return (f"replicate {self.replicate}{where}: {self.median:.1f} vs {lo:.1f}-{hi:.1f} tok/s "
                f"(outside the others' 95% prediction interval {self.others[0]:.1f}-{self.others[1]:.1f}) "
                "— not used for capacity")


@dataclass
class Capacity:
    """One profile and level over the replicates."""

    medians: list[float]  # per replicate, in order (None-free: a replicate without a kept shot is left out)
    replicates: list[int]  # their 1-based numbers
    within: list[float]  # per replicate, its shots' spread (max - min) / median
    outliers: list[Outlier] = field(default_factory=list)
    interval: tuple[float, float] | None = None  # 95% t interval of the mean of the used medians
    why_none: str = ""  # why there is no capacity figure

    @property
    def used(self) -> list[float]:
        out = {o.replicate for o in self.outliers}
        return [m for r, m in zip(self.replicates, self.medians) if r not in out]

    @property
    def capacity(self) -> float | None:
        return self.interval[0] if self.interval else None

    @property
    def between(self) -> float | None:
        """(max - min) / mean of the replicate medians: the spread between replicates."""
        if len(self.medians) < 2:
            return None
        return (max(self.medians) - min(self.medians)) / statistics.mean(self.medians)

    def as_dict(self) -> dict:
        return {"medians": self.medians, "replicates": self.replicates, "within_spread": self.within,
                "between_spread": self.between, "used": self.used,
                "outliers": [{"replicate": o.replicate, "median": o.median, "others_interval": list(o.others),
                              "others_range": list(o.others_range), "why": o.words()} for o in self.outliers],
                "interval": list(self.interval) if self.interval else None, "capacity": self.capacity,
                "method": "lower bound of the 95% t interval of the mean of the replicate medians",
                "why_none": self.why_none or None}


def outliers(medians: list[float], replicates: list[int]) -> list[Outlier]:
    """Each replicate held against the prediction interval of all the others (needs 3 or more)."""
    found = []
    for i, (r, m) in enumerate(zip(replicates, medians)):
        others = medians[:i] + medians[i + 1:]
        pi = prediction_interval(others)
        if pi is not None and not pi[0] <= m <= pi[1]:
            found.append(Outlier(r, m, pi, (min(others), max(others))))
    return found


def capacity(medians: list[float], replicates: list[int], within: list[float]) -> Capacity:
    """The capacity figure: outliers named and left out, then the t interval's lower bound."""
    cap = Capacity(list(medians), list(replicates), list(within))
    if len(medians) < 2:
        cap.why_none = f"{len(medians)} replicate(s) with kept shots: an interval needs 2"
        return cap
    cap.outliers = outliers(medians, replicates)
    used = cap.used
    if len(used) < 2:
        cap.why_none = "the replicates disagree with each other: fewer than 2 are left once the outliers are out"
        return cap
    cap.interval = mean_interval(used)
    return cap
