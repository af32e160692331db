"""The stand-in's command line against the real vLLM 0.33.0 parser captured in ../shared/vllm (issue 10).

The option table is generated from options.json; these tests hold the stand-in's parser, help output
and error messages against the captured files, and check that the package needs only the stdlib.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.sim import images_spec

SITE_DIR = Path(__file__).resolve().parents[2]  # holds the `orchestrator` package
PKG = SITE_DIR / "orchestrator" / "sim" / "standin"
TABLE = SITE_DIR / "orchestrator" / "vllm_table"
SHARED = Path(__file__).resolve().parents[1] / "data" / "vllm"  # copied from shared/vllm: see its README
TOP_USAGE = "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ..."



def standin(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python3 -m orchestrator.sim.standin ...` in an isolated interpreter (-I: no site, no env, no cwd on
    sys.path)."""
    code = f"import sys, runpy; sys.path.insert(0, {str(SITE_DIR)!r}); sys.argv = ['standin', *sys.argv[1:]]; " \
           "runpy.run_module('orchestrator.sim.standin', run_name='__main__', alter_sys=True)"
    return subprocess.run([sys.executable, "-I", "-c", code, *args], capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def real() -> list[dict]:
    return json.loads((SHARED / "options.json").read_text())["options"]


@pytest.fixture(scope="module")
def serve_parser():
    from orchestrator.sim.standin.cli import build_parser
    from orchestrator.sim.standin.helptext import _serve
    return _serve(build_parser())


def skeleton(text: str) -> list[str]:
    """Group headings and option invocations (`--x X, -y X`) of a help text, in order."""
    out = []
    for line in text.splitlines():
        if re.fullmatch(r"[A-Za-z][\w ]*:", line):
            out.append(line)
        elif re.match(r"  (-|model_tag)", line):
            out.append(re.split(r"\s{2,}", line[2:])[0])
    return out


# ----------------------------------------------------------------------------- the table
def test_table_is_what_the_generator_makes_from_the_shared_files():
    from orchestrator.vllm_table import gen_options
    assert gen_options.render(SHARED) == (TABLE / "options_table.py").read_text(), \
        "options_table.py is stale: run python3 orchestrator/vllm_table/gen_options.py"


def test_parser_accepts_exactly_the_real_option_strings(serve_parser, real):
    ours = set(serve_parser._option_string_actions)
    theirs = {s for o in real for s in o["accepted_option_strings"]}
    assert ours == theirs
    assert len(theirs) == 485


def test_types_choices_nargs_and_defaults_follow_the_real_parser(serve_parser, real):
    for o in real:
        if not o["option_strings"] or o["action"] == "_HelpAction":
            continue
        action = serve_parser._option_string_actions[o["option_strings"][0]]
        assert action.dest == o["dest"]
        assert (list(action.choices) if action.choices is not None else None) == o["choices"], o["dest"]
        if o["action"] not in ("EnableDisableAction", "_StoreTrueAction"):
            assert action.nargs == o["nargs"], o["dest"]
        if o["type"] and o["type"] != "str":
            name = re.sub(r"\(.*", "", o["type"]).split(".")[-1]
            assert getattr(action.type, "__name__", None) == name, o["dest"]
        if not isinstance(o["default"], str) or action.type in (None, str):
            assert action.default == o["default"] or o["default"] == "==SUPPRESS==", o["dest"]


# ----------------------------------------------------------------------------- help
def test_plain_help_is_the_real_group_list():
    r = standin("serve", "--help")
    assert r.returncode == 0
    assert r.stdout == (SHARED / "serve-help.txt").read_text()


def test_help_all_has_the_real_layout():
    r = standin("serve", "--help=all")
    assert r.returncode == 0
    real = (SHARED / "serve-help-all.txt").read_text()
    assert skeleton(r.stdout) == skeleton(real)
    assert len([s for s in skeleton(real) if s.startswith("-")]) == 321
    # the text around the groups, and the group descriptions, are the real ones
    assert r.stdout.split("positional arguments:")[0] == real.split("positional arguments:")[0]
    assert r.stdout.endswith(real[real.index("When passing JSON CLI arguments"):])
    assert "\nLoggingConfig:\n  vLLM logging. Default ``dictConfig`` adds a formatted stream handler.\n" in r.stdout
    assert "  --max-model-len MAX_MODEL_LEN\n" in r.stdout
    assert "  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE\n" in r.stdout


def test_help_for_a_group_and_for_a_flag():
    group = standin("serve", "--help=cacheconfig")
    assert group.returncode == 0 and group.stdout.startswith("CacheConfig:\n  Configuration for the KV cache.")
    assert "--enable-prefix-caching, --disable-prefix-caching" in group.stdout
    flag = standin("serve", "--help=max_model_len")
    assert flag.returncode == 0 and "--max-model-len MAX_MODEL_LEN" in flag.stdout
    assert "--max-num-seqs" not in flag.stdout
    unknown = standin("serve", "--help=nothing-like-this")
    assert unknown.returncode == 2 and "nothing-like-this" in unknown.stderr


# ----------------------------------------------------------------------------- messages
@pytest.mark.parametrize("args", [["--swap-space", "4"], ["--bogus", "1"], ["--max-model", "4096"]])
def test_unknown_flags_are_refused_by_the_top_parser(args):
    r = standin("serve", "sim/tiny", *args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [TOP_USAGE, f"vllm: error: unrecognized arguments: {' '.join(args)}"]


@pytest.mark.parametrize("args, message", [
    (["--max-model-len", "1.5"], "argument --max-model-len: invalid human_readable_int_or_auto value: '1.5'"),
    (["--max-model-len", "abc"], "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"),
    (["-tp", "two"], "argument --tensor-parallel-size/-tp: invalid int value: 'two'"),
    (["--gpu-memory-utilization", "most"], "argument --gpu-memory-utilization/--device-memory-utilization: "
                                           "invalid float value: 'most'"),
    (["--max-num-batched-tokens", "1.5K"], "argument --max-num-batched-tokens: Decimals are not allowed with "
                                           "binary suffixes like K. Did you mean to use 1.5k instead?"),
    (["--max-num-seqs", "x"], "argument --max-num-seqs: invalid int value: 'x'"),
])
def test_bad_types_give_the_real_argparse_message(args, message):
    r = standin("serve", "sim/tiny", *args)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["usage: vllm serve [model_tag] [options]", f"vllm serve: error: {message}"]


def test_bad_choice_lists_the_real_choices_sorted(real):
    r = standin("serve", "sim/tiny", "--moe-backend", "x")
    assert r.returncode == 2
    choices = next(o["choices"] for o in real if o["dest"] == "moe_backend")
    assert choices == sorted(choices)
    assert r.stderr.splitlines()[-1] == ("vllm serve: error: argument --moe-backend: invalid choice: 'x' "
                                         f"(choose from {', '.join(repr(c) for c in choices)})")


# ----------------------------------------------------------------------------- FlexibleArgumentParser
@pytest.fixture
def parse():
    from orchestrator.sim.standin.cli import parse_cli
    return parse_cli


def test_aliases_underscores_dotted_keys_and_o_levels(parse, tmp_path):
    a = parse(["serve", "sim/tiny", "--max_model_len", "32k", "--no-enable-prefix-caching", "-O3",
               "--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens=3",
               "--compilation-config.cudagraph_capture_sizes+", "1", "--compilation-config.cudagraph_capture_sizes+=2,4",
               "--device-memory-utilization", "0.5", "--moe-backend", "FlashInfer-B12X"])
    assert a.max_model_len == 32000 and a.enable_prefix_caching is False and a.optimization_level == "3"
    assert a.speculative_config == {"method": "mtp", "num_speculative_tokens": 3}
    assert a.compilation_config == {"cudagraph_capture_sizes": [1, 2, 4]}
    assert a.gpu_memory_utilization == 0.5 and a.moe_backend == "flashinfer_b12x"
    assert parse(["serve", "m", "--disable-prefix-caching"]).enable_prefix_caching is False
    assert parse(["serve", "m", "--enable-prefix-caching"]).enable_prefix_caching is True
    assert parse(["serve", "m", "--max-model-len", "auto"]).max_model_len is None
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("# a vLLM config file\nmax_num_seqs: 8\nenforce_eager: true\nport: 9000\n")
    b = parse(["serve", "m", "--config", str(cfg), "--port", "9001"])
    assert (b.max_num_seqs, b.enforce_eager, b.port) == (8, True, 9001)  # the command line wins


def test_non_default_args_are_what_was_given(parse):
    a = parse(["serve", "sim/tiny", "--max-num-seqs", "12", "--port", "8000"])
    assert a.non_default == {"model_tag": "sim/tiny", "max_num_seqs": 12}


def test_bad_literal_values_fail_like_pydantic(tmp_path):
    r = standin("serve", "sim/tiny", "--kv-cache-dtype", "fp7")
    assert r.returncode == 1
    assert "1 validation error for CacheConfig" in r.stderr and "[type=literal_error, input_value='fp7'" in r.stderr


# ----------------------------------------------------------------------------- stdlib only
def test_what_the_image_ships_for_the_standin_imports_only_the_standard_library(tmp_path):
    """The image's python3 has the stdlib alone: its tree (the stand-in, the option table it shares with
    `validate`, their package __init__s: images_spec.standin_files) must import nothing else and lack nothing."""
    shipped = {path.removeprefix(images_spec.SITE_IN_IMAGE + "/"): content
               for path, (content, _) in images_spec.standin_files().items()}
    assert {"orchestrator/vllm_table/options_table.py", "orchestrator/sim/standin/__main__.py"} <= shipped.keys()
    for path, content in shipped.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(content)
    modules = sorted(path.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for path in shipped)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "bad = sorted(n for n in sys.modules if n.split('.')[0] not in sys.stdlib_module_names "
            "and n.split('.')[0] != 'orchestrator' and n != '__main__')\n"
            "print(len([n for n in sys.modules if n.split('.')[0] == 'orchestrator']), ' '.join(bad))")
    # -I: ignore PYTHON* env and user site; -S: no site-packages at all
    r = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(tmp_path)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    loaded, _, outside = r.stdout.strip().partition(" ")
    assert int(loaded) == len(modules) and outside == ""
    for path, content in shipped.items():
        for node in ast.walk(ast.parse(content)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert name.split(".")[0] in sys.stdlib_module_names | {"__future__"}, f"{path}: {name}"


def test_modules_are_small():
    for path in PKG.glob("*.py"):
        assert len(path.read_text().splitlines()) < 400, path.name
