"""Issue 8, inputs 1: files that are huge, alias bombs, nested too deeply or endless (a device, a FIFO)
are refused by the real `spark-deploy validate` with exit 2, naming the file (and line), promptly and
without a traceback. Each case runs the installed command in a subprocess with a timeout, so a hang
fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from orchestrator.config.source import MAX_DEPTH, MAX_FILE_BYTES, MAX_VALUES, TooComplex, plain
from cli_zygote import run_cli

REPO = Path(__file__).resolve().parents[2]
GOOD_RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
GOOD_INVENTORY = Path(__file__).parent / "corpus" / "good-inventory.yaml"
# The issue asks for "within a second or two"; this bound is loose because the machine is shared
# (process start-up alone takes ~0.5 s here). A hang hits the subprocess timeout instead.
PROMPT_S = 8.0
HEAD = "name: limits\nimage:\n  ref: vllm-sim:latest\nmodel:\n  repo: sim/tiny-moe\nvllm:\n  tensor_parallel_size: 2\n"


@pytest.fixture
def env(tmp_path) -> dict:
    """The environment `validate` runs in: a HOME with ~/.ssh/known_hosts (the good inventory's default)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")
    return {**os.environ, "HOME": str(home)}


def validate(env: dict, recipe: Path | str = GOOD_RECIPE, inventory: Path | str = GOOD_INVENTORY):
    started = time.monotonic()
    result = run_cli(["validate", str(recipe), "-i", str(inventory)], env=env, timeout=60)
    return result, time.monotonic() - started


def assert_refused(result, elapsed: float, where: str, says: str) -> None:
    """Exit 2, one `error: <where>` line saying `says`, nothing on stdout, no traceback, promptly."""
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr and result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith(f"error: {where}"), (where, errors[0])
    assert says in errors[0], (says, errors[0])
    assert elapsed < PROMPT_S, f"took {elapsed:.1f}s"


def billion_laughs(levels: int = 10) -> str:
    """The classic bomb: each level is 10 uses of the one before, so 10**levels strings in < 1 KiB."""
    text = "x-lol:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for n in range(1, levels):
        text += f"  l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]\n"
    return text


def test_the_good_pair_validates(env):
    result, _ = validate(env)
    assert result.returncode == 0, result.stderr


def test_a_file_near_the_size_limit_still_validates(tmp_path, env):
    """The limit refuses only what no real file is: a recipe padded with comments just under it passes."""
    text = GOOD_RECIPE.read_text()
    padding = ("# " + "x" * 77 + "\n") * ((MAX_FILE_BYTES - len(text) - 1024) // 80)
    path = tmp_path / "padded.yaml"
    path.write_text(text + padding)
    assert MAX_FILE_BYTES - 2048 < path.stat().st_size <= MAX_FILE_BYTES
    result, elapsed = validate(env, path)
    assert result.returncode == 0, result.stderr
    assert elapsed < PROMPT_S


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, env):
    path = tmp_path / "huge.yaml"
    with path.open("w") as fh:
        fh.write(HEAD)
        fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB of NULs, cheap to make, slow to parse
    result, elapsed = validate(env, path)
    assert_refused(result, elapsed, f"{path}: ", "file is 64.0 MiB, over the 64 KiB limit")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("side", ["recipe", "inventory"])
def test_a_device_that_never_ends_is_refused(device, side, env):
    if not os.path.exists(device):
        pytest.skip(f"not on this host: {device}")
    result, elapsed = validate(env, **{side: device})
    assert_refused(result, elapsed, f"{device}: ", "is a character device, not a regular file")


def test_a_symlink_to_a_device_is_refused(tmp_path, env):
    link = tmp_path / "recipe.yaml"
    link.symlink_to("/dev/zero")
    result, elapsed = validate(env, link)
    assert_refused(result, elapsed, f"{link}: ", "is a character device")


def test_a_fifo_without_a_writer_does_not_block(tmp_path, env):
    """A plain open() of a FIFO blocks until someone writes: this would hang without the stat/O_NONBLOCK."""
    fifo = tmp_path / "inventory.yaml"
    os.mkfifo(fifo)
    result, elapsed = validate(env, inventory=fifo)
    assert_refused(result, elapsed, f"{fifo}: ", "is a FIFO (named pipe), not a regular file")


def test_a_directory_is_refused(tmp_path, env):
    result, elapsed = validate(env, tmp_path)
    assert_refused(result, elapsed, f"{tmp_path}: ", "is a directory, not a regular file")


def test_a_billion_laughs_alias_bomb_is_refused_at_the_alias(tmp_path, env):
    path = tmp_path / "bomb.yaml"
    path.write_text(HEAD + billion_laughs(10))  # 10**10 values: hangs and exhausts memory if expanded
    result, elapsed = validate(env, path)
    # The 8 values above, x-lol, then l0..l3 expand to 11 + 111 + 1111 + 11111 values: l4's first use of *l3
    # (line 13) crosses 20000, and is named.
    assert_refused(result, elapsed, f"{path}:13: x-lol.l4.0: ", f"alias expands the document past {MAX_VALUES} values")


def test_an_alias_bomb_in_the_inventory_is_refused(tmp_path, env):
    path = tmp_path / "inventory.yaml"
    path.write_text(billion_laughs(9) + GOOD_INVENTORY.read_text())
    result, elapsed = validate(env, inventory=path)
    assert_refused(result, elapsed, f"{path}:6: x-lol.l4.0: ", "alias expands the document")


def test_a_self_referencing_alias_is_refused(tmp_path, env):
    path = tmp_path / "self.yaml"
    path.write_text(HEAD + "env: &e\n  LOOP: *e\n")
    result, elapsed = validate(env, path)
    assert_refused(result, elapsed, f"{path}:9: env.LOOP: ", "valid string")


@pytest.mark.parametrize("shape", ["flow", "block"])
def test_deep_nesting_is_refused_at_its_line(shape, tmp_path, env):
    path = tmp_path / "deep.yaml"
    if shape == "flow":  # 25000 levels on one line: RecursionError in a recursive composer
        path.write_text(HEAD + "env: " + "[" * 25000 + "]" * 25000 + "\n")
        line = 8
    else:  # one key per line, indented one more space each time
        path.write_text(HEAD + "env:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(200)) + " " * 201 + "v\n")
        line = 8 + MAX_DEPTH - 1
    result, elapsed = validate(env, path)
    assert_refused(result, elapsed, f"{path}:{line}: ", f"nested deeper than {MAX_DEPTH} levels")


def test_nesting_built_from_aliases_is_refused(tmp_path, env):
    """Each anchor nests the one before 10 levels down: no single node is deep, the expansion is."""
    text = HEAD + "x-deep:\n  d0: &d0 " + "[" * 10 + "x" + "]" * 10 + "\n"
    for n in range(1, 8):
        text += f"  d{n}: &d{n} " + "[" * 10 + f"*d{n - 1}" + "]" * 10 + "\n"
    path = tmp_path / "deep-aliases.yaml"
    path.write_text(text)
    result, elapsed = validate(env, path)
    assert_refused(result, elapsed, f"{path}:", f"nested deeper than {MAX_DEPTH} levels")


def test_a_number_python_cannot_convert_is_refused_at_its_line(tmp_path, env):
    path = tmp_path / "bigint.yaml"
    path.write_text(HEAD + "  max_model_len: " + "7" * 10000 + "\n")
    result, elapsed = validate(env, path)
    assert_refused(result, elapsed, f"{path}:8: ", "cannot read this value")
    assert "set_int_max_str_digits" not in result.stderr


# plain() on its own: the mechanism the CLI cases above go through.

def test_plain_counts_every_value_it_produces():
    shared = ["a", "b"]
    assert plain({"x": shared, "y": shared}, budget=7) == {"x": ["a", "b"], "y": ["a", "b"]}  # 1 + 3 + 3
    with pytest.raises(TooComplex) as caught:
        plain({"x": shared, "y": shared}, budget=6)
    assert caught.value.loc == ("y",) and "alias" in caught.value.message


def test_plain_without_aliases_names_where_the_budget_ran_out():
    with pytest.raises(TooComplex) as caught:
        plain({"env": {f"K{i}": "v" for i in range(10)}}, budget=5)
    assert caught.value.loc == ("env", "K3") and caught.value.message.startswith("more than 5 values")


def test_plain_refuses_a_cycle():
    loop: list = ["x"]
    loop.append(loop)
    with pytest.raises(TooComplex) as caught:
        plain({"a": loop})
    assert caught.value.loc == ("a", 1) and "refers to itself" in caught.value.message


def test_plain_refuses_a_mapping_as_a_key():
    from ruamel.yaml import YAML

    tree = YAML(typ="rt").load("? {a: 1}\n: 2\n")
    with pytest.raises(TooComplex) as caught:
        plain(tree)
    assert "a key must be a plain value" in caught.value.message
