"""`history`'s drift: each release's bench headline next to the previous one's of the same model."""
from __future__ import annotations

from types import SimpleNamespace

from orchestrator.bench.drift import drift, drift_text


def release(id: int, repo: str, headline: dict | None):
    return SimpleNamespace(id=id, model=SimpleNamespace(repo=repo), bench={"headline": headline} if headline else None)


def test_a_drop_beyond_the_spread_is_flagged_and_noise_is_not():
    releases = [release(5, "m", {"zh": {"decode_tps": 27.6, "spread": 0.04}, "code": {"decode_tps": 99.0, "spread": 0.1}}),
                release(4, "other", {"zh": {"decode_tps": 50.0, "spread": 0.01}}),
                release(3, "m", None),
                release(2, "m", {"zh": {"decode_tps": 33.16, "spread": 0.02}, "code": {"decode_tps": 100.0, "spread": 0.05}})]
    got = drift(releases)
    assert set(got) == {5}
    assert got[5]["zh"] == {"previous_release": 2, "decode_tps": 27.6, "previous_tps": 33.16, "ratio": 0.8323,
                            "spread": 0.04, "flagged": True}
    assert got[5]["code"]["flagged"] is False  # 1% down, within a 10% spread
    assert drift_text(got[5]).startswith("zh 27.6 vs 33.2 (r2) x0.83 DROP beyond spread 4.0%")
    assert drift_text({}) == "-"
