"""Issue 39, acceptance 3 on the shared 2-node sim: every command that needs a cluster, run with `--json`
(the list and its order: tests/cli_json.py CLUSTER_RUNS), prints one envelope that validates against the
shipped JSON Schema; an event stream's lines validate as events and its last line is the envelope. A run
may fail (a refusal, a missing image): its error object must then validate and its exit code match. The
commands that run offline are held in tests/unit/test_json_contract.py."""

from __future__ import annotations

import shutil

import pytest

import cli_json
from deploy_helpers import spark_deploy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

# The ones that must succeed here: the deployment itself and the reads of it.
MUST_SUCCEED = {("demo",), ("up",), ("status",), ("logs",), ("history",), ("audit",), ("lock",),
                ("watch",), ("prune",), ("down",), ("sim", "ls")}
STREAMS = {("up",)}  # an event stream: its events, one a line, then the envelope (prune may have none)


def test_every_cluster_command_prints_one_valid_envelope(pair, tmp_path):
    shutil.copy(pair.known_hosts_path, tmp_path / "known_hosts")
    ips = [n.ip for n in pair.nodes()]
    fill = {"{recipe}": str(pair.recipe_path), "{inventory}": str(pair.inventory_path), "{cluster}": pair.name,
            "{tmp}": str(tmp_path), "{key}": str(pair.key_path), "{ip1}": ips[0], "{ip2}": ips[1]}
    said: dict[tuple[str, ...], dict] = {}
    wrong: list[str] = []  # every command is run and judged; the failures are said together
    for path, template in cli_json.CLUSTER_RUNS.items():
        run = spark_deploy(*path, *[_filled(a, fill) for a in template], "--json", timeout=280)
        where = f"{' '.join(path)}: exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-2000:]}"
        try:
            assert run.returncode in (0, 1, 2), where
            doc = cli_json.envelope(run.stdout)  # validates the envelope, the lines before it, the times
            said[path] = doc
            assert doc["ok"] is (run.returncode == 0), where
            assert doc["ok"] or doc["error"]["exit_code"] == run.returncode, where
            assert doc["ok"] or path not in MUST_SUCCEED, where
            assert path not in STREAMS or cli_json.events(run.stdout), f"no event lines before the envelope: {where}"
        except Exception as exc:  # noqa: BLE001 - collected, raised below with all the others
            wrong.append(f"{where}\n{exc!s:.1500}")
    assert not wrong, "\n\n".join(wrong)
    # numbers as numbers, times as ISO with zone (envelope() checked every *_at)
    status = said[("status",)]["result"]
    assert sorted(c["rank"] for c in status["containers"]) == [0, 1], status
    assert {c["world"] for c in status["containers"]} == {2} and all(isinstance(c["serve_port"], int)
                                                                     for c in status["containers"])
    (release,) = [r for r in said[("history",)]["result"] if r["serving"]] or [None]
    assert release is not None and isinstance(release["started_at"], str)
    assert isinstance(said[("watch",)]["result"]["at"], str)


def _filled(arg: str, fill: dict[str, str]) -> str:
    for key, value in fill.items():
        arg = arg.replace(key, value)
    return arg
