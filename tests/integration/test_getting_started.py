"""docs/getting-started.md, run as written on the simulated cluster, so the page cannot fall behind the tool.

Every ```bash block of the page is run in order in one bash (`-e -o pipefail`, so an `export` carries to
the next block), in a fresh directory holding `recipes/dspark-0731-b12x.yaml` (the sim's recipe, unpinned,
naming HF_TOKEN as its secret) and a fresh HOME (setup writes its known_hosts there). Only what differs
on the sim is replaced, each replacement required to match: the management addresses, the login, and the
host key answers (`--yes --fingerprint`, as docs/setup.md gives it for scripts). The token is typed on
stdin, the Hub is the stand-in, and the nodes start without the model, as on a first day. A block after
an HTML comment starting "not on the simulated cluster" is skipped (and must say why).

README's everyday-use block is a synopsis (`[--strict]`, `RECIPE | --all`): every command path and option
it names is checked against the real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest
import typer

from deploy_helpers import MODEL_ROOT, recipe_variant
from orchestrator.setup.hostkeys import fingerprint
from orchestrator.sim import fake_model
from orchestrator.sim.hub import HubRepo, HubStandIn
from orchestrator.sim.state import NODE_USER

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "getting-started.md"
RECIPE = "recipes/dspark-0731-b12x.yaml"
TOKEN = "hf_sim_token"
SKIP = "not on the simulated cluster"


@dataclass(frozen=True)
class Block:
    line: int  # the fence's line in the file, 1-based
    lang: str
    text: str
    skip: str | None  # why it does not run on the simulated cluster


def code_blocks(markdown: str) -> list[Block]:
    """Every fenced block, with its language and the `<!-- ... -->` comment right above its fence, if any."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = lines[i - 1].strip() if i else ""
        note = re.fullmatch(r"<!--\s*(.*?)\s*-->", above)
        blocks.append(Block(i + 1, fence.group(1), "\n".join(lines[i + 1:end]), note.group(1) if note else None))
        i = end + 1
    return blocks


def test_the_pages_blocks_are_marked():
    """Commands are in ```bash blocks; a skipped one says why; nothing else is shown as a shell block."""
    blocks = code_blocks(PAGE.read_text())
    bash = [b for b in blocks if b.lang == "bash"]
    assert bash and all(b.lang in ("bash", "yaml") for b in blocks), [(b.line, b.lang) for b in blocks]
    for b in bash:
        assert b.skip is None or (b.skip.startswith(SKIP + ":") and len(b.skip) > len(SKIP) + 10), b
    assert [b for b in bash if b.skip], "boot enable cannot run on the docker-init pair: it must be marked"


def _fingerprints(cluster) -> list[str]:
    keys = paramiko.HostKeys(str(cluster.known_hosts_path))
    return [f"{n.ip}={fingerprint(keys.lookup(n.ip)['ssh-ed25519'])}" for n in cluster.nodes()]


def script_for(cluster, markdown: str) -> str:
    ip1, ip2 = (n.ip for n in cluster.nodes())
    pinned = " ".join(f"--fingerprint {fp}" for fp in _fingerprints(cluster))
    replace = {
        "10.0.0.11 10.0.0.12 --user nvidia": f"{ip1} {ip2} --user {NODE_USER} --key {cluster.key_path} --yes "
                                             f"{pinned} --no-node-keys",
    }
    parts = ["set -e -o pipefail"]
    for block in code_blocks(markdown):
        if block.lang != "bash" or block.skip:
            continue
        parts.append(f"echo \"### getting-started.md:{block.line} at $SECONDS s\" >&2")
        parts.append(block.text)
    script = "\n".join(parts) + "\n"
    for doc, sim in replace.items():
        assert doc in script, f"the page no longer shows {doc!r}: update this test's replacements"
        script = script.replace(doc, sim)
    return script


