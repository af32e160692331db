"""Pure: a new run of the fabric test against the baseline. A direction below `min_fraction` of its
baseline figure is a drop, named by its link (spark-1↔spark-2), its direction and both figures."""

from __future__ import annotations

from dataclasses import dataclass

from .baseline import Figures

DEFAULT_MIN_FRACTION = 0.8


@dataclass(frozen=True)
class Compared:
    link: str  # spark-1↔spark-2
    direction: str  # spark-2→spark-1
    nodes: tuple[str, str]
    now_gbit: float
    base_gbit: float
    min_fraction: float

    @property
    def fraction(self) -> float:
        return self.now_gbit / self.base_gbit if self.base_gbit > 0 else 1.0

    @property
    def dropped(self) -> bool:
        return self.fraction < self.min_fraction

    def said(self) -> str:
        verdict = f"below {self.min_fraction:.0%}" if self.dropped else "ok"
        return (f"{self.link} ({self.direction}): {gbit(self.now_gbit)} now, baseline {gbit(self.base_gbit)} "
                f"({self.fraction:.0%}, {verdict})")


@dataclass(frozen=True)
class Judgment:
    compared: list[Compared]
    unmatched: list[str]  # links or directions measured now that the baseline lacks (or the other way round)
    method_changed: str = ""  # the baseline was measured another way: the figures are not comparable

    @property
    def drops(self) -> list[Compared]:
        return [c for c in self.compared if c.dropped]


def gbit(value: float) -> str:
    return f"{value:.3g} Gbit/s" if value < 10 else f"{value:.1f} Gbit/s"


def judge(baseline: Figures, now: Figures, min_fraction: float = DEFAULT_MIN_FRACTION) -> Judgment:
    if baseline.method != now.method:
        return Judgment([], [], f"the baseline was measured with {baseline.method}, this run with {now.method}: "
                                "record a new one with `fabric test --save`")
    compared, unmatched = [], []
    for link in now.links:
        base = baseline.link(link.a, link.b)
        if base is None:
            unmatched.append(f"{link.name}: not in the baseline")
            continue
        old = {d.name: d for d in base.directions}
        for d in link.directions:
            if d.name not in old:
                unmatched.append(f"{d.name}: not in the baseline")
                continue
            compared.append(Compared(link.name, d.name, (d.src, d.dst), d.gbit_s, old[d.name].gbit_s, min_fraction))
    for link in baseline.links:
        if now.link(link.a, link.b) is None:
            unmatched.append(f"{link.name}: in the baseline, not measured now")
    return Judgment(compared, unmatched)
