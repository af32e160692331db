"""The disk facts' parsers on this machine's real outputs, and their judges."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.facts import disk as disk_facts
from orchestrator.preflight import checks_disk
from orchestrator.facts.core import Observed
from orchestrator.checks.verdict import Status

SAMPLES = Path(__file__).parent / "samples"


class Inv:
    def node(self, name):
        return type("N", (), {"jit_cache": f"/var/cache/vllm-jit-{name}"})


class Dep:
    inventory = Inv()


def test_statfs_type_names_as_stat_prints_them():
    assert disk_facts.parse_statfs("ext2/ext3\n") == "ext2/ext3"  # this machine's /
    assert disk_facts.parse_statfs("tmpfs\n") == "tmpfs"
    with pytest.raises(ValueError):
        disk_facts.parse_statfs("stat: cannot read file system information for '/x': No such file or directory\n")


def test_a_jit_cache_on_nfs_fails_naming_the_node():
    seen = {"spark-1": {"jit_fs": Observed(value="ext2/ext3")}, "spark-2": {"jit_fs": Observed(value="nfs4")}}
    v = checks_disk.jit_filesystem(seen, Dep())
    assert v.cells["spark-1"].status is Status.OK and v.cells["spark-2"].status is Status.FAIL
    assert "nfs4" in v.cells["spark-2"].value and "spark-2" in v.fix


def test_image_disk_parses_the_real_script_output_present_and_absent():
    present = disk_facts.parse_image_disk((SAMPLES / "image-disk-present.txt").read_text())
    absent = disk_facts.parse_image_disk((SAMPLES / "image-disk-absent.txt").read_text())
    assert present["size"] == 116086809 and present["free"] > 0
    assert absent["size"] is None and absent["free"] > 0


def test_a_node_without_room_for_the_load_fails_and_a_holder_is_fine():
    seen = {"spark-1": {"image_disk": Observed(value={"free": 10**9, "size": 40 * 10**9})},
            "spark-2": {"image_disk": Observed(value={"free": 60 * 10**9, "size": None})},
            "spark-3": {"image_disk": Observed(value={"free": 90 * 10**9, "size": None})}}
    v = checks_disk.image_disk(seen, Dep())
    assert {n: c.status for n, c in v.cells.items()} == {"spark-1": Status.OK, "spark-2": Status.FAIL,
                                                          "spark-3": Status.OK}
    assert "60.0 GB free, the load needs 80.0 GB" in v.cells["spark-2"].value and "spark-2" in v.fix


def test_nobody_holds_the_image_is_a_skip_that_says_so():
    seen = {"spark-1": {"image_disk": Observed(value={"free": 10**9, "size": None})}}
    assert checks_disk.image_disk(seen, Dep()).cells["spark-1"].status is Status.SKIP
