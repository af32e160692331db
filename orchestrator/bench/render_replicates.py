"""The terminal view of `bench --replicates`: per profile and level, each replicate's median and spread,
the spread between replicates, the capacity figure, and every replicate left out with the reason."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .replicates import ReplicatesResult


def show(console: Console, result: ReplicatesResult) -> None:
    t = Table(title=f"bench --replicates {len(result.replicates)}: {escape(result.recipe)}, "
                    f"release {result.release} (restarted between replicates)")
    for col in ("profile", "c", "replicate medians tok/s (spread within)", "between", "95% t interval (used)",
                "capacity tok/s"):
        t.add_column(col, overflow="fold")
    notes = []
    for profile, c, cap in result.capacities():
        out = {o.replicate for o in cap.outliers}
        medians = " ".join((f"[red]{m:.1f}[/]" if r in out else f"{m:.1f}") + f" ({w:.1%})"
                           for r, m, w in zip(cap.replicates, cap.medians, cap.within))
        between = f"{cap.between:.1%}" if cap.between is not None else "-"
        interval = f"{cap.interval[0]:.1f}-{cap.interval[1]:.1f}" if cap.interval else "-"
        figure = f"[bold]{cap.capacity:.1f}[/]" if cap.capacity is not None else "-"
        t.add_row(escape(profile), str(c), medians, between, interval, figure)
        notes += [f"{escape(profile)} c={c}: {escape(o.words())}" for o in cap.outliers]
        if cap.why_none:
            notes.append(f"{escape(profile)} c={c}: no capacity figure: {escape(cap.why_none)}")
    console.print(t)
    for line in notes:
        console.print(f"[yellow]{line}[/]")
    console.print("capacity = the lower bound of the 95% t interval of the mean of the replicate medians used "
                  "(docs/bench.md)")
    for r in result.replicates:
        for g in r.groups:
            if g.discarded:
                console.print(f"replicate {r.number} {escape(g.profile)} c={g.concurrency}: {len(g.discarded)} shot(s) "
                              "discarded: " + "; ".join(f"{s.discarded}: {escape(s.why)}" for s in g.discarded))
