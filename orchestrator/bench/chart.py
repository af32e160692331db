"""The PNG of `--report DIR`: every kept shot per configuration and profile, with its median.

matplotlib is an optional extra (`pip install 'spark-deploy[plot]'`); without it the report says so.
"""

from __future__ import annotations

from pathlib import Path

from .runner import Group

INSTALL = "pip install 'spark-deploy[plot]' (matplotlib) to get the chart"


def draw(groups: list[Group], path: Path) -> tuple[Path | None, str | None]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, f"no chart: matplotlib is not installed; {INSTALL}"
    shown = [g for g in groups if g.shots]
    if not shown:
        return None, "no chart: no shots"
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(shown) + 2), 4.5))
    labelled = False  # the "discarded" legend entry, once, only when there are any
    for x, g in enumerate(shown):
        kept = g.decode_values()
        ax.scatter([x] * len(kept), kept, s=18, alpha=0.7, color="tab:blue", zorder=3,
                   label="kept shot" if x == 0 else None)
        dropped = [s.decode_tps for s in g.discarded if s.decode_tps is not None]
        if dropped:
            ax.scatter([x] * len(dropped), dropped, s=22, marker="x", color="tab:red", zorder=3,
                       label=None if labelled else "discarded")
            labelled = True
        head = g.headline()
        if head is not None:
            ax.hlines(head.summary.median, x - 0.3, x + 0.3, color="black", linewidth=2, zorder=4,
                      label="median" if x == 0 else None)
            tag = " (provisional)" if head.provisional else ""
            ax.annotate(f"{head.summary.median:.1f}{tag}", (x + 0.32, head.summary.median), fontsize=8,
                        va="center")
    ax.set_xticks(range(len(shown)), [f"{g.profile}\nc={g.concurrency}" for g in shown])
    ax.set_ylabel("decode tok/s per request")
    ax.set_title("spark-deploy bench: every shot")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path, None
