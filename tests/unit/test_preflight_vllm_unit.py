"""The vLLM preflight checks' pure parts: the help parser on the real 0.33.0 output and on the stand-in's,
the flag judge, the speculative and overlay judges, the controller cache, and the fact scripts themselves
run by the real fact driver against a fake `docker` (an executable that behaves like the engine for the
image it is given: argv in, help text or an error out)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import IMAGE_ID, deployment

from orchestrator.checks import flags as cf
from orchestrator.facts import vllm as fv
from orchestrator.preflight import checks_vllm as cv
from orchestrator.facts.core import (
    DRIVER,
    FACTS,
    FactInput,
    Observed,
    driver_args,
    parse_framed,
)
from orchestrator.checks.help_parse import Layout, canonical, layout, parse_help
from orchestrator.checks.verdict import Status
from orchestrator.render.plan import build_plan
from orchestrator.sim import fake_model

SHARED = Path(__file__).resolve().parents[1] / "data" / "vllm"  # copied from shared/vllm: see its README
HELP_ALL = (SHARED / "serve-help-all.txt").read_text()
HELP_GROUPS = (SHARED / "serve-help.txt").read_text()
ROOT = Path(__file__).resolve().parents[2]


def real_table() -> dict:
    """What the real parser accepts, from its own action table (options.json)."""
    data = json.loads((SHARED / "options.json").read_text())
    out = {}
    for action in data["options"]:
        choices = tuple(str(c) for c in action["choices"]) if action["choices"] else None
        for s in action["accepted_option_strings"]:
            out[s] = choices
    assert len(out) == data["count_option_strings"]
    return out


def standin_help(*args: str) -> str:
    return subprocess.run([sys.executable, "-m", "orchestrator.sim.standin", "serve", *args], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg"


# --- help_parse ---------------------------------------------------------------------------------------

def test_parse_real_help_all_equals_the_real_parser_table():
    assert parse_help(HELP_ALL) == real_table()


def test_parse_standin_help_all_equals_the_real_parser_table():
    assert parse_help(standin_help("--help=all")) == real_table()


def test_specific_shapes_of_the_real_help():
    opts = parse_help(HELP_ALL)
    assert "flashinfer_b12x" in opts["--moe-backend"]
    assert opts["--no-enable-prefix-caching"] is None and "--enable-prefix-caching" in opts
    assert opts["--no-enable-expert-parallel"] is None and "-ep" in opts  # hidden --no- of a 3-string line
    assert "--no-data-parallel-multi-port-external-lb" not in opts  # store_true with a short alias only
    assert opts["--kv-cache-dtype"] is None  # a list-shaped metavar is not enforced by argparse
    assert opts["--tool-call-parser"] is None  # "{...} or name registered in ...": not enforced
    assert opts["-asc"] is None and "--api-server-count" in opts
    assert opts["--collect-detailed-traces"] == ("all", "model", "worker", "None")  # nargs "+"
    assert "None" in opts["--spec-method"]
    assert "--json-arg" not in opts  # the epilog's examples are not options


def test_layout_tells_the_group_list_apart():
    assert layout(HELP_ALL) is Layout.FULL
    assert layout(HELP_GROUPS) is Layout.GROUPS
    assert layout(standin_help("--help")) is Layout.GROUPS
    assert layout("Traceback (most recent call last):\n  File x\n") is Layout.UNKNOWN
    with pytest.raises(ValueError, match="group list"):
        parse_help(HELP_GROUPS)


def test_older_plain_argparse_help_is_a_full_listing():
    """vLLM before 0.9 was a plain argparse parser whose --help listed every flag."""
    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("--max-model-len", type=int)
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8"], default="auto", help="x " * 40)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    text = p.format_help()
    assert layout(text) is Layout.FULL
    opts = parse_help(text)
    assert opts["--kv-cache-dtype"] == ("auto", "fp8")
    assert {"--max-model-len", "--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
            "-h", "--help"} <= set(opts)


def test_canonical_follows_the_flexible_parser():
    opts = parse_help(HELP_ALL)
    assert canonical("--max_model_len", opts) == "--max-model-len"
    assert canonical("--max-model-len=4096", opts) == "--max-model-len"
    assert canonical("--compilation-config.mode", opts) == "--compilation-config"
    assert canonical("-O3", opts) == "--optimization-level"
    assert canonical("-tp", opts) == "-tp"


# --- the flag judge -----------------------------------------------------------------------------------

def test_judge_flags_unknown_and_bad_choice_name_the_closest():
    opts = parse_help(HELP_ALL)
    fails, warns = cf.judge_flags([("--max-model", "4096"), ("--moe-backend", "flashinfer_b13x"),
                                   ("--max_num_seqs", "8"), ("--no-enable-prefix-caching", None),
                                   ("--moe-backend", "FLASHINFER_B12X")], opts)
    assert len(fails) == 2, fails
    assert fails[0].startswith("unknown flag --max-model (closest: ") and "--max-model-len" in fails[0]
    assert "--moe-backend: invalid choice 'flashinfer_b13x' (closest: flashinfer_b12x" in fails[1]
    assert warns and "FLASHINFER_B12X" in warns[0] and "'flashinfer_b12x'" in warns[0]


def test_rendered_flags_are_every_ranks_serve_options(tmp_path):
    dep = deployment(tmp_path)
    flags = dict(cf.rendered_flags(build_plan(dep)))
    assert flags["--moe-backend"] == "flashinfer_b12x"
    assert json.loads(flags["--speculative-config"])["num_speculative_tokens"] == 5
    assert "--headless" in flags and flags["--headless"] is None  # from the peer's argv
    assert not any(f.startswith(("--volume", "--env", "--label", "--name")) for f in flags)  # docker's own
    dep2 = deployment(tmp_path, lambda r: r["image"].__setitem__("serve_entrypoint", False))
    assert dict(cf.rendered_flags(build_plan(dep2))) == flags


def _seen_help(dep, value) -> dict:
    return {dep.inventory.head: {"image_help": value}, "spark-2": {"image_help": Observed(value=fv.parse_image_help(
        "@peer\n"))}}


def test_vllm_flags_judge_writes_then_reads_the_cache(tmp_path, cache_home):
    dep = deployment(tmp_path, lambda r: r["vllm"]["extra"].__setitem__("max-num-seqz", 4))
    head_in = FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))
    peer_in = FactInput(dep.inventory.node("spark-2"), dep, build_plan(dep))
    assert fv._help_args(peer_in) == []
    assert fv._help_args(head_in) == [IMAGE_ID]
    fresh = Observed(value=fv.parse_image_help("@via --help=all\n" + HELP_ALL))
    verdict = cv.vllm_flags(_seen_help(dep, fresh), dep)
    assert verdict.status is Status.FAIL and list(verdict.cells) == ["spark-1"]
    assert "unknown flag --max-num-seqz (closest: --max-num-seqs" in verdict.cells["spark-1"].value
    assert fv.cache_file("vllm-help", IMAGE_ID).is_file()
    assert fv._help_args(head_in) == [fv.CACHED]
    cached = Observed(value=fv.parse_image_help("@cached\n"))
    again = cv.vllm_flags(_seen_help(dep, cached), dep)
    assert again.cells["spark-1"].value == verdict.cells["spark-1"].value
    ok = cv.vllm_flags(_seen_help(deployment(tmp_path), cached), deployment(tmp_path))
    assert ok.status is Status.OK and "--help=all, cached" in ok.cells["spark-1"].value


def test_vllm_flags_skips_when_the_image_is_not_on_the_head_and_fails_when_it_breaks(tmp_path):
    dep = deployment(tmp_path)
    gone = Observed(error="docker: Error response from daemon: No such image: sha256:2cef")
    assert cv.vllm_flags(_seen_help(dep, gone), dep).cells["spark-1"].status is Status.SKIP
    broken = Observed(error="ModuleNotFoundError: No module named 'vllm'")
    assert cv.vllm_flags(_seen_help(dep, broken), dep).cells["spark-1"].status is Status.FAIL


def test_group_list_from_help_all_is_refused_not_read_as_no_flags():
    with pytest.raises(ValueError, match="only the list of config groups"):
        fv.parse_image_help("@via --help=all\n" + HELP_GROUPS)


def test_unpinned_images_are_never_cached(tmp_path):
    fv.write_cache("vllm-help", "vllm-sim:latest", {"via": "--help=all", "options": {}})
    assert fv.read_cache("vllm-help", "vllm-sim:latest") is None
    assert not (fv.cache_root() / "vllm-help").exists()


# --- speculative tokens ---------------------------------------------------------------------------------

def _spec_dep(tmp_path, k: int | None, method: str = "mtp"):
    def edit(r):
        if k is None:
            r["vllm"].pop("speculative_config")
        else:
            r["vllm"]["speculative_config"].update(num_speculative_tokens=k, method=method)
    return deployment(tmp_path, edit)


@pytest.mark.parametrize(("k", "config", "status", "method"), [
    (7, {"n_predict": 5}, Status.FAIL, "mtp"), (10, {"n_predict": 5}, Status.OK, "mtp"),
    (3, {"num_nextn_predict_layers": 2}, Status.FAIL, "mtp"), (5, {}, Status.OK, "mtp"),
    # vLLM 0.33.0 (config/speculative.py): fewer than n_predict is accepted, and dspark is never checked
    (3, {"n_predict": 5}, Status.OK, "mtp"), (7, {"n_predict": 5}, Status.OK, "dspark")])
def test_speculative_tokens(tmp_path, k, config, status, method):
    dep = _spec_dep(tmp_path, k, method)
    value = fv.parse_spec_model_config(json.dumps({"model_type": "x", **config}))
    verdict = cv.speculative_tokens({"spark-1": {"spec_model_config": Observed(value=value)},
                                     "spark-2": {"spec_model_config": Observed(value=value)}}, dep)
    assert verdict.status is status
    if status is Status.FAIL:
        assert f"num_speculative_tokens={k} is not divisible by n_predict=" in verdict.cells["spark-2"].value
        assert "speculative_config.num_speculative_tokens" in verdict.fix
        assert "rule spec-tokens-divisible-by-n-predict" in verdict.fix
        assert f"num_speculative_tokens:{k} must be divisible by n_predict=" in verdict.fix  # vLLM's words


def test_speculative_tokens_skip_without_a_speculative_config(tmp_path):
    dep = _spec_dep(tmp_path, None)
    node = FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))
    assert fv._spec_args(node) == []
    verdict = cv.speculative_tokens({"spark-1": {"spec_model_config": Observed(value=None)}}, dep)
    assert verdict.cells["spark-1"].status is Status.SKIP and "no vllm.speculative_config" in \
        verdict.cells["spark-1"].value


# --- overlays -----------------------------------------------------------------------------------------

def _overlay_dep(tmp_path):
    return deployment(tmp_path, lambda r: r["mounts"].__setitem__("overlays", [
        {"source": "/opt/a.py", "target": "/usr/lib/x/a.py"}, {"source": "/opt/b.py", "target": "/usr/lib/x/b.py"}]))


def test_overlay_targets_and_sources(tmp_path):
    dep = _overlay_dep(tmp_path)
    head_in = FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))
    assert fv._targets_args(head_in) == [IMAGE_ID, "/usr/lib/x/a.py", "/usr/lib/x/b.py"]
    seen = {"spark-1": {"overlay_targets": Observed(value=fv.parse_overlay_targets(
                "@fresh\nyes /usr/lib/x/a.py\nno /usr/lib/x/b.py\n")),
                        "overlay_sources": Observed(value=fv.parse_overlay_sources("yes /opt/a.py\nyes /opt/b.py\n"))},
            "spark-2": {"overlay_targets": Observed(value=fv.parse_overlay_targets("@none\n")),
                        "overlay_sources": Observed(value=fv.parse_overlay_sources("yes /opt/a.py\nno /opt/b.py\n"))}}
    verdict = cv.overlay_targets(seen, dep)
    assert verdict.cells["spark-1"].status is Status.FAIL and "/usr/lib/x/b.py" in verdict.cells["spark-1"].value
    assert verdict.cells["spark-2"].status is Status.FAIL and "/opt/b.py" in verdict.cells["spark-2"].value
    assert "target /usr/lib/x/b.py not in the image" in verdict.fix and "/opt/b.py missing on spark-2" in verdict.fix
    assert fv._targets_args(head_in) == [fv.CACHED]  # both answers are now known for this image
    seen["spark-1"]["overlay_targets"] = Observed(value=fv.parse_overlay_targets("@cached\n"))
    assert cv.overlay_targets(seen, dep).cells["spark-1"].value == verdict.cells["spark-1"].value


def test_overlay_targets_skip_without_overlays(tmp_path):
    dep = deployment(tmp_path)
    verdict = cv.overlay_targets({"spark-1": {}, "spark-2": {}}, dep)
    assert {c.status for c in verdict.cells.values()} == {Status.SKIP}


# --- the fact scripts, run by the real driver against a fake docker -------------------------------------

FAKE_DOCKER = r'''#!/usr/bin/env python3
"""A fake engine: `docker run [opts] IMAGE ARGS...` for one image mode, set in FAKE_DOCKER_MODE."""
import os, subprocess, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(repr(argv) + "\n")
assert argv[0] == "run", argv
i, entry = 1, None
while argv[i].startswith("--"):
    if argv[i] in ("--rm",):
        i += 1
        continue
    if argv[i] == "--entrypoint":
        entry = argv[i + 1]
    i += 2
image, rest = argv[i], argv[i + 1:]
mode = os.environ["FAKE_DOCKER_MODE"]
if mode == "missing":
    sys.exit(f"docker: Error response from daemon: No such image: {image}.")
if entry == "vllm":
    if mode == "old" and any(a.startswith("--help=") for a in rest):
        sys.exit("vllm serve: error: argument -h/--help: ignored explicit argument 'all'")
    os.execvp(sys.executable, [sys.executable, "-m", "orchestrator.sim.standin", *rest])
os.execvp(entry, [entry, *rest])
'''


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "docker.log"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return tmp_path / "docker.log"


def run_facts(names: list[str], given: FactInput) -> dict[str, Observed]:
    facts = [FACTS[n] for n in names]
    out = subprocess.run(["bash", "-c", DRIVER, "driver", *driver_args(facts, given)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, check=False)
    return parse_framed(out.stdout, {f.name: f for f in facts})


@pytest.mark.parametrize(("mode", "via"), [("new", "--help=all"), ("old", "--help")])
def test_image_help_script_new_and_fallback(tmp_path, fake_docker, monkeypatch, mode, via):
    """`old`: an image refusing --help=all; its plain --help (here the stand-in's group list, so the
    fallback's output is refused as a group list rather than read as an image without flags)."""
    monkeypatch.setenv("FAKE_DOCKER_MODE", mode)
    dep = deployment(tmp_path)
    got = run_facts(["image_help"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))["image_help"]
    calls = fake_docker.read_text().splitlines()
    assert all("'--network', 'none'" in c and "'--pull', 'never'" in c and "--gpus" not in c for c in calls)
    if mode == "new":
        assert got.ok and got.value["via"] == via and got.value["options"] == real_table()
        assert len(calls) == 1
    else:
        assert not got.ok and "only the list of config groups" in got.error and len(calls) == 2


def test_image_help_script_on_a_peer_and_when_cached_runs_nothing(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_MODE", "new")
    dep = deployment(tmp_path)
    peer = run_facts(["image_help"], FactInput(dep.inventory.node("spark-2"), dep, build_plan(dep)))
    assert peer["image_help"].value == {"source": fv.Source.PEER}
    fv.write_cache("vllm-help", IMAGE_ID, {"via": "--help=all", "options": {}})  # an older spark-deploy's:
    assert fv._help_args(FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))) == [IMAGE_ID]  # read again
    fv.write_cache("vllm-help", IMAGE_ID, {"via": "--help=all", "options": {}, "listed": {}})
    head = run_facts(["image_help"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))
    assert head["image_help"].value == {"source": fv.Source.CACHED}
    assert not fake_docker.exists()


