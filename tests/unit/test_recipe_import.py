"""`recipe import`'s mappings, one by one: the format read from the content, the serve command read as
vLLM's parser reads it, each option's destination (typed field, inventory, secrets, vllm.extra after the
table's verdict), each peer's own keys, and the recipe check that keeps what is written loadable.
The real published recipes are in tests/data/import/ (README.md there names each one's source)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.config.load import recipe_text_issues
from orchestrator.config.peers.importer import detect, import_recipe, recipe_name
from orchestrator.config.peers.parts import PeerFormat, Placed, Source
from orchestrator.config.peers.serve_args import place
from orchestrator.config.peers.serve_command import Arg, NotServe, fill, parse
from orchestrator.config.source import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "import"
HERE = Source("command --x", 3)


def imported(tmp_path: Path, text: str, name: str = "peer.yaml", told: PeerFormat | None = None):
    path = tmp_path / name
    path.write_text(text)
    return import_recipe(path, told)


def written(result) -> dict:
    return YAML(typ="safe").load(result.text)


def left_reasons(result) -> dict[str, str]:
    return {item.source.key: item.reason for item in result.left}


# --- which format -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("data, fmt", [
    ({"recipe_version": "1", "model": "a/b", "container": "c"}, PeerFormat.EUGR),
    ({"recipe_version": "2", "name": "x", "command": "vllm serve a/b"}, PeerFormat.SPARKRUN),
    ({"runtime": "vllm", "container": "c", "command": "vllm serve a/b"}, PeerFormat.SPARKRUN),
    ({"container": "c", "command": "vllm serve {model}", "model": "a/b"}, PeerFormat.SPARKRUN),
    ({"name": "X", "container": "c", "command": "vllm serve a/b"}, PeerFormat.EUGR),
    ({"model": "a/b", "container": "c", "defaults": {"port": 8000}}, PeerFormat.SPARKRUN),
])
def test_the_format_is_read_from_the_content(data, fmt):
    assert detect(data)[0] is fmt


def test_neither_format_is_bad_input_naming_the_file_and_the_way_out(tmp_path):
    with pytest.raises(ConfigError) as exc:
        imported(tmp_path, "foo: 1\nbar: 2\n")
    assert "neither a sparkrun recipe nor an eugr" in str(exc.value) and "--from sparkrun|eugr" in str(exc.value)
    assert str(tmp_path / "peer.yaml") + ":1" in str(exc.value)


def test_a_spark_deploy_recipe_is_not_imported(tmp_path):
    with pytest.raises(ConfigError, match="already a spark-deploy recipe"):
        imported(tmp_path, "name: x\nimage: {ref: a}\nmodel: {repo: a/b}\n")


def test_from_overrides_the_detection(tmp_path):
    text = "name: X\ncontainer: img\ncommand: vllm serve a/b -tp 2\n"
    assert imported(tmp_path, text).format is PeerFormat.EUGR
    assert imported(tmp_path, text, told=PeerFormat.SPARKRUN).format is PeerFormat.SPARKRUN


# --- the command ------------------------------------------------------------------------------------------

def test_placeholders_are_filled_repeatedly_and_unknown_ones_stay():
    filled = fill("vllm serve {model} --port {port} --x {nope}", {"model": "{org}/m", "org": "o", "port": 1})
    assert filled.text == "vllm serve o/m --port 1 --x {nope}"
    assert filled.used == {"model", "org", "port"} and filled.unresolved == {"nope"}


def test_the_command_is_split_as_vllms_parser_reads_it():
    command = parse("FOO=1 vllm serve org/m \\\n  -tp 2 --no-enable-prefix-caching --max-model-len=8k \\ \n"
                    "  --served-model-name a b --trust-remote-code -cc.cudagraph_mode=PIECEWISE --seed -1")
    assert command.model == "org/m" and command.env == [("FOO", "1")]
    assert [(a.name, a.value) for a in command.args] == [
        ("tensor-parallel-size", "2"), ("enable-prefix-caching", False), ("max-model-len", "8k"),
        ("served-model-name", ["a", "b"]), ("trust-remote-code", True),
        ("compilation-config.cudagraph_mode", "PIECEWISE"), ("seed", "-1")]


def test_other_commands_chained_before_serve_are_kept_apart():
    command = parse("pip install foo && vllm serve org/m --port 9000")
    assert command.other == ["pip install foo"] and command.model == "org/m"


def test_what_is_kept_apart_never_repeats_a_secret():
    command = parse("export HF_TOKEN=abc123 && curl -H 'Bearer hf_abcdefghijkl' x; vllm serve org/m")
    assert command.other == ["export HF_TOKEN=<redacted>", "curl -H 'Bearer <redacted>' x"]


def test_another_engine_is_refused():
    with pytest.raises(NotServe, match="'sglang'.*vLLM only"):
        parse("sglang serve --model-path org/m")


def test_an_engine_other_than_vllm_is_bad_input_at_the_command_line(tmp_path):
    with pytest.raises(ConfigError) as exc:
        imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: |\n  llama-server -m x\n')
    assert ":4: command:" in str(exc.value) and "vLLM only" in str(exc.value)


def test_a_runtime_other_than_vllm_is_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="runtime 'sglang'"):
        imported(tmp_path, "model: a/b\nruntime: sglang\ncontainer: c\n")


# --- each option's destination ----------------------------------------------------------------------------

@pytest.mark.parametrize("arg, target, value", [
    (Arg("tensor-parallel-size", "2", "-tp", True), ("vllm", "tensor_parallel_size"), 2),
    (Arg("gpu-memory-utilization", "0.8", "--gpu-memory-utilization", True), ("vllm", "gpu_memory_utilization"), 0.8),
    (Arg("max-model-len", "128k", "--max-model-len", True), ("vllm", "max_model_len"), "128k"),
    (Arg("enable-prefix-caching", False, "--no-enable-prefix-caching", True), ("vllm", "enable_prefix_caching"), False),
    (Arg("speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}', "-sc", True),
     ("vllm", "speculative_config"), {"method": "mtp", "num_speculative_tokens": 2}),
    (Arg("port", "9000", "--port", True), ("serve", "port"), 9000),
    (Arg("served-model-name", ["a", "b"], "--served-model-name", True), ("serve", "served_model_name"), "a"),
    (Arg("revision", "abc", "--revision", True), ("model", "revision"), "abc"),
    (Arg("max-num-seqs", "12", "--max-num-seqs", True), ("vllm", "extra", "max-num-seqs"), 12),
    (Arg("compilation-config", '{"mode": 3}', "-cc", True), ("vllm", "extra", "compilation-config"), {"mode": 3}),
])
def test_options_go_to_their_typed_field_or_to_extra(arg, target, value):
    placed = place(arg, HERE)
    assert isinstance(placed, Placed) and placed.target == target and placed.value == value


def test_ray_becomes_mp_and_says_why():
    placed = place(Arg("distributed-executor-backend", "ray", "--distributed-executor-backend", True), HERE)
    assert placed.value == "mp" and "vLLM refuses ray" in placed.comment


@pytest.mark.parametrize("arg, words", [
    (Arg("nnodes", "2", "--nnodes", True), "set per node from the inventory"),
    (Arg("headless", True, "--headless", True), "set per node from the inventory"),
    (Arg("api-key", "sk-secretsecretsecret", "--api-key", True), "export VLLM_API_KEY"),
    (Arg("max-num-seqs", "{seqs}", "--max-num-seqs", True), "{seqs} has no value in `defaults`"),
    (Arg("max-num-sequences", "4", "--max-num-sequences", False), "did you mean --max-num-seqs"),
    (Arg("performance-mode", "fast", "--performance-mode", True), "is not a choice"),
    (Arg("enforce-eager", "sometimes", "--enforce-eager", True), "not true or false"),
    (Arg("middleware", ["a", "b"], "--middleware", True), "given 2 values"),
])
def test_what_is_not_written_says_why(arg, words):
    left = place(arg, HERE)
    assert not isinstance(left, Placed) and words in left.reason
    assert "sk-secret" not in left.reason


def test_a_flag_vllm_refuses_is_reported_not_written(tmp_path):
    result = imported(tmp_path, "name: X\ncontainer: img\ncommand: |\n  vllm serve a/b -tp 2 \\\n"
                                "    --performance-mode fast --max-num-seq 4\n")
    extra = written(result)["vllm"].get("extra", {})
    assert "performance-mode" not in extra and "max-num-seq" not in extra
    reasons = left_reasons(result)
    assert "is not a choice" in reasons["command --performance-mode"]
    assert "did you mean --max-num-seqs" in reasons["command --max-num-seq"]
    assert {item.source.line for item in result.left} == {5}


# --- sparkrun's own keys ----------------------------------------------------------------------------------

def test_sparkrun_without_a_command_turns_defaults_into_flags_through_its_flag_map(tmp_path):
    # RECIPES.md's "Minimal Recipe", with keys its flag map has and one it has not
    result = imported(tmp_path, "model: Qwen/Qwen3-1.7B\nruntime: vllm\ncontainer: scitrera/dgx-spark-vllm:latest\n"
                                "defaults:\n  port: 8000\n  tensor_parallel: 1\n  max_num_seqs: 8\n"
                                "  enforce_eager: false\n  trust_remote_code: true\n  tool_call_parser: hermes\n")
    recipe = written(result)
    assert recipe["serve"]["port"] == 8000 and recipe["vllm"]["tensor_parallel_size"] == 1
    assert recipe["vllm"]["extra"] == {"max-num-seqs": 8, "trust-remote-code": True}
    reasons = left_reasons(result)
    assert "only the keys of its flag map" in reasons["defaults.tool_call_parser"]
    assert "passes no flag" in reasons["defaults.enforce_eager"]


def test_sparkrun_appends_served_model_name_to_a_template_without_it(tmp_path):
    result = imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ndefaults:\n  served_model_name: m\n'
                                "  unused: 1\ncommand: vllm serve {model}\n")
    assert written(result)["serve"]["served_model_name"] == "m"
    assert left_reasons(result)["defaults.unused"] == "not used by the command template"


def test_sparkrun_env_from_the_shell_becomes_a_secret_and_a_literal_secret_is_not_written(tmp_path):
    result = imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: vllm serve {model}\nenv:\n'
                                '  HF_TOKEN: ${HF_TOKEN}\n  OTHER: $SOMETHING\n  MY_API_KEY: abc123\n  PLAIN: "1"\n')
    recipe = written(result)
    assert recipe["secrets"] == ["HF_TOKEN"] and recipe["env"] == {"PLAIN": "1"}
    reasons = left_reasons(result)
    assert "control machine's environment" in reasons["env.OTHER"]
    assert "looks like a secret" in reasons["env.MY_API_KEY"] and "abc123" not in reasons["env.MY_API_KEY"]


def test_sparkrun_executor_config(tmp_path):
    result = imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: vllm serve {model}\n'
                                "executor_config:\n  shm_size: 20gb\n  privileged: false\n  restart_policy: on-failure:3\n"
                                "  auto_remove: false\n")
    docker = written(result)["docker"]
    assert docker == {"shm_size": "20gb", "privileged": False, "restart": {"policy": "on-failure", "max_retries": 3}}
    assert "rollback" in left_reasons(result)["executor_config.auto_remove"]
    endless = imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: vllm serve {model}\n'
                                 "executor_config:\n  restart_policy: unless-stopped\n")
    assert "bounded" in left_reasons(endless)["executor_config.restart_policy"]


def test_sparkrun_keys_with_no_counterpart_are_each_listed(tmp_path):
    result = imported(tmp_path, 'recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: vllm serve {model}\n'
                                "metadata:\n  description: d\n  model_params: 8B\nbenchmark:\n  framework: x\n"
                                "pre_exec:\n  - echo hi\nmysterious: 1\n")
    assert written(result)["description"] == "d"
    reasons = left_reasons(result)
    assert set(reasons) == {"metadata.model_params", "benchmark", "pre_exec", "mysterious"}
    assert "runs only `vllm serve`" in reasons["pre_exec"] and "sweeps it into runtime_config" in reasons["mysterious"]


# --- eugr's own keys --------------------------------------------------------------------------------------

def test_eugr_the_command_s_model_wins_over_the_download(tmp_path):
    result = imported(tmp_path, 'recipe_version: "1"\nname: X\nmodel: org/download\ncontainer: c\n'
                                "command: vllm serve org/served -tp 1\n")
    assert written(result)["model"]["repo"] == "org/served"
    assert "keeps model.repo from command" in left_reasons(result)["model"]


def test_eugr_mods_and_build_args_are_listed_one_by_one(tmp_path):
    result = imported(tmp_path, 'recipe_version: "1"\nname: X\ncontainer: c\nbuild_args:\n  - --pre-tf\n'
                                "mods:\n  - mods/a\n  - mods/b\ncommand: vllm serve o/m\n")
    reasons = left_reasons(result)
    assert reasons["mods.0"].startswith("mods/a: ") and reasons["mods.1"].startswith("mods/b: ")
    assert "mounts.overlays" in reasons["mods.0"] and "build-and-copy.sh" in reasons["build_args"]


# --- what is written --------------------------------------------------------------------------------------

def test_a_value_the_recipe_refuses_is_left_with_the_recipes_own_message(tmp_path):
    result = imported(tmp_path, "name: X\ncontainer: c\ncommand: vllm serve o/m --gpu-memory-utilization 0.97\n")
    assert "gpu_memory_utilization" not in written(result).get("vllm", {})
    assert "outside (0, 0.95]" in left_reasons(result)["command --gpu-memory-utilization"]
    assert recipe_text_issues(result.text, "x") == []


def test_a_typed_value_outside_vllms_table_is_left_with_the_tables_verdict(tmp_path):
    result = imported(tmp_path, "name: X\ncontainer: c\ncommand: vllm serve o/m --kv-cache-dtype fp9 -tp 2\n")
    assert "kv_cache_dtype" not in written(result)["vllm"] and written(result)["vllm"]["tensor_parallel_size"] == 2
    reason = left_reasons(result)["command --kv-cache-dtype"]
    assert "'fp9' is not a choice" in reason and "vLLM 0.33.0's option table" in reason


def test_without_a_container_there_is_no_image_to_run(tmp_path):
    with pytest.raises(ConfigError, match="no `container:`"):
        imported(tmp_path, 'recipe_version: "1"\nname: X\ncommand: vllm serve o/m\n')


@pytest.mark.parametrize("text, name", [("MiniMax-M2-AWQ", "minimax-m2-awq"), ("Qwen 3 / Coder!", "qwen-3-coder"),
                                        ("", "imported")])
def test_recipe_names(text, name):
    assert recipe_name(text) == name


@pytest.mark.parametrize("path", sorted(DATA.glob("*.yaml")), ids=lambda p: p.name)
def test_every_real_recipe_imports_commented_unpinned_and_loadable(path):
    result = import_recipe(path, None, "out.yaml")
    assert recipe_text_issues(result.text, "out.yaml") == []
    assert result.format is (PeerFormat.EUGR if path.name.startswith("eugr-") else PeerFormat.SPARKRUN)
    tree = YAML().load(result.text)
    for p in result.placed:  # every value written carries its origin as its line's comment
        parent = tree
        for part in p.target[:-1]:
            parent = parent[part]
        key = parent.index(p.value) if p.target[:-1] == ("secrets",) else p.target[-1]
        assert p.comment in str(parent.ca.items[key]), (p.target, parent.ca.items.get(key))
    assert all(p.comment.startswith("from ") for p in result.placed if p.source.key)
    lines = result.text.splitlines()
    assert "id: null # unpinned: run `spark-deploy pin out.yaml`" in result.text
    assert result.pin == "spark-deploy pin out.yaml"
    header = [line for line in lines if line.startswith("#   ")]
    assert len(header) == len(result.left)  # every key not written is listed in the file too
