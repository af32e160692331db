"""`upgrade`'s parts without a cluster: holding the image (inspect, else pull, else say how to load it),
the recipe written beside or in place (the old file kept), and what the release records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import IMAGE_ID, sim_recipe
from ruamel.yaml import YAML

from orchestrator.config.load import load_recipe
from orchestrator.deploy import upgrade as ug
from orchestrator.docker_cli.images import INSPECT_IMAGES
from orchestrator.transport.result import Result

NEW_ID = "sha256:" + "e" * 64


class Node:
    """Answers `docker image inspect` from `held`, and `docker pull` by adding the ref when `pullable`."""

    name = "spark-1"

    def __init__(self, held: set[str], pullable: bool):
        self.held, self.pullable, self.pulls = held, pullable, []

    def run_script(self, script, *args, **_kw):
        assert script is INSPECT_IMAGES
        lines = [json.dumps({"Id": NEW_ID, "RootFS": {"Layers": []}}) if r in self.held else "null" for r in args]
        return Result(self.name, args, 0, "\n".join(lines) + "\n", "")

    def run(self, argv, **_kw):
        assert argv[:2] == ["docker", "pull"]
        self.pulls.append(argv[2])
        if self.pullable:
            self.held.add(argv[2])
            return Result(self.name, tuple(argv), 0, "pulled\n", "")
        return Result(self.name, tuple(argv), 1, "", "Error response from daemon: pull access denied for x\n")


def test_hold_uses_what_the_node_has_else_pulls_else_says_how_to_load():
    there = Node({"org/vllm:0.34"}, pullable=False)
    assert ug.hold(there, "org/vllm:0.34").id == NEW_ID and there.pulls == []
    pulls = Node(set(), pullable=True)
    assert ug.hold(pulls, "org/vllm:0.34").id == NEW_ID and pulls.pulls == ["org/vllm:0.34"]
    with pytest.raises(ug.UpgradeRefused) as refused:
        ug.hold(Node(set(), pullable=False), "org/vllm:0.34")
    said = str(refused.value)
    assert "spark-1 does not hold org/vllm:0.34 and could not pull it (Error response from daemon: pull access " \
           "denied for x)" in said and "docker load -i IMAGE.tar` on spark-1" in said


def _recipe(tmp_path):
    path = tmp_path / "r.yaml"
    data = sim_recipe()
    with path.open("w") as handle:
        YAML().dump(data, handle)
    return path


def test_write_recipe_beside_or_in_place_keeping_the_old(tmp_path):
    path = _recipe(tmp_path)
    before = path.read_text()
    written, backup = ug.write_recipe(path, "org/vllm:0.34", NEW_ID, tmp_path / "new.yaml")
    assert backup is None and path.read_text() == before
    recipe, _ = load_recipe(written)
    assert (recipe.image.ref, recipe.image.id) == ("org/vllm:0.34", NEW_ID)
    written, backup = ug.write_recipe(path, "org/vllm:0.34", NEW_ID, None)
    assert written == path and backup.read_text() == before and load_recipe(path)[0].image.id == NEW_ID
    assert ug.write_recipe(path, "org/vllm:0.34", NEW_ID, None) == (path, None)  # already named: nothing kept
    _, again = ug.write_recipe(path, "org/vllm:0.35", IMAGE_ID, None)
    assert again.name == "r.yaml.before-upgrade.1" and backup.read_text() == before


def test_the_release_records_both_versions():
    up = ug.Upgrade("spark-1", Path("r.yaml"), None, IMAGE_ID, NEW_ID, "0.33.0", "0.34.0",
                    defaults_changed=["--a: 1 -> 2"])
    assert up.record() == {"from": {"image_id": IMAGE_ID, "vllm_version": "0.33.0"},
                           "to": {"image_id": NEW_ID, "vllm_version": "0.34.0"}, "defaults_changed": ["--a: 1 -> 2"]}


# --- defaults as the parser prints them ----------------------------------------------------------------

HELP = Path(__file__).resolve().parents[1] / "data" / "vllm"


def test_defaults_read_from_the_real_help_match_the_parsers_own_table():
    """vLLM 0.33.0's `--help=all` against its action table (options.json): the printed default is
    str(default) for all but a few whose text argparse wrapped inside a word or printed as a repr."""
    from orchestrator.checks.help_defaults import parse_defaults

    printed = parse_defaults((HELP / "serve-help-all.txt").read_text())
    table = json.loads((HELP / "options.json").read_text())["options"]
    rows = [(next(o for o in a["option_strings"] if o.startswith("--")), str(a["default"])) for a in table
            if any(o.startswith("--") for o in a["option_strings"]) and a.get("help") != "==SUPPRESS=="]
    same = [name for name, default in rows if printed.get(name) == default]
    assert len(printed) > 300 and len(same) >= len(printed) - 5
    assert printed["--gpu-memory-utilization"] == "0.92" and printed["--enable-log-requests"] == "False"


def test_changed_defaults_leave_out_the_flags_the_recipe_sets():
    from orchestrator.checks.help_defaults import changed_defaults

    old = {"--a": "1", "--b": "x", "--c": "None", "--gone": "1"}
    new = {"--a": "2", "--b": "x", "--c": "auto", "--added": "3"}
    assert changed_defaults(old, new, used={"--c"}) == ["--a: 1 -> 2"]