def test_image_help_script_missing_image(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_MODE", "missing")
    dep = deployment(tmp_path)
    got = run_facts(["image_help"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))["image_help"]
    assert "No such image" in got.error


def test_spec_model_config_script_reads_the_snapshot_of_the_ref(tmp_path):
    hf = tmp_path / "hf"
    fake_model.write_hf_cache(hf)

    def edit(i):
        for n in i["nodes"]:
            n["hf_cache"] = str(hf)
    dep = deployment(tmp_path, lambda r: r["model"].__setitem__("repo", fake_model.REPO_ID), edit)
    got = run_facts(["spec_model_config"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))
    assert got["spec_model_config"].value == {"n_predict": None, "num_nextn_predict_layers": None}


def test_overlay_scripts_on_real_paths(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_MODE", "new")
    (tmp_path / "src a.py").write_text("x")
    dep = deployment(tmp_path, lambda r: r["mounts"].__setitem__("overlays", [
        {"source": str(tmp_path / "src a.py"), "target": str(tmp_path / "src a.py")},
        {"source": str(tmp_path / "nope.py"), "target": "/nonexistent/target.py"}]))
    got = run_facts(["overlay_targets", "overlay_sources"],
                    FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))
    assert got["overlay_targets"].value["paths"] == {str(tmp_path / "src a.py"): True, "/nonexistent/target.py": False}
    assert got["overlay_sources"].value == {str(tmp_path / "src a.py"): True, str(tmp_path / "nope.py"): False}
