"""docker system df parsing: samples captured from docker 20.10.24 (host and simulated node), and bad input."""

from __future__ import annotations

import pytest

from orchestrator.docker_cli.disk import (
    DISK_COMMAND,
    DiskUsage,
    disk_usage,
    parse_disk_usage,
    parse_human_size,
)
from orchestrator.transport.node import NodeError, Result

# `docker system df --format "{{.Type}}\t{{.TotalCount}}\t{{.Size}}\t{{.Reclaimable}}"` on docker 20.10.24:
SIM_NODE_FRESH = ("Images\t1\t116.1MB\t116.1MB (100%)\nContainers\t0\t0B\t0B\n"
                  "Local Volumes\t0\t0B\t0B\nBuild Cache\t0\t0B\t0B\n")
SIM_NODE_EMPTY = "Images\t0\t0B\t0B\nContainers\t0\t0B\t0B\nLocal Volumes\t0\t0B\t0B\nBuild Cache\t0\t0B\t0B\n"
SIM_NODE_BUSY = ("Images\t1\t116.1MB\t0B (0%)\nContainers\t2\t2.346MB\t2.346MB (100%)\n"
                 "Local Volumes\t2\t1.501MB\t1.5MB (99%)\nBuild Cache\t0\t0B\t0B\n")
HOST = ("Images\t4\t511.5MB\t511.5MB (99%)\nContainers\t2\t819.4kB\t0B (0%)\n"
        "Local Volumes\t3\t120.8MB\t0B (0%)\nBuild Cache\t0\t0B\t0B\n")


@pytest.mark.parametrize("text, expected", [
    ("0B", 0),
    ("512B", 512),
    ("1.5kB", 1500),
    ("819.4kB", 819_400),
    ("12.3MB", 12_300_000),
    ("116.1MB", 116_100_000),
    ("1.234GB", 1_234_000_000),
    ("2TB", 2 * 10**12),
    ("1000kB", 1_000_000),  # %.4g rounds 999.96 up without moving to the next unit
    ("1.2GB (50%)", 1_200_000_000),  # the Reclaimable column
    ("0B (0%)", 0),
    ("2.346MB (100%)", 2_346_000),
    ("1.2gb", 1_200_000_000),  # units read case-insensitively, as go-units FromHumanSize does
    (" 3MB ", 3_000_000),
])
def test_parse_human_size(text, expected):
    assert parse_human_size(text) == expected


@pytest.mark.parametrize("text", ["", "MB", "12", "1.2XB", "-1MB", "1,5MB", "1.2 GB GB", "N/A", "1.2GB (50%", "1KiB"])
def test_parse_human_size_rejects_and_names_the_text(text):
    with pytest.raises(ValueError) as info:
        parse_human_size(text)
    assert repr(text) in str(info.value)


def test_sim_node_sample():
    usage = parse_disk_usage(SIM_NODE_FRESH)
    assert usage.by_type == {"Images": 116_100_000, "Containers": 0, "Local Volumes": 0, "Build Cache": 0}
    assert usage.total == 116_100_000
    assert usage.reclaimable["Images"] == 116_100_000
    assert usage.counts["Images"] == 1


def test_busy_node_and_host_samples():
    busy = parse_disk_usage(SIM_NODE_BUSY)
    assert busy.by_type == {"Images": 116_100_000, "Containers": 2_346_000, "Local Volumes": 1_501_000,
                            "Build Cache": 0}
    assert busy.total == 116_100_000 + 2_346_000 + 1_501_000
    assert busy.reclaimable == {"Images": 0, "Containers": 2_346_000, "Local Volumes": 1_500_000, "Build Cache": 0}
    assert busy.total_reclaimable == 3_846_000
    assert busy.counts == {"Images": 1, "Containers": 2, "Local Volumes": 2, "Build Cache": 0}
    host = parse_disk_usage(HOST)
    assert host.total == 511_500_000 + 819_400 + 120_800_000


def test_empty_node_totals_zero():
    usage = parse_disk_usage(SIM_NODE_EMPTY)
    assert usage.total == 0 and len(usage.by_type) == 4


def test_bytes_freed_is_a_difference_of_totals():
    before = parse_disk_usage(SIM_NODE_BUSY)
    after = parse_disk_usage(SIM_NODE_FRESH)
    assert before.total - after.total == 2_346_000 + 1_501_000


def test_unknown_type_is_kept():
    usage = parse_disk_usage(SIM_NODE_FRESH + "Snapshots\t3\t1kB\t1kB\n")
    assert usage.by_type["Snapshots"] == 1000


@pytest.mark.parametrize("stdout, fragment", [
    ("", "printed nothing"),
    ("\n\n", "printed nothing"),
    ("TYPE            TOTAL     ACTIVE    SIZE      RECLAIMABLE\nImages 1 0 116.1MB 116.1MB (100%)\n",
     "line 1: expected 4 tab-separated fields"),
    ("Images\t1\t116.1MB\n", "line 1: expected 4"),
    ("Images\t1\t0\t116.1MB\t116.1MB (100%)\n", "line 1: expected 4"),  # an extra column (e.g. Active)
    ("Images\t1\t116.1MB\t116.1MB (100%)\nImages\t1\t1MB\t0B\n", "line 2: repeated type"),
    ("\t1\t1MB\t0B\n", "line 1: empty type"),
    ("Images\tmany\t1MB\t0B\n", "line 1: count 'many'"),
    ("Images\t1\t116.1MB\t116.1MB (100%)\nContainers\t0\tN/A\t0B\n", "line 2: not a Docker size: 'N/A'"),
])
def test_bad_output_names_the_line(stdout, fragment):
    with pytest.raises(ValueError) as info:
        parse_disk_usage(stdout)
    assert fragment in str(info.value)


class _Node:
    """A node whose engine prints `stdout` for `docker system df` (and fails otherwise)."""

    name = "spark-2"

    def __init__(self, stdout: str, code: int = 0, stderr: str = ""):
        self.answer = (code, stdout, stderr)
        self.argv: list[tuple] = []

    def run(self, argv, *, timeout=None, check=False, **_kw) -> Result:
        self.argv.append(tuple(argv))
        code, out, err = self.answer
        result = Result(self.name, tuple(argv), code, out, err)
        return result.check() if check else result


def test_disk_usage_runs_the_command_and_parses():
    node = _Node(SIM_NODE_BUSY)
    usage = disk_usage(node)
    assert node.argv == [tuple(DISK_COMMAND)]
    assert isinstance(usage, DiskUsage) and usage.total == 119_947_000


def test_disk_usage_names_the_node_on_bad_output():
    with pytest.raises(NodeError, match=r"^spark-2: unexpected `docker system df` output: .*line 1"):
        disk_usage(_Node("Images 1 116.1MB\n"))


def test_disk_usage_names_the_node_when_docker_fails():
    with pytest.raises(NodeError, match="spark-2: .*exited 1: Cannot connect to the Docker daemon"):
        disk_usage(_Node("", 1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."))
