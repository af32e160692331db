"""--compare's figures (pure): B/A from the blocks' medians, drift within each recipe's blocks, block order."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from orchestrator.bench import render
from orchestrator.bench.compare import Block, CompareResult, parse_blocks
from orchestrator.bench.runner import Group
from orchestrator.bench.shot import RequestResult, Shot


def _group(rate: float) -> Group:
    g = Group(1, "code")
    for i in range(3):
        s = Shot(i, "code", 1, 0, requests=[RequestResult(0.1, 101, 1, 100 / (rate + i - 1), 100, 0, 10, 1, 2)])
        g.shots.append(s)
    return g


def test_ratio_and_drift():
    r = CompareResult({"A": "base", "B": "spec"}, before=1)
    r.blocks = [Block("A", 2, [_group(40.0)]), Block("B", 3, [_group(100.0)]),
                Block("A", 4, [_group(42.0)]), Block("B", 5, [_group(104.0)])]
    (row,) = r.rows()
    assert row["a_blocks"] == pytest.approx([40.0, 42.0]) and row["b_blocks"] == pytest.approx([100.0, 104.0])
    assert row["ratio"] == pytest.approx(102.0 / 41.0)
    assert row["a_drift"] == pytest.approx(2.0 / 41.0) and row["b_drift"] == pytest.approx(4.0 / 102.0)
    r.restored = "release 1 serves again (rolled back to it)"
    buf = io.StringIO()
    render.show_compare(Console(file=buf, width=200), r)
    text = buf.getvalue()
    assert "2.488x" in text and "4.9%" in text and "release 1 serves again" in text


@pytest.mark.parametrize("text, ok", [("ABAB", True), ("abba", True), ("AAAA", False), ("ABC", False), ("", False)])
def test_blocks(text, ok):
    if ok:
        assert parse_blocks(text) == text.upper()
    else:
        with pytest.raises(ValueError, match="--blocks"):
            parse_blocks(text)
