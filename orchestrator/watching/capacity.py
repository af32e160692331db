"""Live decode against the serving release's capacity figure (`bench --replicates`): the pure rule.

One sample below the figure is noise (a request in prefill, one that ended inside the window); K in a row
is a slowdown worth a warning (never a problem: watch does not exit for it). It is said once per run of
samples below, when the run reaches K; a sample at or above the figure, or one with nothing decoding, ends
the run. Live decode is the engine's generation tok/s over the sample's window while requests run (with
several running, their sum: more than one request's rate, so below the figure is slower still). Live traffic's profile is unknown, so the figure is
the lowest of the release's profiles: decode below even that is below what the release was measured to hold.
"""
from __future__ import annotations

from dataclasses import dataclass

from .model import CapacityFigure, Engine


def figure_of(release: int, bench: dict | None) -> CapacityFigure | None:
    """The lowest capacity figure recorded with the release (Release.bench["replicates"]["profiles"]), or None."""
    profiles = ((bench or {}).get("replicates") or {}).get("profiles") or {}
    figures = [(cap["capacity"], profile) for profile, cap in profiles.items()
               if isinstance(cap, dict) and isinstance(cap.get("capacity"), (int, float))]
    if not figures:
        return None
    tok_s, profile = min(figures)
    return CapacityFigure(release, profile, float(tok_s))


def live_decode(engine: Engine) -> float | None:
    """Generation tok/s over the sample's window while requests run; None when idle or not measured (an idle
    engine decodes nothing, which says nothing about its speed)."""
    if engine.gen_tps is None or not engine.running:
        return None
    return engine.gen_tps


@dataclass(frozen=True)
class Streak:
    """The samples in a row below `figure` (a new figure, e.g. another release serving, starts a new run)."""

    figure: CapacityFigure | None = None
    samples: int = 0


def below_capacity(before: Streak, figure: CapacityFigure | None, live: float | None,
                   k: int) -> tuple[Streak, str | None]:
    """The run after this sample, and the warning when this sample makes it K long."""
    if figure is None or live is None or live >= figure.tok_s:
        return Streak(figure, 0), None
    samples = (before.samples if before.figure == figure else 0) + 1
    if samples != k:
        return Streak(figure, samples), None
    return Streak(figure, samples), (
        f"live decode {live:.1f} tok/s has been below release {figure.release}'s capacity figure "
        f"{figure.tok_s:.1f} tok/s (profile {figure.profile}, from bench --replicates) for {k} samples in a row")
