"""The fabric measuring tools' parsers on real published outputs (tests/data/fabric/README.md names each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.facts import fabric_perf as fp

DATA = Path(__file__).resolve().parents[1] / "data" / "fabric"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_ib_write_bw_between_two_sparks_is_its_average_in_gbit():
    bw = fp.parse_ib_write_bw(read("ib_write_bw_spark.txt"))
    assert bw.gbit_s == pytest.approx(111.71)
    assert bw.detail == "65536 B messages, 20000 iterations"


def test_ib_write_bw_over_roce_with_tabs_in_its_row():
    assert fp.parse_ib_write_bw(read("ib_write_bw_roce_postlist.txt")).gbit_s == pytest.approx(0.48)


def test_ib_write_bw_in_mb_per_second_is_converted_from_mebibytes():
    text = read("ib_write_bw_spark.txt").replace("[Gb/sec]", "[MB/sec]").replace("111.71 ", "13316.96 ")
    assert fp.parse_ib_write_bw(text).gbit_s == pytest.approx(13316.96 * 2**20 * 8 / 1e9)


def test_ib_write_bw_cut_before_its_table_says_so():
    text = read("ib_write_bw_spark.txt")
    with pytest.raises(fp.ToolError, match="ib_write_bw printed no result"):
        fp.parse_ib_write_bw(text[: text.index(" 65536")])


def test_ib_write_lat_is_the_typical_one_way_time():
    assert fp.parse_ib_write_lat(read("ib_write_lat_spark.txt")) == pytest.approx(1.47)
    with pytest.raises(fp.ToolError):
        fp.parse_ib_write_lat(read("ib_write_bw_spark.txt"))


def test_iperf3_is_what_the_receiver_got_and_the_mean_tcp_round_trip():
    bw = fp.parse_iperf3(read("iperf3_tcp_cloudpilot.json"))
    assert bw.gbit_s == pytest.approx(0.046234426, rel=1e-6)
    assert bw.latency_us == 296639
    assert "1033 retransmits" in bw.detail


def test_iperf3_error_and_cut_output_are_named():
    with pytest.raises(fp.ToolError, match="unable to connect"):
        fp.parse_iperf3('{"start": {}, "intervals": [], "end": {}, "error": "unable to connect to server"}')
    with pytest.raises(fp.ToolError, match="no JSON"):
        fp.parse_iperf3(read("iperf3_tcp_cloudpilot.json")[:500])


def test_all_reduce_perf_average_and_largest_bus_bandwidth():
    ar = fp.parse_all_reduce(read("all_reduce_perf_h100_2nodes.txt"))
    assert ar.avg_busbw_gb_s == pytest.approx(70.742)
    assert (ar.largest_bytes, ar.peak_busbw_gb_s) == (8589934592, pytest.approx(338.82))


def test_all_reduce_perf_under_mpirun_tag_output():
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in read("all_reduce_perf_h100_2nodes.txt").splitlines())
    assert fp.parse_all_reduce(tagged).avg_busbw_gb_s == pytest.approx(70.742)
    with pytest.raises(fp.ToolError):
        fp.parse_all_reduce(tagged.split("# Out of bounds")[0])


def test_the_tools_a_node_has():
    assert fp.parse_tools("iperf3\npython3\n") == {"iperf3", "python3"}
    assert fp.parse_tools("") == frozenset()
