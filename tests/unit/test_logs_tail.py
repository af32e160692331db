"""`logs --tail N`: N lines per node (a node running two recipes' containers gives N, not 2N), chosen and
merged by the time docker stamped on each line, whose fraction docker trims (…:05.5Z is after …:05.25Z)."""

from __future__ import annotations

from orchestrator.deploy.logs import merge_nodes, stamped

HEAD_A = "2026-12-07T14:00:01.5Z a1\n2026-12-07T14:00:03.25Z a2\n2026-12-07T14:00:05.5Z a3\n"
HEAD_B = "2026-12-07T14:00:02Z b1\n2026-12-07T14:00:04.000000001Z b2\n2026-12-07T14:00:05.25Z b3\n"
PEER = "2026-12-07T14:00:00.1Z p1\n2026-12-07T14:00:04.5Z p2\n2026-12-07T14:00:06Z p3\n"


def lines(rows):
    return [(node, line) for _, node, line in rows]


def test_tail_is_per_node_across_its_containers_and_the_nodes_merge_by_time():
    per_node = {"spark-1": stamped("spark-1", HEAD_A) + stamped("spark-1", HEAD_B),
                "spark-2": stamped("spark-2", PEER)}
    assert lines(merge_nodes(per_node, 2)) == [("spark-2", "p2"), ("spark-1", "b3"), ("spark-1", "a3"),
                                               ("spark-2", "p3")]
    every = lines(merge_nodes(per_node, None))
    assert every == [("spark-2", "p1"), ("spark-1", "a1"), ("spark-1", "b1"), ("spark-1", "a2"), ("spark-1", "b2"),
                     ("spark-2", "p2"), ("spark-1", "b3"), ("spark-1", "a3"), ("spark-2", "p3")]
    assert len(merge_nodes(per_node, 10)) == 9  # fewer than N: all of them


def test_a_line_without_a_stamp_keeps_its_text_and_sorts_first():
    rows = stamped("spark-1", "no stamp here\n2026-12-07T14:00:01Z said\n")
    assert lines(merge_nodes({"spark-1": rows}, None)) == [("spark-1", "no stamp here"), ("spark-1", "said")]