@pytest.fixture
def first_day(pair, tmp_path):
    """A directory with the page's recipe path (the sim recipe, unpinned, needing HF_TOKEN), a fresh HOME, the
    Hub stand-in serving the sim's model as a gated repo, and nodes that hold no copy of the model."""
    work = tmp_path / "work"
    (work / "recipes").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    recipe_variant(pair, work / RECIPE, image={"id": None}, secrets=["HF_TOKEN"])
    with HubStandIn([HubRepo.fake(token=TOKEN)]) as hub:
        for node in (1, 2):
            pair.exec(node, ["rm", "-rf", "--", MODEL_ROOT])
        yield work, tmp_path / "home", hub
    for node in (1, 2):
        pair.exec(node, ["rm", "-rf", "--", f"{fake_model.HF_CACHE_DIR}/hub/.locks",
                         f"{fake_model.HF_CACHE_DIR}/hub/CACHEDIR.TAG"])
        pair.fault(node, "model-reset")


@pytest.mark.timeout(900)
def test_getting_started_runs_as_written_on_the_simulated_cluster(pair, first_day):
    work, home, hub = first_day
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "SPARK_DEPLOY_INVENTORY")}
    env.update(HOME=str(home), COLUMNS="200", HF_ENDPOINT=hub.endpoint(pair.info()["gateway"]),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    script = script_for(pair, PAGE.read_text())
    run = subprocess.run(["bash", "-c", script], cwd=work, env=env, input=TOKEN + "\n", text=True,
                         capture_output=True, timeout=840)
    print("\n".join(re.findall(r"^### .*$", run.stderr, re.M)))  # where the time went, block by block
    blocks = re.findall(r"^### (getting-started\.md:\d+) at \d+ s$", run.stderr, re.M)
    assert run.returncode == 0, (f"exit {run.returncode} in the block at {blocks[-1] if blocks else '?'}\n"
                                 f"--- stdout (tail)\n{run.stdout[-4000:]}\n--- stderr (tail)\n{run.stderr[-4000:]}")
    ran = [b for b in code_blocks(PAGE.read_text()) if b.lang == "bash" and not b.skip]
    assert blocks == [f"getting-started.md:{b.line}" for b in ran]
    assert (work / "inventory.yaml").exists() and (home / ".ssh" / "known_hosts").exists()  # setup's, used after
    assert hub.downloaded > 0, "model pull downloaded nothing from the Hub"
    assert TOKEN not in run.stdout + run.stderr, "the token was printed"


# ---- README's everyday-use block: a synopsis, checked against the CLI --------------------------------------


def _synopsis(readme: str) -> list[tuple[int, str]]:
    """(line, text) of each `spark-deploy ...` command in the everyday-use block, its continuation lines joined
    (a line that starts with spaces and `[` continues the command above; text after `#` is a comment)."""
    start = readme.index("## Everyday use")
    block = next(b for b in code_blocks(readme[start:]) if b.text.lstrip().startswith("spark-deploy"))
    first = readme[:start].count("\n") + block.line + 1
    commands: list[tuple[int, str]] = []
    for offset, raw in enumerate(block.text.splitlines()):
        text = raw.split("#", 1)[0].rstrip()
        if text.startswith("spark-deploy"):
            commands.append((first + offset, text))
        elif text.strip().startswith("["):
            commands[-1] = (commands[-1][0], commands[-1][1] + " " + text.strip())
    return commands


def test_readme_everyday_use_names_only_commands_and_options_the_cli_has():
    from orchestrator.cli.main import app

    root = typer.main.get_command(app)
    commands = _synopsis((REPO / "README.md").read_text())
    assert len(commands) > 20
    for line, text in commands:
        words = text.split()[1:]
        command, path = root, []
        while hasattr(command, "list_commands") and words:  # a group (typer vendors its own click)
            names = [n for n in re.split(r"[|\[\]]", words[0]) if n]
            found = [n for n in names if command.get_command(command.context_class(command), n)]
            if not found:
                break
            path.append(found[0])
            command = command.get_command(command.context_class(command), found[0])
            words.pop(0)
        assert not hasattr(command, "list_commands"), f"README.md:{line}: {text!r} names no command of {path}"
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", " ".join(words)):
            assert option in known, f"README.md:{line}: spark-deploy {' '.join(path)} has no option {option}"
