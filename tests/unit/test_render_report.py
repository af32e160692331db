"""Acceptance 1 (issue #2): `render` reproduces the report's final command, token for token.

The report "DeepSeek 0731 on DGX Spark" (report [C] of docs/field-notes.md, section 8) ends with the head's `docker run`.
`spark-deploy render recipes/dspark-0731-b12x.yaml -i inventory.yaml` must print, for the head, a
command that holds every docker option, env var, mount, image, model and vLLM argument of that command,
and adds only what the tool adds on purpose (detach, name, labels, the per-node JIT cache, the secrets
env-file). Commands are compared as parsed token structures, never as substrings.
"""

from __future__ import annotations

import difflib
import re
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.config.inventory import Inventory, Node
from orchestrator.config.load import load_deployment, load_inventory, load_recipe
from orchestrator.config.recipe import Recipe
from orchestrator.render.plan import render_plan
from cli_zygote import run_cli as run_spark_deploy
from shell_words import shell_words
import cli_json

REPO = Path(__file__).resolve().parents[2]
RECIPE = "recipes/dspark-0731-b12x.yaml"
INVENTORY = "inventory.yaml"

# Section 8 of the report, verbatim (only the line continuations restored). `<HEAD_IP>` and
# `$HOME/.cache/huggingface` are the report's placeholders; the test fills them from the inventory.
REPORT_HEAD_COMMAND = r"""docker run --gpus all --privileged --network host --ipc host --shm-size 10g \
  --ulimit memlock=-1 --device /dev/infiniband:/dev/infiniband \
  -v "$HOME/.cache/huggingface:/cache/huggingface" \
  -e HF_HOME=/cache/huggingface -e VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 \
  -e NCCL_IB_DISABLE=0 -e NCCL_IB_HCA=rocep1s0f0 -e NCCL_IB_GID_INDEX=3 \
  -e NCCL_SOCKET_IFNAME=enp1s0f0np0 -e GLOO_SOCKET_IFNAME=enp1s0f0np0 \
  ghcr.io/anemll/dspark-vllm-gx10@sha256:a83948492cf13df455170fb42885f5ef4db54fefe0feff0f841ecbff464ac9d8 \
  apetersson/DeepSeek-V4-Flash-0731-Abliterated-FP8 \
  --served-model-name dspark --host 0.0.0.0 --port 8000 --trust-remote-code \
  --tensor-parallel-size 2 --kv-cache-dtype fp8 --block-size 256 \
  --max-model-len 1048576 --max-num-seqs 12 --max-num-batched-tokens 8192 \
  --gpu-memory-utilization 0.86 --enable-prefix-caching \
  --moe-backend flashinfer_b12x \
  --speculative-config '{"method":"dspark","num_speculative_tokens":5,"rejection_sample_method":"block"}' \
  --tokenizer-mode deepseek_v4 --distributed-executor-backend mp \
  --tool-call-parser deepseek_v4 --enable-auto-tool-choice --reasoning-parser deepseek_v4 \
  --nnodes 2 --node-rank 0 --master-addr <HEAD_IP> --master-port 29701
"""

# `docker run` options that take no value; every other option takes exactly one.
DOCKER_SWITCHES = {"--detach", "--privileged", "--rm", "--init", "--interactive", "--tty", "--read-only"}
DOCKER_ALIASES = {"-v": "--volume", "-e": "--env", "-d": "--detach", "-i": "--interactive", "-t": "--tty"}


@dataclass
class DockerRun:
    """A `docker run` argv as structure: what must match, independent of order and spelling."""

    options: Counter  # (option, value-or-None), -v/-e spelled --volume/--env
    image: str
    model: str
    vllm: Counter  # (flag, value-or-None)


