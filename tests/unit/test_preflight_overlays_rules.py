"""The overlay and extra-mount checks' parts (issue 37): the in-image probe (its ELF reader against real
shared objects, compile without writing), the fact scripts run by the real driver (the probe's through a
fake `docker` that runs the probe with this Python, mounts mapped to the real files), and each judge's
messages naming node, file and cause."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fakes import IMAGE_ID, deployment

from orchestrator.config.source import ConfigError
from orchestrator.facts import overlay_probe as probe
from orchestrator.facts import overlays as fo
from orchestrator.preflight import checks_overlays as co
from orchestrator.facts.core import DRIVER, FACTS, FactInput, Observed, driver_args, parse_framed
from orchestrator.preflight.registry import Status
from orchestrator.render.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
SO = Path(__import__("_ctypes").__file__)  # a real shared object of this Python (exports PyInit__ctypes)
OLD, NEW = "a" * 64, "b" * 64


def _dep(tmp_path, overlays=(), extra=()):
    def edit(r):
        r["mounts"]["overlays"] = list(overlays)
        r["mounts"]["extra"] = list(extra)
    return deployment(tmp_path, edit)


def run_facts(names, given):
    facts = [FACTS[n] for n in names]
    out = subprocess.run(["bash", "-c", DRIVER, "driver", *driver_args(facts, given)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT, check=False)
    return parse_framed(out.stdout, {f.name: f for f in facts})


# --- the probe, run here by this Python -----------------------------------------------------------------

def test_dynamic_symbols_reads_a_real_shared_object():
    names = probe.dynamic_symbols(SO.read_bytes())
    assert "PyInit__ctypes" in names and "" not in names
    with pytest.raises(ValueError, match="not an ELF file"):
        probe.dynamic_symbols(b"#!/bin/sh\n")


def test_dynamic_symbols_agree_with_nm(tmp_path):
    nm = subprocess.run(["nm", "-D", "--defined-only", str(SO)], capture_output=True, text=True, check=False)
    if nm.returncode:
        pytest.skip(f"no nm here: {nm.stderr.strip()}")
    listed = {line.split()[2].split("@")[0] for line in nm.stdout.splitlines()
              if len(line.split()) == 3 and line.split()[1].isupper()}
    assert listed and listed <= probe.dynamic_symbols(SO.read_bytes())


def test_probe_compiles_without_writing_and_reports_symbols(tmp_path):
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text("def f(:\n    pass\n")
    good.write_text("x = 1\n")
    target = tmp_path / "image-file.py"
    target.write_text("upstream\n")
    got = [probe.one({"target": str(target), "source": str(bad), "compile": True, "symbols": []}),
           probe.one({"target": str(tmp_path / "gone.py"), "source": str(good), "compile": True, "symbols": []}),
           probe.one({"target": str(SO), "source": str(SO), "compile": False, "symbols": ["PyInit__ctypes", "nope_x"]})]
    assert got[0]["exists"] and got[0]["sha256"] == probe.sha256(str(target))
    assert got[0]["compile"].startswith(f"{target} line 1: SyntaxError")
    assert not got[1]["exists"] and got[1]["sha256"] is None and got[1]["compile"] == ""
    assert got[2]["missing_symbols"] == ["nope_x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.py", "good.py", "image-file.py"]  # no .pyc


# --- the fact scripts, by the real driver --------------------------------------------------------------

FAKE_DOCKER = r'''#!/usr/bin/env python3
"""`docker run ... --mount type=bind,src=S,dst=D,readonly ... --entrypoint python3 IMAGE -I -S -c PROG SPEC`:
runs PROG with this Python, each mounted dst in SPEC replaced by its src."""
import json, os, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(argv) + "\n")
assert argv[0] == "run" and "-v" not in argv and "--gpus" not in argv, argv
if os.environ.get("FAKE_DOCKER_MODE") == "missing":
    sys.exit("docker: Error response from daemon: No such image: x.")
mounts, i = {}, 1
while argv[i].startswith("--"):
    if argv[i] == "--rm":
        i += 1
        continue
    if argv[i] == "--mount":
        opts = dict(kv.split("=", 1) for kv in argv[i + 1].split(",") if "=" in kv)
        assert argv[i + 1].endswith(",readonly"), argv[i + 1]
        mounts[opts["dst"]] = opts["src"]
    i += 2
rest = argv[i + 1:]
spec = json.loads(rest[-1])
for entry in spec:
    if entry["source"] is not None:
        entry["source"] = mounts.get(entry["source"], "/nonexistent" + entry["source"])
os.execvp(sys.executable, [sys.executable, *rest[:-1], json.dumps(spec)])
'''


@pytest.fixture
def fake_docker(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(FAKE_DOCKER)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "docker.log"))
    return tmp_path / "docker.log"


def test_probe_script_mounts_only_files_on_the_head_and_judges(tmp_path, fake_docker):
    bad = tmp_path / "attn.py"
    bad.write_text("return = 1\n")
    upstream = tmp_path / "image" / "attn.py"
    upstream.parent.mkdir()
    upstream.write_text("original\n")
    overlays = [{"source": str(bad), "target": str(upstream), "base_sha256": OLD},
                {"source": str(tmp_path / "not-here.py"), "target": str(tmp_path / "image" / "gone.py")},
                {"source": str(SO), "target": str(SO), "symbols": ["PyInit__ctypes", "missing_sym"]}]
    dep = _dep(tmp_path, overlays)
    head = FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))
    got = run_facts(["overlay_image"], head)["overlay_image"]
    assert got.ok, got.error
    calls = [json.loads(c) for c in fake_docker.read_text().splitlines()]
    assert len(calls) == 1 and ["--network", "none"] == calls[0][calls[0].index("--network"):][:2]
    assert IMAGE_ID in calls[0] and "--pull" in calls[0] and calls[0].count("--mount") == 2  # not the missing one
    seen = {"spark-1": {"overlay_image": got}, "spark-2": {}}
    base = co.overlay_base(seen, dep)
    text = base.cells["spark-1"].value
    assert base.status is Status.FAIL
    assert f"upstream changed {upstream} since this overlay was written: port the patch again or update " \
           f"base_sha256 (image: {probe.sha256(str(upstream))}, base_sha256: {OLD})" in text
    assert f"{tmp_path}/image/gone.py is not in image" in text and base.fix.startswith("spark-1: ")
    comp = co.overlay_compile(seen, dep)
    assert comp.status is Status.FAIL and f"{bad} does not compile with the image's Python" in comp.fix
    assert "SyntaxError" in comp.fix and "not-here.py" in comp.fix
    syms = co.overlay_symbols(seen, dep)
    assert syms.status is Status.FAIL and f"{SO} does not export missing_sym" in syms.fix
    assert "PyInit__ctypes" not in syms.fix
    # on a peer the script runs nothing
    peer = run_facts(["overlay_image"], FactInput(dep.inventory.node("spark-2"), dep, build_plan(dep)))
    assert peer["overlay_image"].value is None and len(fake_docker.read_text().splitlines()) == 1


def test_probe_passes_when_base_matches_and_everything_compiles(tmp_path, fake_docker):
    good = tmp_path / "attn.py"
    good.write_text("x = 1\n")
    upstream = tmp_path / "attn-upstream.py"
    upstream.write_text("original\n")
    dep = _dep(tmp_path, [{"source": str(good), "target": str(upstream), "base_sha256": probe.sha256(str(upstream))},
                          {"source": str(SO), "target": str(SO), "symbols": ["PyInit__ctypes"]}])
    got = run_facts(["overlay_image"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))
    seen = {"spark-1": {"overlay_image": got["overlay_image"]}}
    assert co.overlay_base(seen, dep).status is Status.OK
    assert "no base_sha256 for" in co.overlay_base(seen, dep).cells["spark-1"].value  # the .so has none
    assert co.overlay_compile(seen, dep).status is Status.OK
    assert co.overlay_symbols(seen, dep).cells["spark-1"].value == "1 symbol(s) exported by 1 .so overlay(s)"


def test_probe_image_not_on_the_head_is_a_skip_that_says_so(tmp_path, fake_docker, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_MODE", "missing")
    dep = _dep(tmp_path, [{"source": "/opt/a.py", "target": "/usr/lib/a.py"}])
    got = run_facts(["overlay_image"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))
    cell = co.overlay_base({"spark-1": got}, dep).cells["spark-1"]
    assert cell.status is Status.SKIP and "not on the head yet" in cell.value


def test_sources_script_hashes_overlays_and_kinds_extras(tmp_path):
    f, d = tmp_path / "patch.py", tmp_path / "vocab"
    f.write_text("x = 1\n")
    d.mkdir()
    dep = _dep(tmp_path, [{"source": str(f), "target": "/usr/a.py"}, {"source": str(tmp_path / "no.py"), "target": "/usr/b.py"}],
               [{"source": str(d), "target": "/v"}, {"source": str(tmp_path / "gone.txt"), "target": "/g", "kind": "file"}])
    got = run_facts(["mount_sources"], FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep)))["mount_sources"]
    assert got.ok, got.error
    assert got.value["o"] == {str(f): fo.Source("file", probe.sha256(str(f))),
                              str(tmp_path / "no.py"): fo.Source("missing", None)}
    assert got.value["e"] == {str(d): fo.Source("directory", None), str(tmp_path / "gone.txt"): fo.Source("missing", None)}


# --- the node judges -----------------------------------------------------------------------------------

def _sources(o=None, e=None) -> Observed:
    return Observed(value={"o": o or {}, "e": e or {}})


def test_overlay_parity_names_the_odd_node_with_its_hash(tmp_path):
    dep = _dep(tmp_path, [{"source": "/opt/a.py", "target": "/usr/a.py"}])
    seen = {"spark-1": {"mount_sources": _sources({"/opt/a.py": fo.Source("file", OLD)})},
            "spark-2": {"mount_sources": _sources({"/opt/a.py": fo.Source("file", NEW)})}}
    verdict = co.overlay_parity(seen, dep)
    assert verdict.cells["spark-1"].status is Status.OK
    assert verdict.cells["spark-2"].status is Status.FAIL
    assert f"spark-2: /opt/a.py differs: sha256 {NEW} here, {OLD} on spark-1" in verdict.fix
    seen["spark-2"]["mount_sources"] = _sources({"/opt/a.py": fo.Source("missing", None)})
    verdict = co.overlay_parity(seen, dep)
    assert verdict.cells["spark-2"].value == "/opt/a.py is missing" and verdict.cells["spark-1"].status is Status.OK
    seen["spark-2"]["mount_sources"] = _sources({"/opt/a.py": fo.Source("file", OLD)})
    assert co.overlay_parity(seen, dep).status is Status.OK


def test_extra_mounts_missing_and_wrong_kind(tmp_path):
    dep = _dep(tmp_path, extra=[{"source": "/srv/vocab.txt", "target": "/etc/vocab.txt", "kind": "file"},
                                {"source": "/srv/data", "target": "/data"}])
    seen = {"spark-1": {"mount_sources": _sources(e={"/srv/vocab.txt": fo.Source("file", None),
                                                     "/srv/data": fo.Source("directory", None)})},
            "spark-2": {"mount_sources": _sources(e={"/srv/vocab.txt": fo.Source("missing", None),
                                                     "/srv/data": fo.Source("file", None)})}}
    verdict = co.extra_mounts(seen, dep)
    assert verdict.cells["spark-1"].status is Status.FAIL  # /srv/data: the kinds differ, no declared kind
    assert "spark-2: /srv/vocab.txt missing (docker would mount an empty directory it creates at " \
           "/etc/vocab.txt)" in verdict.fix
    assert "/srv/data is a file here, not the same kind on every node" in verdict.cells["spark-2"].value
    seen["spark-2"]["mount_sources"] = _sources(e={"/srv/vocab.txt": fo.Source("directory", None),
                                                   "/srv/data": fo.Source("directory", None)})
    verdict = co.extra_mounts(seen, dep)
    assert verdict.cells["spark-1"].status is Status.OK
    assert verdict.cells["spark-2"].value == "/srv/vocab.txt is a directory, the recipe needs a file"


def test_nothing_to_check_is_a_skip(tmp_path):
    dep = _dep(tmp_path)
    seen = {"spark-1": {}, "spark-2": {}}
    for judge in (co.overlay_base, co.overlay_compile, co.overlay_symbols, co.overlay_parity, co.extra_mounts):
        assert {c.status for c in judge(seen, dep).cells.values()} == {Status.SKIP}


# --- the recipe's new keys ---------------------------------------------------------------------------

def test_recipe_keys_validate_and_stay_out_of_the_digest(tmp_path):
    plain = _dep(tmp_path, [{"source": "/opt/a.py", "target": "/usr/a.py"}], [{"source": "/srv/v", "target": "/v"}])
    pinned = _dep(tmp_path, [{"source": "/opt/a.py", "target": "/usr/a.py", "base_sha256": OLD, "symbols": ["f"]}],
                  [{"source": "/srv/v", "target": "/v", "kind": "directory"}])
    assert plain.recipe.digest() == pinned.recipe.digest()  # the launch is the same
    for bad in ({"base_sha256": "ABC"}, {"symbols": ["no spaces"]}, {"kind": "file"}):
        with pytest.raises(ConfigError):
            _dep(tmp_path, [{"source": "/opt/a.py", "target": "/usr/a.py", **bad}])
