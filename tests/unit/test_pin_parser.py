"""`pin` reads the pinned image's own `vllm serve` parser and caches it by image ID; validate, render and up
then judge the recipe's flags by that table and say which table they judged against (the shipped one when
none is cached). On the in-memory connector (tests/memnode): the node answers the same script constant
preflight's image_help fact sends, with vLLM 0.33.0's recorded `--help=all`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import cli_json
from orchestrator.cli.main import app
from orchestrator.config import flag_table
from orchestrator.deploy.pin import ParserCache, PinOutcome, pin
from orchestrator.facts import vllm as fv
from orchestrator.releases import audit

from fakes import IMAGE_ID
from memnode import connector
from memnode.harness import PREFLIGHT, MemCluster


def help_reads(made) -> int:
    return sum(1 for conn in made.made for c in conn.commands if c is fv.HELP_SCRIPT)


def audit_lines(mem: MemCluster) -> list[dict]:
    text = mem.node("spark-1").files.get(audit.audit_path(mem.inventory, "spark-1"), "")
    return [json.loads(line) for line in text.splitlines()]


def test_pin_caches_the_images_parser_by_id_once(mem, tmp_path):
    assert flag_table.image_table(IMAGE_ID) is None
    made = connector(mem.world)
    result = pin(mem.dep.recipe_path, mem.dep.recipe, mem.inventory, "spark-1", False, mem.events, connector=made)
    assert result.outcome is PinOutcome.ALREADY and result.found.id == IMAGE_ID
    assert result.parser is ParserCache.READ and help_reads(made) == 1
    path = tmp_path / "xdg" / "spark-deploy" / "vllm-help" / (IMAGE_ID.replace(":", "-") + ".json")
    assert result.parser_note == str(path) and path.exists()
    table = flag_table.table_for(IMAGE_ID)
    assert table.image == IMAGE_ID and str(path) in table.source
    # the recorded 0.33.0 parser: its options, and the values its list-shaped metavar names (kv-cache-dtype)
    assert table.knows("max-num-seqs") and not table.knows("max-num-seq")
    assert "fp8_ds_mla" in table.accepted("kv-cache-dtype") and "nvfp4_ds_mla" in table.accepted("kv-cache-dtype")
    assert audit_lines(mem)[-1]["action"] == "pin" and "its vLLM parser read and cached" in audit_lines(mem)[-1]["detail"]

    again = connector(mem.world)
    second = pin(mem.dep.recipe_path, mem.dep.recipe, mem.inventory, "spark-1", False, mem.events, connector=again)
    assert second.parser is ParserCache.ALREADY and help_reads(again) == 0  # an image ID never changes content


def test_a_parser_that_cannot_be_read_leaves_the_pin_and_says_why(mem):
    """An image whose `vllm` cannot print its parser: the pin holds, nothing is cached, the reason is said,
    and the shipped table stays the judge."""
    def broken(node, shield):
        return 1, "", 'docker: Error response from daemon: exec: "vllm": executable file not found in $PATH\n'
    mem.node("spark-1").traps.append((lambda command: command is fv.HELP_SCRIPT, broken))
    result = pin(mem.dep.recipe_path, mem.dep.recipe, mem.inventory, "spark-1", False, mem.events,
                 connector=connector(mem.world))
    assert result.outcome is PinOutcome.ALREADY and result.parser is ParserCache.FAILED
    assert result.parser_note == ('`vllm serve --help=all` in the image failed on spark-1: docker: Error response '
                                  'from daemon: exec: "vllm": executable file not found in $PATH')
    assert not fv.help_cached(IMAGE_ID) and flag_table.table_for(IMAGE_ID) is flag_table.BUNDLED
    assert "its vLLM parser not cached" in audit_lines(mem)[-1]["detail"]


def test_validate_render_and_up_say_which_table_they_judged_against(mem, tmp_path, monkeypatch):
    runner = CliRunner()
    args = [str(mem.dep.recipe_path), "-i", str(mem.dep.inventory_path)]
    monkeypatch.setenv("HF_TOKEN", "x")
    shipped = flag_table.BUNDLED.source
    before = runner.invoke(app, ["validate", *args])
    assert before.exit_code == 0, before.output
    assert f"vLLM flags judged against {shipped}" in " ".join(before.stdout.split())
    as_json = runner.invoke(app, ["validate", *args, "--json"])
    assert cli_json.result(as_json.stdout)["flag_table"] == shipped

    pin(mem.dep.recipe_path, mem.dep.recipe, mem.inventory, "spark-1", False, mem.events, connector=connector(mem.world))
    image = flag_table.table_for(IMAGE_ID).source
    after = runner.invoke(app, ["validate", *args, "--json"])
    assert cli_json.result(after.stdout)["flag_table"] == image and image != shipped
    rendered = runner.invoke(app, ["render", *args])
    assert rendered.exit_code == 0 and f"vLLM flags judged against {image}" in " ".join(rendered.stderr.split())

    mem.up(skip_checks=[c for c in PREFLIGHT if c != "vllm-flags"])
    assert f"note  vLLM flags judged against {image}" in mem.said()


def test_a_flag_only_the_images_parser_has_passes_once_pinned(mem, tmp_path):
    """The recorded parser is 0.33.0's, so one option is taken out of the cached copy to stand for an
    image whose vLLM differs from the shipped table: the verdict follows the cache, not the shipped list."""
    from orchestrator.config.vllm_flags import flag_problem
    pin(mem.dep.recipe_path, mem.dep.recipe, mem.inventory, "spark-1", False, mem.events, connector=connector(mem.world))
    path = fv.cache_file("vllm-help", IMAGE_ID)
    data = json.loads(path.read_text())
    del data["options"]["--max-num-seqs"]
    path.write_text(json.dumps(data))
    image = flag_table.table_for(IMAGE_ID)
    assert flag_problem("max-num-seqs", 8, flag_table.BUNDLED) is None
    said = flag_problem("max-num-seqs", 8, image)
    assert said.startswith("--max-num-seqs is not a `vllm serve` option in the image sha256:2cefb2197111")