def parse_docker_run(argv: list[str]) -> DockerRun:
    assert argv[:2] == ["docker", "run"], argv[:2]
    options: Counter = Counter()
    i = 2
    while argv[i].startswith("-"):
        token = argv[i]
        if token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            options[(DOCKER_ALIASES.get(name, name), value)] += 1
            i += 1
            continue
        name = DOCKER_ALIASES.get(token, token)
        if name in DOCKER_SWITCHES:
            options[(name, None)] += 1
            i += 1
        else:
            options[(name, argv[i + 1])] += 1
            i += 2
    image, model = argv[i], argv[i + 1]  # the image's entrypoint is `vllm serve`: the model comes first
    vllm: Counter = Counter()
    i += 2
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--"), f"a vLLM argument where a flag belongs: {flag!r}"
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            vllm[(flag, argv[i + 1])] += 1
            i += 2
        else:
            vllm[(flag, None)] += 1
            i += 1
    return DockerRun(options, image, model, vllm)


def report_argv(inventory: Inventory) -> list[str]:
    head = inventory.node(inventory.head)
    text = (REPORT_HEAD_COMMAND.replace("\\\n", " ")
            .replace("<HEAD_IP>", head.fabric_ip)
            .replace("$HOME/.cache/huggingface", head.hf_cache))
    return shlex.split(text)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return run_spark_deploy(args, cwd=REPO, timeout=60)


def printed_commands(stdout: str) -> dict[str, str]:
    """`render`'s text output: a `# <node>: rank ...` header, then that node's command up to a blank line
    (one argument per line, `\\`-continued), as the text a shell would be given."""
    lines = stdout.splitlines()
    commands = {}
    for n, line in enumerate(lines):
        if line.startswith("# "):
            block = lines[n + 1:]
            end = block.index("") if "" in block else len(block)
            commands[line[2:].split(":", 1)[0]] = "\n".join(block[:end])
    return commands


@pytest.fixture(scope="module")
def recipe() -> Recipe:
    return load_recipe(REPO / RECIPE)[0]


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return load_inventory(REPO / INVENTORY)[0]


@pytest.fixture(scope="module")
def cli_render() -> subprocess.CompletedProcess:
    return run_cli("render", RECIPE, "-i", INVENTORY)


def test_the_report_command_parses_into_the_expected_structure(inventory):
    """Guards the parser itself: a parser that dropped tokens would make the comparison vacuous."""
    report = parse_docker_run(report_argv(inventory))
    assert sum(report.options.values()) == 15  # 7 options, 1 volume, 7 env
    assert report.options[("--volume", "/home/spark/.cache/huggingface:/cache/huggingface")] == 1
    assert report.options[("--privileged", None)] == 1
    assert report.image.startswith("ghcr.io/anemll/dspark-vllm-gx10@sha256:a839484")
    assert report.model == "apetersson/DeepSeek-V4-Flash-0731-Abliterated-FP8"
    assert sum(report.vllm.values()) == 23
    assert report.vllm[("--master-addr", "192.168.100.1")] == 1
    assert report.vllm[("--enable-auto-tool-choice", None)] == 1


def test_cli_render_succeeds(cli_render):
    assert cli_render.returncode == 0, cli_render.stderr
    assert list(printed_commands(cli_render.stdout)) == ["spark-1", "spark-2"]  # head first
    assert "Traceback" not in cli_render.stderr


