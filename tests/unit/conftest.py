"""Fixtures the unit tests share (their helpers are in fakes.py)."""

from __future__ import annotations

import pytest
from fakes import HfCache
from memnode.harness import MemCluster


@pytest.fixture
def hf_cache(tmp_path) -> HfCache:
    """The sim's fake model in a HF cache of this test's own (tests may damage it)."""
    return HfCache.write(tmp_path)


@pytest.fixture
def mem(tmp_path, monkeypatch) -> MemCluster:
    """An in-memory cluster (tests/memnode) of this test's own, its per-boot fact cache under tmp_path (not
    ~/.cache); every command it was sent must be one the in-memory nodes know."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cluster = MemCluster(tmp_path)
    yield cluster
    assert not cluster.world.unknown, f"commands the in-memory node does not know: {cluster.world.unknown}"
