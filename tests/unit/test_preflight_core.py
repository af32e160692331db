"""The preflight framework (facts framed in one command, the registry, parity) and the host parsers."""

from __future__ import annotations

import re

from pathlib import Path

import pytest

from orchestrator import preflight
from orchestrator.facts import host as host_facts
from orchestrator.preflight import checks_host
from orchestrator.facts.core import SEP, Fact, Observed, driver_args, parse_framed
from orchestrator.checks.verdict import Scope, Status
from orchestrator.preflight.registry import CHECKS, parity

SAMPLES = Path(__file__).parent / "samples"


def framed(*blocks: tuple[str, int, str, str]) -> str:
    return "".join(f"{SEP}F {name} {rc}\n{out}\n{SEP}E\n{err}" for name, rc, out, err in blocks)


FACTS = {"a": Fact("a", "true", int), "b": Fact("b", "true", str.strip), "c": Fact("c", "true", int, ok_codes=(0, 1))}


def test_framed_output_is_split_per_fact_with_codes_and_parser_errors():
    seen = parse_framed(framed(("a", 0, "42", ""), ("b", 3, "", "boom\nreal reason"), ("c", 1, "x", "")), FACTS)
    assert seen["a"].ok and seen["a"].value == 42
    assert not seen["b"].ok and seen["b"].error == "real reason" and seen["b"].code == 3
    assert not seen["c"].ok and "unexpected output" in seen["c"].error  # exit 1 allowed, but int("x") refused


def test_a_fact_that_printed_nothing_is_absent_not_a_default():
    assert parse_framed("", FACTS) == {}
    assert "a" not in parse_framed(framed(("b", 0, "x", "")), FACTS)


def test_driver_args_carry_each_fact_with_its_own_argument_count():
    specs = [Fact("x", "s1", str, lambda i: ["p q", "r"]), Fact("y", "s2", str)]
    assert driver_args(specs, None) == ["x", "s1", "2", "p q", "r", "y", "s2", "0"]


def seen(values: dict[str, object], fact: str = "v") -> dict[str, dict[str, Observed]]:
    return {node: {fact: v if isinstance(v, Observed) else Observed(value=v)} for node, v in values.items()}


def test_parity_two_nodes_disagreeing_marks_both_and_names_both_values():
    v = parity("p", seen({"spark-1": "580.1", "spark-2": "575.9"}), "v", str, "install the same driver")
    assert {n: c.status for n, c in v.cells.items()} == {"spark-1": Status.FAIL, "spark-2": Status.FAIL}
    assert "spark-1: 580.1" in v.fix and "spark-2: 575.9" in v.fix


def test_parity_three_nodes_marks_the_odd_one_out_and_skips_an_unread_one():
    v = parity("p", seen({"a": "1", "b": "1", "c": "2", "d": Observed(error="nvidia-smi: not found")}), "v", str, "fix")
    assert {n: c.status for n, c in v.cells.items()} == {"a": Status.OK, "b": Status.OK, "c": Status.FAIL,
                                                          "d": Status.SKIP}
    assert "nvidia-smi: not found" in v.cells["d"].value


def test_parity_all_equal_is_ok_with_no_fix():
    v = parity("p", seen({"a": "1", "b": "1"}), "v", str, "fix")
    assert v.status is Status.OK and v.fix == ""


def test_docker_info_on_this_machines_real_output():
    info = host_facts.parse_docker_info((SAMPLES / "docker-info.json").read_text())
    assert info["version"] == "20.10.24+dfsg1" and info["driver"] == "overlay2" and info["containerd_store"] is False


# nvidia-smi's query output as the sim's stub prints it (the layout of the real tool; no GB10 on this machine)
GPU_OK = "NVIDIA GB10, 580.95.05, 2418, 2418, Not Active, Not Active\nCUDA Version: 13.0\n"


def test_gpu_query_and_the_cuda_version_from_the_banner():
    assert host_facts.parse_gpu(GPU_OK) == {"name": "NVIDIA GB10", "driver": "580.95.05", "clock": 2418,
                                             "max_clock": 2418, "idle": False, "locked": False, "cuda": "13.0"}
    assert host_facts.parse_gpu("NVIDIA GB10, 580.95.05, [N/A], [N/A], Active, Not Active\n")["clock"] is None
    with pytest.raises(ValueError):
        host_facts.parse_gpu("No devices were found\n")
    with pytest.raises(ValueError, match="expected 6 fields"):
        host_facts.parse_gpu("NVIDIA GB10, 580.95.05, 2418, 2418\n")


def test_cuda_version_from_real_banners():
    """Real captures: a DGX Spark on R580 (`CUDA Version:`), and the R610 layout (`CUDA UMD Version:`)."""
    gb10 = (SAMPLES / "nvidia-smi-gb10-580.126.09.txt").read_text()
    r610 = (SAMPLES / "nvidia-smi-r610-banner.txt").read_text()
    assert host_facts.cuda_version(gb10) == "13.0" and host_facts.cuda_version(r610) == "13.3"
    grep = re.compile(r"CUDA (UMD )?Version: [0-9.]+")  # what the fact's `grep -oE` keeps of each
    for banner, want in ((gb10, "13.0"), (r610, "13.3")):
        kept = grep.search(banner).group(0)
        line = "NVIDIA GB10, 580.126.09, 2411, 3003, Not Active, Not Active\n" + kept + "\n"
        assert host_facts.parse_gpu(line)["cuda"] == want
    assert "grep -oE 'CUDA (UMD )?Version: [0-9.]+'" in host_facts.GPU_SCRIPT