def test_head_command_holds_the_whole_report_command_and_adds_only_the_tool_parts(cli_render, recipe, inventory):
    head = inventory.node(inventory.head)
    ours = parse_docker_run(shell_words(printed_commands(cli_render.stdout)[head.name]))
    report = parse_docker_run(report_argv(inventory))

    # Every docker option, env var, mount and vLLM argument of the report is in ours (as a multiset).
    assert report.options - ours.options == Counter(), "report docker options missing from ours"
    assert report.vllm - ours.vllm == Counter(), "report vLLM arguments missing from ours"
    assert ours.model == report.model == recipe.model.repo
    # The image: ours is the pinned ID, or while unpinned the reference, which is the report's.
    assert ours.image == (recipe.image.id or recipe.image.ref)
    if recipe.image.id is None:
        assert ours.image == report.image

    # What ours adds, exactly.
    plan_hash = re.search(r"spark-deploy\.plan-hash=([0-9a-f]{16})", " ".join(t for pair in ours.options for t in pair if t)).group(1)
    secrets_file = f"{head.state_dir}/secrets/{recipe.name}.env"
    assert ours.options - report.options == Counter({
        ("--detach", None): 1,
        ("--name", f"sd-{recipe.name}-r0-{plan_hash[:8]}"): 1,  # the plan is readable from the name
        ("--label", "spark-deploy.managed=true"): 1,
        ("--label", f"spark-deploy.cluster={inventory.cluster}"): 1,
        ("--label", f"spark-deploy.recipe={recipe.name}"): 1,
        ("--label", f"spark-deploy.recipe-hash={recipe.digest()}"): 1,
        ("--label", "spark-deploy.rank=0"): 1,
        ("--label", f"spark-deploy.world={len(inventory.nodes)}"): 1,
        ("--label", f"spark-deploy.node={head.name}"): 1,
        ("--label", f"spark-deploy.serve-port={recipe.serve.port}"): 1,
        ("--label", f"spark-deploy.master-port={recipe.vllm.master_port}"): 1,
        ("--label", f"spark-deploy.plan-hash={plan_hash}"): 1,  # identity of this exact launch
        ("--label", "spark-deploy.run=preview"): 1,  # `up` puts its run ID here
        ("--label", f"spark-deploy.served-model={recipe.serve.served_model_name}"): 1,
        ("--volume", f"{head.jit_cache}:/jitcache"): 1,  # the per-node local JIT cache (field note 2)
        ("--env", "VLLM_CACHE_ROOT=/jitcache"): 1,
        ("--env-file", secrets_file): 1,  # HF_TOKEN, resolved on the node; never in argv
        ("--env", "NCCL_DEBUG=INFO"): 1,  # profile roce: NCCL names the transport it took (up checks NET/IB)
        ("--env", "NCCL_DEBUG_SUBSYS=INIT,NET"): 1,
    })
    assert ours.vllm - report.vllm == Counter(), "ours adds vLLM arguments the report does not have"


def plan_of(argv: list[str]) -> str:
    return next(t.split("=", 1)[1] for t in argv if t.startswith("spark-deploy.plan-hash="))


def test_peer_differs_from_head_only_by_rank_parts(cli_render, recipe):
    commands = printed_commands(cli_render.stdout)
    head, peer = shell_words(commands["spark-1"]), shell_words(commands["spark-2"])
    changes = [(tag, head[i1 - 1], head[i1:i2], peer[j1:j2])
               for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, head, peer, autojunk=False).get_opcodes()
               if tag != "equal"]
    assert changes == [
        ("replace", "--name", [f"sd-{recipe.name}-r0-{plan_of(head)[:8]}"], [f"sd-{recipe.name}-r1-{plan_of(head)[:8]}"]),
        ("replace", "--label", ["spark-deploy.rank=0"], ["spark-deploy.rank=1"]),
        ("replace", "--label", ["spark-deploy.node=spark-1"], ["spark-deploy.node=spark-2"]),
        ("replace", "--node-rank", ["0"], ["1"]),
        ("insert", "29701", [], ["--headless"]),
    ]
    assert peer[-1] == "--headless" and head[-2:] == ["--master-port", "29701"]


def _write(path: Path, data) -> Path:
    yaml = YAML(typ="rt")
    with path.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    return path


