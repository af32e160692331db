"""Drift between releases: each release's bench headline next to the previous release's of the same model,
profile by profile, with the ratio; a drop beyond the bench's own spread is flagged (a zh decode rate slid
from 33.16 to 27.6 tok/s "while nobody was looking", field note 16's protocol to tell noise from a drop)."""
from __future__ import annotations

from ..releases.record import Release


def _headline(release: Release) -> dict:
    return ((release.bench or {}).get("headline")) or {}


def drift(releases: list[Release]) -> dict[int, dict[str, dict]]:
    """release id -> profile -> {previous_release, decode_tps, previous_tps, ratio, spread, flagged}.
    `releases` newest first (History order); the spread judged is the larger of the two runs' spreads."""
    out: dict[int, dict[str, dict]] = {}
    for i, release in enumerate(releases):
        for profile, now in _headline(release).items():
            before = next(((r, _headline(r)[profile]) for r in releases[i + 1:]
                           if r.model.repo == release.model.repo and profile in _headline(r)), None)
            if before is None or not before[1].get("decode_tps") or now.get("decode_tps") is None:
                continue
            previous, then = before
            ratio = now["decode_tps"] / then["decode_tps"]
            spread = max(now.get("spread") or 0.0, then.get("spread") or 0.0)
            out.setdefault(release.id, {})[profile] = {
                "previous_release": previous.id, "decode_tps": now["decode_tps"], "previous_tps": then["decode_tps"],
                "ratio": round(ratio, 4), "spread": round(spread, 4), "flagged": ratio < 1.0 - spread}
    return out


def drift_text(per_profile: dict[str, dict]) -> str:
    """`zh 27.6 vs 33.2 (r3) x0.83 DROP beyond spread 4.1%`."""
    parts = []
    for profile, d in per_profile.items():
        flag = f" DROP beyond spread {d['spread']:.1%}" if d["flagged"] else ""
        parts.append(f"{profile} {d['decode_tps']:.1f} vs {d['previous_tps']:.1f} (r{d['previous_release']}) "
                     f"x{d['ratio']:.2f}{flag}")
    return "; ".join(parts) or "-"
