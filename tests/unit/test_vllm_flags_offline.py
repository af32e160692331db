"""`validate` checks `vllm.extra` against vLLM 0.33.0's shipped option table (issue 22): unknown flags get
the near miss, values get the real parser's type and choices, and what the table accepts the stand-in's
copy of vLLM's parser accepts too (it is built from the same table, orchestrator/vllm_table)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator.config.vllm_flags import OPTIONS, VLLM_VERSION, flag_problem
from orchestrator.render.spec import _extra_args
from orchestrator.sim.standin.cli import parse_cli


@pytest.mark.parametrize("flag, meant", [
    ("enable-chunked-prefil", "--enable-chunked-prefill"), ("max-num-seq", "--max-num-seqs"),
    ("trust-remote-cod", "--trust-remote-code"), ("kv-cache-memory-byte", "--kv-cache-memory-bytes"),
])
def test_a_near_miss_names_the_flag_meant_and_the_version(flag, meant):
    message = flag_problem(flag, True)
    assert message is not None and f"did you mean {meant}?" in message
    assert f"vLLM {VLLM_VERSION}" in message and VLLM_VERSION == "0.33.0"


@pytest.mark.parametrize("flag, value, says", [
    ("block-size", "big", "'big' is not an integer"),
    ("dtype", "bfloat61", "did you mean bfloat16?"),
    ("enable-chunked-prefill", 2, "write true or false"),
    ("block-size", True, "needs a value"),
    ("max-num-seqs", 1.5, "'1.5' is not an integer"),
    ("block-size.x", 1, "dotted keys"),
    ("frobnicate-widgets", 1, "--only vllm-flags"),
])
def test_bad_values_say_what_the_option_takes(flag, value, says):
    message = flag_problem(flag, value)
    assert message is not None and says in message, message


@pytest.mark.parametrize("flag, value", [
    ("enable-chunked-prefill", True), ("enable-chunked-prefill", False), ("trust-remote-code", False),
    ("max-num-seqs", 12), ("block-size", 256), ("dtype", "bfloat16"), ("kv-cache-memory-bytes", "8G"),
    ("compilation-config", '{"mode": 3}'), ("swap-space-not", None),
])
def test_what_the_table_accepts_the_standin_parser_accepts(flag, value):
    """The agreement, checked through the parser the stand-in image runs (a copy of vLLM's argparse)."""
    if value is None:  # the control: a flag the table refuses is refused by the parser too
        assert flag_problem(flag, 1) is not None
        with pytest.raises(SystemExit) as exited:
            parse_cli(["serve", "m", f"--{flag}", "1"])
        assert exited.value.code == 2
        return
    assert flag_problem(flag, value) is None

    class Vllm:
        extra = {flag: value}

    class Recipe:
        vllm = Vllm

    argv = ["serve", "m"]
    for name, rendered in _extra_args(Recipe):
        argv += [f"--{name}"] if rendered is True else [f"--{name}", rendered]
    parse_cli(argv)  # exits 2 on a refusal


def test_the_table_ships_with_the_core_package_without_docker():
    """`pipx install .` without the sim extra: importing the checker must not need docker-py."""
    code = ("import sys; sys.modules['docker'] = None; "
            "from orchestrator.config.vllm_flags import OPTIONS; assert len(OPTIONS) > 400; "
            "assert not [m for m in sys.modules if m.startswith('orchestrator.sim')]; print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_every_option_spelling_is_indexed():
    assert {"enable-chunked-prefill", "disable-chunked-prefill", "no-enable-chunked-prefill"} <= OPTIONS.keys()
