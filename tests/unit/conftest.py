"""Fixtures the unit tests share (their helpers are in fakes.py)."""

from __future__ import annotations

import pytest
from fakes import HfCache


@pytest.fixture
def hf_cache(tmp_path) -> HfCache:
    """The sim's fake model in a HF cache of this test's own (tests may damage it)."""
    return HfCache.write(tmp_path)
