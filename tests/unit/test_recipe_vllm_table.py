"""Issue 36: the typed recipe fields take their values from vLLM's table — the pinned image's own parser
when preflight cached it, else the shipped one — so DeepSeek's MLA KV dtypes validate and render."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import IMAGE_ID, deployment
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.flag_table import BUNDLED, help_cache_file, table_for
from orchestrator.config.source import ConfigError
from orchestrator.facts import vllm as vllm_facts
import cli_json

CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture(autouse=True)
def controller(tmp_path, monkeypatch):
    """A HOME with a known_hosts (validate reads it), and an empty cache: no image parser cached."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


def _recipe(tmp_path: Path, kv: str) -> Path:
    text = (Path(__file__).resolve().parents[2] / "orchestrator/sim/recipes/sim-tiny.yaml").read_text()
    path = tmp_path / f"{kv}.yaml"
    path.write_text(text.replace("kv_cache_dtype: fp8\n", f"kv_cache_dtype: {kv}\n", 1))
    return path


@pytest.mark.parametrize("kv", ["fp8_ds_mla", "nvfp4_ds_mla"])
def test_the_mla_kv_dtypes_validate_and_render(tmp_path, kv):
    recipe, inventory = _recipe(tmp_path, kv), CORPUS / "good-inventory.yaml"
    validated = CliRunner().invoke(app, ["validate", str(recipe), "-i", str(inventory)])
    assert validated.exit_code == 0, validated.stderr
    rendered = CliRunner().invoke(app, ["render", str(recipe), "-i", str(inventory), "--json"])
    assert rendered.exit_code == 0, rendered.stderr
    for rank in cli_json.result(rendered.stdout):
        argv = rank["argv"]
        assert argv[argv.index("--kv-cache-dtype") + 1] == kv


def test_a_value_outside_the_table_is_refused_at_its_line_with_the_value_meant(tmp_path):
    result = CliRunner().invoke(app, ["validate", str(_recipe(tmp_path, "fp8_ds_mlx")), "-i",
                                      str(CORPUS / "good-inventory.yaml")])
    assert result.exit_code == 2
    assert "vllm.kv_cache_dtype: --kv-cache-dtype: 'fp8_ds_mlx' is not a choice" in result.stderr
    assert "did you mean `kv_cache_dtype: fp8_ds_mla`?" in result.stderr
    assert "vLLM 0.33.0's option table shipped with spark-deploy" in result.stderr


def _cache_image_parser(listed_kv: list[str]) -> None:
    vllm_facts.write_cache("vllm-help", IMAGE_ID, {
        "via": "--help=all", "options": {"--kv-cache-dtype": None, "--moe-backend": ["b12x", "flashinfer_b12x"],
                                         "--distributed-executor-backend": None, "--max-num-seqs": None,
                                         "--block-size": None},
        "listed": {"--kv-cache-dtype": listed_kv}})


def test_the_cached_image_parser_is_the_authority(tmp_path):
    """An image whose vLLM lists another KV dtype: what it lists passes, what only the shipped table lists
    is refused, naming the image's parser as the table checked."""
    _cache_image_parser(["auto", "fp8", "fp8_future_layout"])
    assert table_for(IMAGE_ID).image == IMAGE_ID
    deployment(tmp_path, lambda r: r["vllm"].update(kv_cache_dtype="fp8_future_layout"))
    with pytest.raises(ConfigError) as refused:
        deployment(tmp_path, lambda r: r["vllm"].update(kv_cache_dtype="fp8_ds_mla"))
    assert f"the image {IMAGE_ID[:19]}'s own parser" in str(refused.value)
    with pytest.raises(ConfigError, match="'cutlass' is not a choice: one of b12x, flashinfer_b12x"):
        deployment(tmp_path, lambda r: r["vllm"].update(moe_backend="cutlass"))


def test_a_cache_without_the_listed_values_or_of_a_tag_is_not_used():
    vllm_facts.write_cache("vllm-help", IMAGE_ID, {"via": "--help=all", "options": {"--kv-cache-dtype": None}})
    assert table_for(IMAGE_ID) is BUNDLED  # an older spark-deploy's cache: preflight reads the image again
    assert table_for("vllm-sim:latest") is BUNDLED and table_for(None) is BUNDLED


def test_the_table_reads_the_file_preflight_writes():
    assert help_cache_file(IMAGE_ID) == vllm_facts.cache_file("vllm-help", IMAGE_ID)


def test_ray_across_nodes_is_refused_as_vllm_refuses_it(tmp_path):
    with pytest.raises(ConfigError, match="nnodes > 1 can only be set when distributed executor backend is mp"):
        deployment(tmp_path, lambda r: r["vllm"].update(distributed_executor_backend="ray"))
    one = deployment(tmp_path, lambda r: r["vllm"].update(distributed_executor_backend="ray", tensor_parallel_size=1),
                     lambda i: i.update(nodes=i["nodes"][:1]))
    assert one.recipe.vllm.distributed_executor_backend == "ray"


# --- one verdict on a flag: validate, render and up --------------------------------------------------

def _with_extra(tmp_path: Path, flag: str) -> Path:
    path = _recipe(tmp_path, "fp8")
    path.write_text(path.read_text().replace("    max-num-seqs: 12\n", f"    {flag}: 12\n", 1))
    return path


@pytest.mark.parametrize("flag, says", [
    ("max-num-seq", "is not a `vllm serve` option in vLLM 0.33.0's option table shipped with spark-deploy (the "
                    "image's own parser is not cached yet); fix: did you mean --max-num-seqs?"),
    ("frobnicate-widgets", "fix: remove it; if the pinned image's vLLM has it: `spark-deploy pin RECIPE` (or "
                           "`spark-deploy preflight RECIPE --only vllm-flags`) reads the pinned image's own parser"),
])
def test_validate_and_render_give_one_verdict_at_the_flags_line(tmp_path, flag, says):
    recipe, inventory = _with_extra(tmp_path, flag), CORPUS / "good-inventory.yaml"
    line = recipe.read_text().splitlines().index(f"    {flag}: 12") + 1
    errors = []
    for command in (["validate"], ["render"], ["render", "--json"]):
        result = CliRunner().invoke(app, [*command, str(recipe), "-i", str(inventory)])
        assert result.exit_code == 2, (command, result.stdout, result.stderr)
        assert result.stdout == "" or command[-1] == "--json"
        errors.append(result.stderr if command[-1] != "--json" else cli_json.envelope(result.stdout)["error"])
    where = f"{recipe}:{line}: vllm.extra.{flag}: --{flag} "
    assert errors[0] == errors[1] and errors[0].startswith(f"error: {where}") and says in errors[0], errors[0]
    error = errors[2]  # the same issue, its parts in the error object's fields
    assert (error["file"], error["line"], error["key"]) == (str(recipe), line, f"vllm.extra.{flag}")
    assert errors[0].removeprefix("error: ").strip() == (f"{where.removesuffix(f'--{flag} ')}{error['message']}"
                                                         + (f"; fix: {error['fix']}" if error["fix"] else ""))
