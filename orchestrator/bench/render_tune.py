"""`spark-deploy tune`'s table as plain text lines, shaped like the field reports' (median, interval, ratio
to the no-speculation baseline, acceptance per draft position, saturation): printed, and written as YAML
comments at the top of the winner's recipe file."""

from __future__ import annotations

from .tune import TuneResult

COLUMNS = ("variant", "tok/s", "interval", "x baseline", "accepted per position", "sat.")


def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def rows(result: TuneResult, profile_index: int) -> list[tuple[str, ...]]:
    table = result.tables[profile_index]
    out = []
    for cell in table.cells:
        v = result.variants[cell.variant]
        acc = cell.acceptance
        mark = " *" if cell.variant == table.best else ""
        if cell.skipped:
            out.append((v.label, "-", "-", "skipped: cannot win", "-", "-"))
            continue
        span = f"{cell.interval[0]:.1f}-{cell.interval[1]:.1f}" if cell.interval else "-"
        ratio = "1.00 (baseline)" if v.baseline else (
            f"{cell.ratio:.2f}" + (f" [{cell.ratio_interval[0]:.2f}-{cell.ratio_interval[1]:.2f}]"
                                   if cell.ratio_interval else "") if cell.ratio is not None else "-")
        per_pos = "/".join(f"{r:.3f}" for r in acc.per_pos_rates) if acc else "-"
        out.append((v.label + mark, _num(cell.median, ".1f"), span, ratio, per_pos,
                    f"{acc.saturation:.0%}" if acc else "-"))
    return out


def lines(result: TuneResult) -> list[str]:
    """Every profile's table, its verdict, then the winner."""
    text: list[str] = []
    for i, table in enumerate(result.tables):
        body = [COLUMNS, *rows(result, i)]
        widths = [max(len(r[c]) for r in body) for c in range(len(COLUMNS))]
        kinds = sorted({c.interval_kind for c in table.cells if c.interval_kind})
        text.append(f"{table.profile} (decode tok/s, median of block medians; interval: {' / '.join(kinds) or '-'} "
                    "of the shots' median):")
        text += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in body]
        text.append(f"  {table.verdict(result.labels)}")
    text += [f"{result.labels[v]}: skipped: cannot win ({why})" for v, why in result.skipped.items()]
    if result.winner is not None:
        text.append(f"winner: {result.labels[result.winner.variant]}: {result.winner.reason}")
    return text


def as_comments(result: TuneResult, command: str) -> str:
    """The table as YAML comments for the top of the winner's recipe file."""
    head = [f"spark-deploy tune: {command}", *lines(result)]
    return "".join(f"# {line}".rstrip() + "\n" for line in head)
