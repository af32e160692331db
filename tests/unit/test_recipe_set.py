"""`--set KEY=VALUE` (config/overrides.py): applied to the parsed recipe before the model validates it, so a
value is typed and checked like the file's, errors name `--set KEY` instead of a file:line, an unknown key
gets the key meant, and the effective recipe (comments kept) deploys the same plan when read back."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.load import bind_recipe_text, load_deployment, load_recipe
from orchestrator.config.source import ConfigError
from orchestrator.config.vllm_flags import flag_issues
from orchestrator.render.plan import build_plan
import cli_json

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
INVENTORY = Path(__file__).parent / "corpus" / "good-inventory.yaml"


def errors(*overrides: str, recipe: Path = RECIPE) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_deployment(recipe, INVENTORY, overrides)
    return [str(i) for i in caught.value.issues]


def test_a_value_is_typed_as_yaml_and_the_effective_text_differs_only_there():
    dep = load_deployment(RECIPE, INVENTORY, ["vllm.max_model_len=8192", "vllm.enforce_eager=true",
                                              "vllm.extra.max-num-seqs=4"])
    assert dep.recipe.vllm.max_model_len == 8192 and dep.recipe.vllm.enforce_eager is True
    assert dep.recipe.vllm.extra["max-num-seqs"] == 4
    changed = [line for line in difflib.ndiff(RECIPE.read_text().splitlines(), dep.text().splitlines())
               if line.startswith(("- ", "+ "))]
    assert changed == ["-   max_model_len: 4096             # the fake model's max_position_embeddings",
                       "+   max_model_len: 8192             # the fake model's max_position_embeddings",
                       "-     max-num-seqs: 12", "+     max-num-seqs: 4",
                       "+   enforce_eager: true"], changed
    assert dep.overrides == ("vllm.max_model_len=8192", "vllm.enforce_eager=true", "vllm.extra.max-num-seqs=4")


def test_without_overrides_the_file_is_the_text():
    dep = load_deployment(RECIPE, INVENTORY)
    assert dep.recipe_text is None and dep.text() == RECIPE.read_text()


def test_the_last_of_two_sets_of_one_key_wins():
    recipe, _ = load_recipe(RECIPE, ["vllm.max_model_len=8192", "vllm.max_model_len=2048"])
    assert recipe.vllm.max_model_len == 2048


def test_the_recorded_text_read_back_gives_the_same_plan():
    dep = load_deployment(RECIPE, INVENTORY, ["vllm.max_model_len=8192"])
    again = bind_recipe_text(dep.text(), "release 1", dep.inventory, INVENTORY, dep.inventory_doc)
    assert again.recipe == dep.recipe
    plain = load_deployment(RECIPE, INVENTORY)
    assert build_plan(again, "r1").plan_hash == build_plan(dep, "r1").plan_hash != build_plan(plain, "r1").plan_hash


def test_an_unknown_key_names_the_set_and_the_key_meant():
    assert errors("vllm.max_model_lenn=8192") == [
        "--set vllm.max_model_lenn: unknown key; fix: did you mean --set vllm.max_model_len=...?"]
    dep = load_deployment(RECIPE, INVENTORY, ["vllm.extra.max-num-seq=4"])  # vLLM's table judges extra flags
    [flag] = [str(i) for i in flag_issues(dep.recipe, dep.recipe_doc)]
    assert flag.startswith("--set vllm.extra.max-num-seq: ") and "max-num-seqs" in flag, flag


def test_a_bad_value_is_refused_like_the_files_and_located_at_the_set():
    [bound] = errors("vllm.gpu_memory_utilization=0.99")
    assert bound.startswith("--set vllm.gpu_memory_utilization: 0.99 is outside (0, 0.95]")
    [typed] = errors("vllm.max_model_len=lots")
    assert typed.startswith("--set vllm.max_model_len: 'lots' is not an integer")
    [pair] = errors("vllm.tensor_parallel_size=3")  # a check across recipe and inventory names the --set too
    assert pair.startswith("--set vllm.tensor_parallel_size: tensor_parallel_size x pipeline_parallel_size = 3")


def test_malformed_sets_are_named():
    assert errors("max_model_len")[0].startswith("--set: 'max_model_len' is not KEY=VALUE")
    assert errors("vllm..x=1")[0].startswith("--set: 'vllm..x=1' is not KEY=VALUE")
    assert errors("vllm.max_model_len.x=1") == [
        "--set vllm.max_model_len.x: vllm.max_model_len is a value (4096), not a mapping of keys; fix: set it "
        "whole: --set vllm.max_model_len=VALUE"]
    assert errors("expect.lines.7.name=x")[0].startswith("--set expect.lines.7.name: expect.lines is a list of 1 item")
    assert errors("vllm.max_model_len=[1")[0].startswith("--set vllm.max_model_len: cannot read '[1' as a YAML value")


def test_a_mapping_the_set_created_is_traced_to_it_and_file_errors_keep_their_line(tmp_path):
    text = RECIPE.read_text().replace("  speculative_config:\n    method: dspark\n    num_speculative_tokens: 5\n", "")
    text = text.replace("  port: 8000\n", "  port: 0\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    found = errors("vllm.speculative_config.method=mtp", recipe=recipe)
    port_line = text.splitlines().index("  port: 0") + 1
    assert any(e.startswith(f"{recipe}:{port_line}: serve.port: ") for e in found), found
    assert any(e.startswith("--set vllm.speculative_config.method: vllm.speculative_config.num_speculative_tokens: "
                            "required key is missing") for e in found), found


def test_the_cli_takes_set_on_validate_and_render(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    bad = runner.invoke(app, ["validate", str(RECIPE), "-i", str(INVENTORY), "--set", "vllm.max_model_lenn=1"])
    assert bad.exit_code == 2 and "error: --set vllm.max_model_lenn: unknown key" in bad.output, bad.output

    def plan(*extra: str) -> str:
        result = runner.invoke(app, ["render", str(RECIPE), "-i", str(INVENTORY), "--json", *extra])
        assert result.exit_code == 0, result.output
        return cli_json.result(result.stdout)[0]["plan_hash"]

    assert plan("--set", "vllm.max_model_len=8192") == plan("--set", "vllm.max_model_len=8192") != plan()


def test_bench_set_needs_a_recipe():
    result = CliRunner().invoke(app, ["bench", "--url", "http://127.0.0.1:1", "--set", "vllm.max_model_len=1"])
    assert result.exit_code == 2 and "--set changes a recipe" in result.output, result.output


def test_history_output_goes_with_recipe_and_never_replaces_a_file(tmp_path):
    runner = CliRunner()
    alone = runner.invoke(app, ["history", "-i", str(INVENTORY), "-o", str(tmp_path / "r.yaml")])
    assert alone.exit_code == 2 and "-o FILE goes with --recipe N" in alone.output, alone.output
    there = tmp_path / "there.yaml"
    there.write_text("kept\n")
    refused = runner.invoke(app, ["history", "-i", str(INVENTORY), "--recipe", "1", "-o", str(there)])
    assert refused.exit_code == 2 and "the file exists" in refused.output and there.read_text() == "kept\n"


def test_up_records_the_effective_recipe_and_history_recipe_gives_it_back(tmp_path, monkeypatch, capsys):
    """In memory (tests/memnode): the release `up --set` makes holds the text with the override, and
    `history --recipe N` prints exactly that text, which renders release N's plan."""
    from functools import partial

    from memnode import connector
    from memnode.harness import MemCluster
    from orchestrator.cli.release_cmds import _recipe_of
    from orchestrator.operation import Observation
    from orchestrator.transport.group import Cluster

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    mem = MemCluster(tmp_path)
    dep = load_deployment(mem.dep.recipe_path, mem.dep.inventory_path, ["vllm.max_model_len=2048"])
    result = mem.up(dep)
    with Observation(mem.inventory, what="test", cluster_factory=partial(Cluster, connector=connector(mem.world))) as seen:
        releases = seen.state.history.releases
    [release] = [r for r in releases if r.id == result.release]
    assert release.recipe_text == dep.text() and "max_model_len: 2048" in release.recipe_text
    assert release.plan_hash == result.plan_hash

    _recipe_of(releases, release.id, None, False)
    printed = capsys.readouterr().out
    assert printed == release.recipe_text
    written = tmp_path / "release.yaml"
    _recipe_of(releases, release.id, written, False)
    assert written.read_text() == release.recipe_text
    again = load_deployment(written, mem.dep.inventory_path)
    assert build_plan(again).plan_hash == release.plan_hash
