"""The terminal view: one row per configuration and profile with a strip of its shots, then the
discarded shots with their reasons, the advice, and the ceiling with its hypothesis table."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .report import BenchResult
from .runner import Group

BARS = "▁▂▃▄▅▆▇█"


def strip(g: Group) -> str:
    """Shots in the order taken: a bar per kept shot (scaled min..max), · warm-up, × discarded."""
    values = g.decode_values()
    lo, hi = (min(values), max(values)) if values else (0.0, 0.0)
    out = []
    for s in g.shots:
        if not s.ok:
            out.append("[red]×[/]")
        elif s.warmup:
            out.append("[dim]·[/]")
        elif s.decode_tps is not None:
            i = 0 if hi == lo else round((s.decode_tps - lo) / (hi - lo) * (len(BARS) - 1))
            out.append(BARS[i])
    return "".join(out)


def _f(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(result: BenchResult) -> Table:
    t = Table(title=f"bench: {escape(result.target.get('model', '?'))} at {escape(result.target.get('url', '?'))}")
    for col in ("profile", "c", "shots", "decode tok/s (median, min-max)", "spread", "strip", "aggregate tok/s",
                "tokens/step", "accept", "saturation", "TTFT cold", "TTFT warm (cached)"):
        t.add_column(col, overflow="fold")
    for g in result.groups:
        head, acc, agg, ttft = g.headline(), g.acceptance(), g.aggregate(), g.ttft_cold()
        decode = "-"
        spread = "-"
        if head is not None:
            s = head.summary
            decode = f"{s.median:.1f} ({s.min:.1f}-{s.max:.1f})"
            if head.provisional:
                decode = f"[yellow]{decode} provisional[/]"
            spread = f"{s.spread:.1%}"
        warm = "-"
        if g.warm is not None:
            warm = (f"{g.warm.ttft_s * 1000:.0f} ms ({g.warm.cached_tokens} cached)"
                    if g.warm.ttft_s is not None else escape(g.warm.error or "-"))
        t.add_row(escape(g.profile), str(g.concurrency), f"{len(g.kept)}" + (f" (+{len(g.discarded)} ×)" if g.discarded else ""),
                  decode, spread, strip(g), _f(agg.median) if agg and g.concurrency > 1 else "-",
                  _f(acc.tokens_per_step, "{:.2f}") if acc else "-",
                  _f(acc.acceptance_rate, "{:.0%}") if acc else "-",
                  _f(acc.saturation, "{:.0%}") + f" of k={acc.budget}" if acc else "-",
                  f"{ttft.median * 1000:.0f} ms" if ttft else "-", warm)
    return t


def show(console: Console, result: BenchResult) -> None:
    console.print(table(result))
    for g in result.groups:
        head = g.headline()
        if head is not None and head.advice:
            console.print(f"[yellow]{escape(g.profile)} c={g.concurrency}[/]: {escape(head.advice)}")
        if g.stopped:
            console.print(f"[yellow]{escape(g.profile)} c={g.concurrency}[/]: {escape(g.stopped)}")
        acc = g.acceptance()
        if acc is not None and acc.per_pos:
            rates = " ".join(f"{r:.0%}" for r in acc.per_pos_rates)
            console.print(f"{escape(g.profile)} c={g.concurrency}: accepted per draft position: {rates}")
    dropped = [(g, s) for g in result.groups for s in g.discarded]
    if dropped:
        console.print(f"[bold]discarded shots[/] ({len(dropped)}, not averaged):")
        for g, s in dropped:
            console.print(f"  {escape(g.profile)} c={g.concurrency} shot {s.index}: [red]{s.discarded}[/] "
                          f"{escape(s.why)}")
    cd = result.ceiling_dict()
    if cd is None:
        return
    if "error" in cd:
        console.print(f"[yellow]ceiling not computed[/]: {escape(cd['error'])}")
        return
    console.print(f"[bold]ceiling[/] (note 18): {cd['nodes']} node(s) x {cd['bandwidth'] / 1e9:.0f} GB/s / "
                  f"{cd['bytes_per_token'] / 1e9:.4g} GB per token = {cd['ceiling_tps']:.2f} steps/s "
                  f"(headers of {cd['shards']} shard(s) on {escape(cd['node'])}: {cd['bytes_read']:,} bytes read)")
    for p, frac in cd["of_ceiling"].items():
        if frac is not None:
            console.print(f"  {escape(p)}: {cd['steps_per_s'][p]:.2f} steps/s = {frac:.1%} of the ceiling")
    ht = Table(title="hypotheses (a measured speed above a ceiling refutes it)")
    for col in ("weights read", "GB per token", "ceiling steps/s", "measured / ceiling", "verdict"):
        ht.add_column(col)
    for row in cd["hypotheses"]:
        verdict = row["verdict"]
        style = "bold red" if verdict == "refuted" else "green" if verdict == "possible" else "dim"
        ht.add_row(row["hypothesis"], f"{row['bytes_per_token'] / 1e9:.4g}", f"{row['ceiling_tps']:.2f}",
                   _f(row["of_ceiling"], "{:.1%}"), f"[{style}]{verdict}[/]")
    console.print(ht)


def show_compare(console: Console, result) -> None:
    """`--compare`: B/A per profile and level, with each recipe's drift between its blocks (note 21)."""
    blocks = "".join(b.label for b in result.blocks)
    t = Table(title=f"bench --compare: A = {escape(result.recipes['A'])}, B = {escape(result.recipes['B'])}, "
                    f"blocks {blocks}")
    for col in ("profile", "c", "A blocks (median tok/s)", "B blocks", "B/A", "A drift", "B drift"):
        t.add_column(col, overflow="fold")
    for r in result.rows():
        t.add_row(escape(r["profile"]), str(r["concurrency"]), " ".join(f"{v:.1f}" for v in r["a_blocks"]),
                  " ".join(f"{v:.1f}" for v in r["b_blocks"]), _f(r["ratio"], "{:.3f}x"),
                  _f(r["a_drift"], "{:.1%}"), _f(r["b_drift"], "{:.1%}"))
    console.print(t)
    for b in result.blocks:
        for g in b.groups:
            if g.discarded:
                console.print(f"block {b.label} (release {b.release}) {escape(g.profile)} c={g.concurrency}: "
                              f"{len(g.discarded)} shot(s) discarded: "
                              + "; ".join(f"{s.discarded}: {escape(s.why)}" for s in g.discarded))
    console.print(f"afterwards: {escape(result.restored)}")
