"""Reading a command's `--json` in tests: every read checks the output against the contract that ships in the
package (orchestrator/cli/json_contract.schema.json), so a test that reads JSON also holds the contract.

- envelope(stdout): the one object (an event stream's last line), validated; its other lines validated as events;
- result(stdout): its `result`; a dict gets the envelope's `ok` (as the command's own view of itself);
- events(stdout): an event stream's lines before the envelope.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator

from orchestrator.cli.json_contract import is_time_key, schema

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


@cache
def _validator(definition: str) -> Draft202012Validator:
    whole = schema()
    return Draft202012Validator({**whole, "$ref": f"#/$defs/{definition}"})


def _lines(stdout: str) -> list[Any]:
    try:
        return [json.loads(stdout)]
    except json.JSONDecodeError:
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def times_are_iso(value: Any, key: Any = None) -> None:
    """Every `at` / `*_at` value is an ISO 8601 string with zone (or null)."""
    if is_time_key(key) and not isinstance(value, (dict, list)):
        assert value is None or (isinstance(value, str) and ISO.match(value)), (key, value)
    if isinstance(value, dict):
        for k, v in value.items():
            times_are_iso(v, k)
    elif isinstance(value, list):
        for v in value:
            times_are_iso(v, key)


def envelope(stdout: str) -> dict:
    lines = _lines(stdout)
    assert lines, "nothing on stdout"
    *before, last = lines
    _validator("envelope").validate(last)
    for line in before:
        _validator("event").validate(line)
    times_are_iso(lines)
    return last


def events(stdout: str) -> list[dict]:
    lines = _lines(stdout)
    envelope(stdout)
    return lines[:-1]


def result(stdout: str) -> Any:
    doc = envelope(stdout)
    got = doc["result"]
    if isinstance(got, dict):
        return {**got, "ok": doc["ok"]}
    if got is None:
        return {"ok": doc["ok"]}
    return got


# The commands whose --json is run on the shared sim cluster, in this order (tests/integration/
# test_json_contract_cluster.py); the rest run offline (tests/unit/test_json_contract.py). Placeholders:
# {recipe} {inventory} {cluster} {tmp} {key} {ip1} {ip2}. A run that fails is held too (its error object must
# validate); `demo` deploys the pair's own recipe, so the read-only commands after it see a serving release.
CLUSTER_RUNS: dict[tuple[str, ...], list[str]] = {
    ("demo",): ["--name", "{cluster}"],
    ("up",): ["{recipe}", "-i", "{inventory}", "--no-accept"],  # already serving: the stream, then the envelope
    ("status",): ["-i", "{inventory}"],
    ("logs",): ["-i", "{inventory}", "--tail", "2"],
    ("accept",): ["-i", "{inventory}"],
    ("watch",): ["-i", "{inventory}", "--once"],
    ("history",): ["-i", "{inventory}"],
    ("audit",): ["-i", "{inventory}", "--tail", "3"],
    ("lock",): ["-i", "{inventory}"],
    ("boot", "status"): ["-i", "{inventory}"],
    ("overlay", "hash"): ["{recipe}", "-i", "{inventory}"],
    ("fit",): ["{recipe}", "-i", "{inventory}"],
    ("pin",): ["{recipe}", "-i", "{inventory}"],
    ("preflight",): ["{recipe}", "-i", "{inventory}"],
    ("bench",): ["{recipe}", "-i", "{inventory}", "--shots", "1", "--warmup", "0", "--max-tokens", "8",
                 "--profile", "prose", "--no-record"],
    ("model", "pull"): ["{recipe}", "-i", "{inventory}", "--offline", "--no-fit"],
    ("fabric", "test"): ["-i", "{inventory}", "--seconds", "1"],
    ("maintenance", "begin"): ["{recipe}", "-i", "{inventory}", "--reason", "json contract"],
    ("maintenance", "verify"): ["-i", "{inventory}"],
    ("maintenance", "end"): ["-i", "{inventory}", "--yes"],
    ("restart",): ["-i", "{inventory}"],
    ("upgrade",): ["{recipe}", "-i", "{inventory}", "--image", "vllm-sim:no-such-tag", "-o", "{tmp}/up.yaml"],
    ("tune",): ["{recipe}", "-i", "{inventory}", "--set", "vllm.max_num_seqs=4,8", "--shots", "1", "--rounds",
                "1", "--max-tokens", "8", "-o", "{tmp}/tuned.yaml", "--ready-timeout", "1"],
    ("rollback",): ["99", "-i", "{inventory}", "--yes"],
    ("prune",): ["-i", "{inventory}", "--keep", "3"],
    ("boot", "enable"): ["-i", "{inventory}", "--yes"],
    ("boot", "disable"): ["-i", "{inventory}"],
    ("supervise", "status"): ["-i", "{inventory}"],
    ("supervise", "enable"): ["-i", "{inventory}"],  # refused or enabled: either way an envelope; disabled next
    ("supervise", "disable"): ["-i", "{inventory}"],
    ("down",): ["-i", "{inventory}", "--yes"],
    ("setup",): ["{ip1}", "{ip2}", "--user", "spark", "--key", "{key}", "--known-hosts", "{tmp}/known_hosts",
                 "-o", "{tmp}/inventory.yaml", "--no-node-keys", "--yes"],
    ("sim", "ls"): [],
    ("sim", "images"): [],
    ("sim", "fault"): ["9", "partition", "--name", "{cluster}"],
    ("sim", "up"): ["--name", "{cluster}", "--load-image-on", "9"],
    ("sim", "down"): ["--name", "json-contract-never-made"],
}