def test_peer_per_node_values_are_the_only_other_differences(tmp_path, recipe):
    """With per-node caches, state dir and env on the peer, those show up too, and nothing else."""
    inv = YAML(typ="rt").load((REPO / INVENTORY).read_text())
    peer = inv["nodes"][1]
    peer["hf_cache"], peer["jit_cache"], peer["state_dir"] = "/data/hf", "/data/vllm-jit", "/srv/spark-deploy"
    peer["env"]["NCCL_DEBUG"] = "TRACE"  # profile roce renders INFO everywhere: the peer's own value wins
    plan = render_plan(load_deployment(REPO / RECIPE, _write(tmp_path / "inventory.yaml", inv)))
    head, peer_argv = list(plan[0].argv), list(plan[1].argv)
    changes = [(head[i1:i2], peer_argv[j1:j2])
               for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, head, peer_argv, autojunk=False).get_opcodes()
               if tag != "equal"]
    assert changes == [
        ([f"sd-{recipe.name}-r0-{plan_of(head)[:8]}"], [f"sd-{recipe.name}-r1-{plan_of(head)[:8]}"]),
        (["spark-deploy.rank=0"], ["spark-deploy.rank=1"]),
        (["spark-deploy.node=spark-1"], ["spark-deploy.node=spark-2"]),
        (["/home/spark/.cache/huggingface:/cache/huggingface"], ["/data/hf:/cache/huggingface"]),
        (["/var/cache/vllm-jit:/jitcache"], ["/data/vllm-jit:/jitcache"]),
        (["NCCL_DEBUG=INFO"], ["NCCL_DEBUG=TRACE"]),
        ([f"/var/lib/spark-deploy/secrets/{recipe.name}.env"], [f"/srv/spark-deploy/secrets/{recipe.name}.env"]),
        (["0"], ["1"]),
        ([], ["--headless"]),
    ]


def test_json_argv_is_the_printed_command(cli_render):
    result = run_cli("render", RECIPE, "-i", INVENTORY, "--json")
    assert result.returncode == 0, result.stderr
    plan = cli_json.result(result.stdout)
    text = printed_commands(cli_render.stdout)
    assert [entry["node"] for entry in plan] == ["spark-1", "spark-2"]
    for rank, entry in enumerate(plan):
        assert entry["rank"] == rank
        assert entry["argv"] == shlex.split(entry["printed"])
        assert entry["argv"] == shell_words(text[entry["node"]])
        assert entry["container"] == entry["argv"][entry["argv"].index("--name") + 1]
        assert entry["secrets_env_file"] == entry["argv"][entry["argv"].index("--env-file") + 1]


def test_node_option_prints_only_that_node(cli_render):
    result = run_cli("render", RECIPE, "-i", INVENTORY, "--node", "spark-2")
    assert result.returncode == 0, result.stderr
    assert printed_commands(result.stdout) == {"spark-2": printed_commands(cli_render.stdout)["spark-2"]}
    missing = run_cli("render", RECIPE, "-i", INVENTORY, "--node", "spark-9")
    assert missing.returncode == 2 and "spark-9" in missing.stderr and missing.stdout == ""


def test_a_pinned_image_runs_by_id_and_the_reference_disappears(tmp_path):
    data = YAML(typ="rt").load((REPO / RECIPE).read_text())
    image_id = "sha256:" + "0123456789abcdef" * 4
    data["image"]["id"] = image_id
    plan = render_plan(load_deployment(_write(tmp_path / "pinned.yaml", data), REPO / INVENTORY))
    for launch in plan:
        parsed = parse_docker_run(list(launch.argv))
        assert parsed.image == image_id
        assert not any(data["image"]["ref"] in token for token in launch.argv)


def test_the_inventory_head_is_what_fills_the_report_placeholders(inventory):
    """The comparison is only as good as its placeholders: they must come from the inventory."""
    head: Node = inventory.node(inventory.head)
    argv = report_argv(inventory)
    assert argv[argv.index("--master-addr") + 1] == head.fabric_ip
    assert f"{head.hf_cache}:/cache/huggingface" in argv
    assert not any("$HOME" in token or "<HEAD_IP>" in token for token in argv)
