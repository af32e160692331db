"""The live view of a sample (rich): ranks, nodes, engine, and what is wrong."""
from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..facts.supervisor import Watch
from .model import RankState, Sample
from .recovery import text as recovery_text


def _f(value, fmt: str = "{:.1f}", none: str = "-") -> str:
    return none if value is None else fmt.format(value)


def render(sample: Sample):
    head = Text.from_markup(f"[bold]{escape(sample.cluster)}[/]: release {sample.release} ({escape(sample.recipe or '-')}, "
                            f"plan {sample.plan_hash or '-'}) " + ("[green]ok[/]" if sample.ok else "[red]PROBLEM[/]"))
    ranks = Table(title="ranks")
    for c in ("rank", "node", "container", "state"):
        ranks.add_column(c)
    for r in sample.ranks:
        colour = "green" if r.state is RankState.RUNNING else "red"
        ranks.add_row(str(r.rank), r.node, escape(r.container[:12] or f"named {r.name}"),
                      f"[{colour}]{r.state}[/] {escape(r.detail)}")
    nodes = Table(title="nodes")
    for c in ("node", "MemAvailable GiB", "swap used GiB", "SM MHz"):
        nodes.add_column(c)
    for n in sample.nodes:
        clock = _f(n.sm_clock_mhz, "{:.0f}") if n.sm_clock_missing is None else f"- ({escape(n.sm_clock_missing)})"
        nodes.add_row(n.node, _f(n.mem_available_gib), _f(n.swap_used_gib), clock)
    e = sample.engine
    engine = Text(f"running {_f(e.running, '{:.0f}')}, waiting {_f(e.waiting, '{:.0f}')}, KV use "
                  f"{_f(None if e.kv_usage is None else e.kv_usage * 100)}%, gen {_f(e.gen_tps)} tok/s, spec acceptance "
                  f"{_f(None if e.spec_acceptance is None else e.spec_acceptance * 100)}% "
                  f"(since start {_f(None if e.spec_acceptance_total is None else e.spec_acceptance_total * 100)}%); "
                  f"{e.probe}")
    cap = sample.capacity
    if cap is not None:
        engine.append(f"\ncapacity {cap.tok_s:.1f} tok/s ({cap.profile}, release {cap.release}'s bench --replicates)"
                      + (f"; live decode below it {sample.below_capacity} sample(s) in a row"
                         if sample.below_capacity else ""))
    sup = sample.supervisor
    said = [Text(sup.line())] if sup is not None and sup.watch is not Watch.NONE else []  # none: nothing to say
    if sample.recovered:
        said.append(Text.from_markup(f"[cyan]recovered[/]: {escape(recovery_text(sample.recovered))}"))
    said += [Text.from_markup(f"[red]problem[/]: {escape(p)}") for p in sample.problems]
    said += [Text.from_markup(f"[yellow]warning[/]: {escape(w)}") for w in sample.warnings if w not in sample.problems]
    return Group(head, ranks, nodes, engine, *said)
