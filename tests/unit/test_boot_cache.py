"""The per-boot fact cache (issue 19): keyed by the node's address and boot id; a reboot (a new boot id)
makes the node run the command again. The node-side comparison runs under bash against this machine's
real /proc/sys/kernel/random/boot_id."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

from orchestrator.facts import boot_cache
from orchestrator.facts.boot_cache import BootEntry, remembered, updated
from orchestrator.facts.core import FACTS, FactInput, Observed, parse_framed

BOOT = Path(boot_cache.BOOT_ID).read_text().strip()
OTHER_BOOT = "00000000-0000-4000-8000-000000000000"


def given(entry: BootEntry | None, address: str = "10.0.0.1") -> FactInput:
    return FactInput(SimpleNamespace(address=address), None, None, entry)


def test_nothing_remembered_passes_empty_args():
    assert remembered(given(None), "gpu_cuda") == ["", ""]
    assert remembered(None, "gpu_cuda") == ["", ""]  # maintenance and boot gather with no FactInput


def test_another_address_or_an_unknown_key_is_not_remembered():
    entry = BootEntry("10.0.0.1", BOOT, {"gpu_cuda": "CUDA Version: 13.0"})
    assert remembered(given(entry, address="10.0.0.2"), "gpu_cuda") == ["", ""]
    assert remembered(given(entry), "other") == ["", ""]
    assert remembered(given(entry), "gpu_cuda") == [BOOT, "CUDA Version: 13.0"]


def test_a_new_boot_or_address_replaces_the_entry_the_same_boot_adds_to_it():
    entry = BootEntry("10.0.0.1", BOOT, {"gpu_cuda": "CUDA Version: 13.0", "x": "1"})
    assert updated(entry, "10.0.0.1", BOOT, {"gpu_cuda": "CUDA Version: 13.0"}).values == entry.values
    assert updated(entry, "10.0.0.1", OTHER_BOOT, {"gpu_cuda": "CUDA Version: 13.1"}) == BootEntry(
        "10.0.0.1", OTHER_BOOT, {"gpu_cuda": "CUDA Version: 13.1"})
    assert updated(entry, "10.0.0.9", BOOT, {}).values == {}
    assert updated(None, "10.0.0.1", BOOT, {"x": "1"}) == BootEntry("10.0.0.1", BOOT, {"x": "1"})


def test_the_gpu_fact_reads_the_cuda_line_from_the_cache_on_the_same_boot_only(tmp_path):
    """nvidia-smi on PATH: the query answers; the full report would say CUDA 13.0, the cache says 12.9."""
    (tmp_path / "nvidia-smi").write_text('#!/bin/sh\nif [ -n "$1" ]; then echo "NVIDIA GB10, 580.95.05, 2405, 3003, '
                                         'Active, Not Active"; else echo "| CUDA Version: 13.0 |"; fi\n')
    (tmp_path / "nvidia-smi").chmod(0o755)
    fact = FACTS["gpu"]

    def run(*args: str) -> dict:
        out = subprocess.run(["bash", "-c", fact.script, "fact", *args], capture_output=True, text=True, check=True,
                             env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
        return fact.parse(out.stdout)

    assert run("", "")["cuda"] == "13.0"  # nothing remembered: the full report is read
    assert run(BOOT, "CUDA Version: 12.9")["cuda"] == "12.9"  # this boot: the remembered line, no report
    assert run(OTHER_BOOT, "CUDA Version: 12.9")["cuda"] == "13.0"  # remembered on another boot: read again
    assert run(BOOT, "CUDA Version: 12.9")["clock"] == 2405  # the clocks are always live


def test_remember_stores_under_the_boot_id_the_gather_saw_and_load_reads_it_back(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    framed = (f"\x1eF boot_id 0\n{BOOT}\n\x1eE\n\x1eF kernel 0\n6.8.0-spark\n\x1eE\n"
              "\x1eF gpu 0\nNVIDIA GB10, 580.95.05, 2405, 3003, Active, Not Active\nCUDA Version: 13.0\n\x1eE\n")
    seen = {"spark-1": parse_framed(framed, {n: FACTS[n] for n in ("boot_id", "kernel", "gpu")}),
            "spark-2": {"boot_id": Observed(error="cat: no such file")}}
    boot_cache.remember("c1", {"spark-1": "10.0.0.1", "spark-2": "10.0.0.2"}, seen, {})
    assert boot_cache.load("c1", "spark-1") == BootEntry("10.0.0.1", BOOT, {"gpu_cuda": "CUDA Version: 13.0"})
    assert boot_cache.cache_file("c1", "spark-1") == tmp_path / "spark-deploy" / "boot-facts" / "c1" / "spark-1.json"
    assert boot_cache.load("c1", "spark-2") is None  # no boot id seen: nothing stored
    boot_cache.cache_file("c1", "spark-1").write_text("{not json")
    assert boot_cache.load("c1", "spark-1") is None  # damaged: looked up afresh