def _sm(line: str) -> dict:
    return {"gpu": Observed(value=host_facts.parse_gpu(line + "\nCUDA Version: 13.0\n"))}


def test_sm_clock_locked_low_is_a_warning_naming_the_node():
    facts = {"spark-1": {"gpu": Observed(value=host_facts.parse_gpu(GPU_OK))},
             "spark-2": _sm("NVIDIA GB10, 580.95.05, 2200, 3003, Not Active, Not Active")}
    v = checks_host.sm_clock(facts, None)
    assert v.cells["spark-1"].status is Status.OK and v.cells["spark-2"].status is Status.WARN
    assert "2200 of 3003 MHz" in v.cells["spark-2"].value and "spark-2" in v.fix
    assert v.failed_nodes() == [] and v.failed_nodes(strict=True) == ["spark-2"]


def test_sm_clock_idle_is_fine_a_lock_is_not_and_no_clock_is_a_skip():
    """An idle GPU clocks down (no warning); an application-clock lock warns even at full speed."""
    v = checks_host.sm_clock({"a": _sm("NVIDIA GB10, 580.95.05, 208, 3003, Active, Not Active"),
                              "b": _sm("NVIDIA GB10, 580.95.05, 2200, 2200, Not Active, Active"),
                              "c": _sm("NVIDIA GB10, 580.95.05, [N/A], [N/A], Not Active, Not Active")}, None)
    assert {n: c.status for n, c in v.cells.items()} == {"a": Status.OK, "b": Status.WARN, "c": Status.SKIP}
    assert "idle" in v.cells["a"].value and "locked" in v.cells["b"].value and v.fix.startswith("the SM clock on b")


def test_os_release_kernel_and_clock_parsers():
    assert host_facts.parse_os_release((SAMPLES / "os-release.txt").read_text())
    assert host_facts.parse_kernel("6.8.0-1021-nvidia-64k\n") == "6.8.0-1021-nvidia-64k"
    with pytest.raises(ValueError):
        host_facts.parse_kernel("\n")
    assert host_facts.parse_clock("1764590000.123456789\n") == pytest.approx(1764590000.1234567)


def test_time_offset_warns_on_a_node_ahead_by_more_than_two_seconds():
    v = checks_host.time_offset(seen({"a": 100.0, "b": 100.3, "c": 105.0}, "clock"), None)
    assert [n for n, c in v.cells.items() if c.status is Status.WARN] == ["c"]


def test_select_refuses_an_unknown_name_and_the_up_subset_keeps_an_explicit_one():
    with pytest.raises(preflight.UnknownCheck, match="no check named 'gpu-parityy'"):
        preflight.select(only=["gpu-parityy"])
    assert [s.name for s in preflight.select(only=["kernel"])] == ["kernel"]
    assert "kernel" not in [s.name for s in preflight.select(skip=["kernel"])]
    assert all(CHECKS[s.name].in_up for s in preflight.select(up_subset=True))


def test_every_registered_check_has_a_scope_and_known_facts():
    for spec in CHECKS.values():
        assert isinstance(spec.scope, Scope)


def test_a_judge_that_crashes_fails_as_a_bug_and_a_probe_that_cannot_run_skips():
    """Issue 19: a crashed judge is an error, never a silent skip (a skip would let `up` go on unchecked)."""
    from orchestrator.preflight.registry import CheckSpec
    from orchestrator.preflight.run import _broken
    from orchestrator.transport.node import NodeError

    spec = CheckSpec("some-check", (), Scope.NODE, judge=lambda seen, dep: None)
    crashed = _broken(spec, KeyError("driver"), {"spark-1": {}, "spark-2": {}})
    assert {c.status for c in crashed.cells.values()} == {Status.FAIL}
    assert "unexpected KeyError" in crashed.cells["spark-1"].value and "--skip-check some-check" in crashed.fix
    lost = _broken(spec, NodeError("spark-2", "the SSH connection is closed"), {"spark-1": {}, "spark-2": {}})
    assert {c.status for c in lost.cells.values()} == {Status.SKIP}
    assert "could not run: spark-2: the SSH connection is closed" in lost.cells["spark-2"].value


def test_the_real_driver_gives_each_fact_its_exit_code_and_its_stdout_as_command_substitution_would():
    """facts.DRIVER by real bash: exit codes from `wait PID`, stdout with trailing newlines dropped (what
    `$(...)` gave before the driver printed the files with one `cat`), stderr after the marker, order kept."""
    import subprocess
    from orchestrator.facts.core import DRIVER
    specs = [Fact("a", "printf '1\\n 2\\n\\n\\n'", str), Fact("b", 'echo out; echo "$1" >&2; exit 3', str, lambda i: ["it's"]),
             Fact("c", "printf 7", int), Fact("d", "sleep 0.2; true", str)]
    out = subprocess.run(["bash", "-c", DRIVER, "driver", *driver_args(specs, None)], capture_output=True, text=True,
                         check=True).stdout
    assert [line.split()[1] for line in out.split(SEP + "F ")[1:]] == ["0", "3", "0", "0"]
    assert [b.split()[0] for b in out.split(SEP + "F ")[1:]] == ["a", "b", "c", "d"]
    seen = parse_framed(out, {s.name: s for s in specs})
    assert seen["a"].value == "1\n 2" and seen["c"].value == 7 and seen["d"].value == ""
    assert not seen["b"].ok and seen["b"].code == 3 and seen["b"].error == "it's" and seen["b"].raw == "out"
