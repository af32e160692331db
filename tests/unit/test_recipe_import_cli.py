"""Issue 39, acceptance 5: `recipe import` of a real published sparkrun recipe and of a real eugr recipe
(tests/data/import/README.md names each one's source), run as the CLI; `validate` passes on the file
written, against a two-node inventory, and the keys not mapped are listed. docs/recipe-import.md's
commands are run here too, and the recipe it shows is the one the command writes."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from cli_zygote import run_cli
import cli_json

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "import"
DOC = REPO / "docs" / "recipe-import.md"
INVENTORY = REPO / "tests" / "unit" / "corpus" / "good-inventory.yaml"


@pytest.fixture
def place(tmp_path) -> Path:
    """A working directory with a two-node inventory (nodes spark-1, spark-2) whose SSH key and known_hosts
    exist, as validate's local checks need, and an empty recipes/."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = tmp_path / "id_ed25519"
    key.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    key.chmod(0o600)
    (tmp_path / "known_hosts").write_text("")
    text = INVENTORY.read_text().replace("port: 22", f"port: 22\n  key: {key}\n  known_hosts: {tmp_path / 'known_hosts'}")
    (tmp_path / "inventory.yaml").write_text(text.replace("node-a", "spark-1").replace("node-b", "spark-2"))
    (tmp_path / "recipes").mkdir()
    return tmp_path


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize("source, unmapped", [
    ("sparkrun-minimax-m2.7-awq4-vllm.yaml", {"min_nodes"}),
    ("sparkrun-deepseek4-flash-fp8-mtp-vllm.yaml", {"min_nodes", "defaults.data_parallel"}),
    ("eugr-minimax-m2-awq.yaml", {"cluster_only"}),
])
def test_a_real_peer_recipe_imports_and_validates_with_its_unmapped_keys_listed(place, source, unmapped):
    out = place / "recipes" / "imported.yaml"
    done = run_cli(["recipe", "import", DATA / source, "-o", out], cwd=place)
    assert done.returncode == 0, done.stderr
    listed = {re.match(r"warning: \S+:\d* (\S+): not mapped: ", w).group(1) for w in warnings_of(done.stderr)}
    assert listed == unmapped
    assert done.stderr.rstrip().endswith(f"is unpinned: run `spark-deploy pin {out}`")
    checked = run_cli(["validate", out, "-i", place / "inventory.yaml"], cwd=place)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"ok {out}: ") and "spark-1 (rank 0), spark-2 (rank 1)" in checked.stdout
    as_json = run_cli(["recipe", "import", DATA / source, "--json"], cwd=place)
    result = cli_json.result(as_json.stdout)
    assert result["ok"] is True and {u["from"] for u in result["unmapped"]} == unmapped
    assert result["recipe"] == out.read_text().replace(str(out), "RECIPE.yaml")
    assert result["pin"] == "spark-deploy pin RECIPE.yaml"


def test_without_o_the_recipe_is_printed_and_the_warnings_go_to_stderr(place):
    done = run_cli(["recipe", "import", DATA / "eugr-nemotron-3-nano-nvfp4.yaml"], cwd=place)
    assert done.returncode == 0 and done.stdout.startswith("# Imported by `spark-deploy recipe import`")
    assert "name: nemotron-3-nano-nvfp4 # from name (line 6)" in done.stdout
    assert len(warnings_of(done.stderr)) == 3 and "warning" not in done.stdout


def test_an_existing_output_is_never_replaced(place):
    out = place / "recipes" / "taken.yaml"
    out.write_text("mine\n")
    done = run_cli(["recipe", "import", DATA / "eugr-minimax-m2-awq.yaml", "-o", out], cwd=place)
    assert done.returncode == 2 and f"{out} exists: nothing was written" in done.stderr
    assert out.read_text() == "mine\n"


def test_bad_input_names_file_and_line_and_writes_nothing(place):
    peer = place / "sglang.yaml"
    peer.write_text('recipe_version: "2"\nmodel: a/b\ncontainer: c\ncommand: sglang serve --model-path a/b\n')
    out = place / "recipes" / "x.yaml"
    done = run_cli(["recipe", "import", peer, "-o", out], cwd=place)
    assert done.returncode == 2, done.stderr
    assert f"{peer}:4: command: the command runs 'sglang'" in done.stderr and not out.exists()


# --- docs/recipe-import.md, run -------------------------------------------------------------------------

def doc_blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def doc_commands() -> list[tuple[list[str], list[str]]]:
    """Each `$ spark-deploy ...` line of the console blocks, with the lines the doc shows it printing."""
    runs: list[tuple[list[str], list[str]]] = []
    for block in doc_blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                runs.append((shlex.split(line[2:]), []))
            elif line.strip():
                runs[-1][1].append(line)
    return runs


def test_the_doc_s_commands_run_and_print_what_it_shows(place):
    shutil.copy(DATA / "eugr-minimax-m2-awq.yaml", place / "minimax-m2-awq.yaml")
    shutil.copy(DATA / "sparkrun-minimax-m2.7-awq4-vllm.yaml", place / "minimax-m2.7-awq4-vllm.yaml")
    runs = doc_commands()
    assert len(runs) == 4
    for argv, shown in runs:
        assert argv[0] == "spark-deploy"
        done = run_cli(argv[1:], cwd=place)
        assert done.returncode == 0, (argv, done.stderr)
        printed = (done.stdout + done.stderr).splitlines()
        assert [line for line in shown if line not in printed] == [], (argv, printed)
    assert doc_blocks("yaml") == [(place / "recipes" / "minimax-m2-awq.yaml").read_text()]
