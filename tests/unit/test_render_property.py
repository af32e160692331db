"""Acceptance 2 (issue #2): no value in a recipe or inventory can become a second shell word.

For every string field (and every string-keyed map) of both files, any string placed there is either
refused by the loader with a ConfigError (what the CLI turns into exit 2), or it renders so that, for
every node, `shlex.split(printed) == argv`, and the argv equals the one rendered with the field's
ordinary value except that this value now sits, intact, inside exactly the tokens that field owns.

How: a base recipe and inventory in which every field holds a distinctive sentinel ("zq..."); a
"slot" names where a value goes. Each example writes both files with ruamel (all strings double-quoted,
so YAML carries any character), loads them, renders, and compares against the sentinel rendering with
the sentinel swapped for the value. Recipe-hash labels are masked (any recipe change moves them).
"""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import DoubleQuotedScalarString
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.load import load_deployment
from orchestrator.config.flag_table import BUNDLED
from orchestrator.config.source import ConfigError
from orchestrator.config.vllm_flags import flag_issues
from orchestrator.facts.vllm import write_cache
from orchestrator.render.plan import render_plan
import cli_json

BASE_RECIPE = {
    "name": "zq-recipe",
    "description": "zq description",
    "image": {"ref": "zq.example/zqimage:zqtag", "id": None, "serve_entrypoint": True},
    "model": {"repo": "zqorg/zqmodel", "revision": "zqrevision"},
    "serve": {"served_model_name": "zq-served", "host": "0.0.0.0", "port": 8000},
    "vllm": {
        "tensor_parallel_size": 2, "master_port": 29701, "distributed_executor_backend": "mp",
        "kv_cache_dtype": "fp8", "moe_backend": "flashinfer_b12x", "gpu_memory_utilization": 0.8,
        "max_model_len": 4096,
        "speculative_config": {"method": "zqmethod", "num_speculative_tokens": 3, "zq_spec_key": "zqspecvalue"},
        "extra": {"zq-flag": "zqflagvalue", "zq-switch": True},
    },
    "env": {"ZQ_ENV_KEY": "zqenvvalue"},
    "secrets": ["ZQ_SECRET_NAME"],
    "mounts": {
        "hf_cache": "/zq/hfmount", "jit_cache": "/zq/jitmount",
        "overlays": [{"source": "/zq/overlaysrc", "target": "/zq/overlaytgt"}],
        "extra": [{"source": "/zq/extrasrc", "target": "/zq/extratgt", "read_only": False}],
    },
    "docker": {"gpus": "all", "ipc": "shareable", "network": "host", "shm_size": "10g", "privileged": False,
               "restart": {"policy": "on-failure", "max_retries": 3}},
    "expect": {
        "lines": [{"name": "zq-line", "pattern": "zqpattern", "contains": "zqcontains", "nodes": "all"}],
        "identical": [{"name": "zq-ident", "pattern": "zqidentpattern"}],
    },
}

BASE_INVENTORY = {
    "cluster": "zq-cluster",
    "head": "zq-node-a",
    "interconnect": {"profile": "roce", "hca": "zqhca", "gid_index": 3, "socket_ifname": "zqifname"},
    "ssh": {"user": "zquser", "port": 22, "key": "/zq/sshkey", "known_hosts": "/zq/knownhosts"},
    "nodes": [
        {"name": "zq-node-a", "address": "zq-addr-a.local", "fabric_ip": "10.77.0.1", "gpus": 1,
         "jit_cache": "/zq/jit-a", "hf_cache": "/zq/hf-a", "state_dir": "/zq/state-a"},
        {"name": "zq-node-b", "address": "zq-addr-b.local", "fabric_ip": "10.77.0.2", "gpus": 1,
         "jit_cache": "/zq/jit-b", "hf_cache": "/zq/hf-b", "state_dir": "/zq/state-b",
         "env": {"ZQ_NODE_KEY": "zqnodevalue"},
         "ssh": {"user": "zqnodeuser", "port": 2222, "key": "/zq/nodekey"}},
    ],
}

# Every environment variable name the base rendering sets: a key slot taking one of these names is an
# override (legitimately changing the argv's shape), not an injection, so those draws are discarded.
RENDERED_ENV_KEYS = {"HF_HOME", "VLLM_CACHE_ROOT", "NCCL_IB_DISABLE", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX",
                     "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "ZQ_ENV_KEY",
                     "ZQ_NODE_KEY"}

NASTY = [
    "", " ", "a b", "'", '"', "\\", "$(id)", "`id`", "${HOME}", "$HOME", ";", "&&", "|", ">", "<", "*", "?",
    "~", "#", "!", "\n", "\r", "\t", "\x00", "\x1b[31m", "\x7f", "\x85", "\x9b", "\u2028", "\ufeff", "é",
    "日本", "🙂", "--headless", "-e", "=", ":", ",", "a=b", "/a b/c", "/x;rm -rf ~", "x'$(id)'y", '"; id; "',
    "{{ 7*7 }}", "{% raw %}", "\"\n\"", "--node-rank 1", "' --privileged '", ":smile:", "[bold]x[/]",
]


def _get(tree, path):
    for part in path:
        tree = tree[part]
    return tree


def _set(tree, path, value):
    _get(tree, path[:-1])[path[-1]] = value


def _rename(tree, path, new):
    """Rename the key at `path` to `new` in place, keeping the mapping's order."""
    parent = _get(tree, path[:-1])
    items = [(new if k == path[-1] else k, v) for k, v in parent.items()]
    parent.clear()
    parent.update(items)


def _json_inner(text: str) -> str:
    return json.dumps(text)[1:-1]


@dataclass
class Slot:
    """Where a value goes, the sentinel it replaces, and how the argv must change."""

    name: str
    file: str  # "recipe" or "inventory"
    paths: list  # one or more paths that all take the value (e.g. the head's name and `head`)
    seeds: list  # values that must be accepted
    key: bool = False  # the value is a mapping key, not a value
    listed: bool = False  # the field is a list: the value goes in as its only item
    anchor: str | None = None  # the value is the one token after this flag (sentinel not unique)
    kind: str = "text"  # text | path | ip | json (inside the --speculative-config JSON)
    rendered: bool = True  # the value shows up in argv at all
    reject: str | None = "x\ny"  # a value that must be refused (None: the field takes anything)
    avoid: set = field(default_factory=set)  # values that collide with a sibling key
    hidden: set = field(default_factory=set)  # values that legitimately render no token (a default)
    expect: Callable | None = None  # custom: (sentinel argv, sentinel, stored value) -> expected argv

    @property
    def sentinel(self) -> str:
        tree = BASE_RECIPE if self.file == "recipe" else BASE_INVENTORY
        return self.paths[0][-1] if self.key else _get(tree, self.paths[0])

    def put(self, recipe: dict, inventory: dict, value: str) -> None:
        tree = recipe if self.file == "recipe" else inventory
        for path in self.paths:
            (_rename if self.key else _set)(tree, path, [value] if self.listed else value)

    def stored(self, dep, value: str) -> str:
        if self.key:
            return value
        model = dep.recipe if self.file == "recipe" else dep.inventory
        return _get(model.model_dump(mode="json"), self.paths[0] + ((0,) if self.listed else ()))

    def expected(self, argv: list[str], stored: str) -> list[str]:
        sentinel = self.sentinel
        if self.expect is not None:
            return self.expect(argv, sentinel, stored)
        if not self.rendered:  # e.g. a description or an ssh setting: the argv must not change at all
            return argv
        if self.anchor is not None:
            at = argv.index(self.anchor) + 1
            assert argv[at] == sentinel
            return argv[:at] + [stored] + argv[at + 1:]
        if self.kind == "json":
            return [t.replace(_json_inner(sentinel), _json_inner(stored)) if t.startswith("{") else t for t in argv]
        return [t.replace(sentinel, stored) for t in argv]


def _revision(argv, sentinel, stored):
    at = argv.index("--revision")
    if stored == "main":  # the default is not spelled out
        return argv[:at] + argv[at + 2:]
    return argv[:at + 1] + [stored] + argv[at + 2:]


def _extra_value(argv, sentinel, stored):
    """`--flag value`, except a value that looks like an option stays attached: `--flag=value`."""
    at = argv.index("--zq-flag")
    assert argv[at + 1] == sentinel
    if stored.startswith("-"):
        return argv[:at] + [f"--zq-flag={stored}"] + argv[at + 2:]
    return argv[:at + 1] + [stored] + argv[at + 2:]


def _image_id(argv, sentinel, stored):
    ref = BASE_RECIPE["image"]["ref"]
    return [stored if t == ref else t for t in argv]


R, I = "recipe", "inventory"
PATHS = ["/zq/a b", "/zq/$(id)", "/zq/é;`x`", "/zq/x/"]
SLOTS = [
    # ---- recipe
    Slot("recipe.name", R, [("name",)], ["zq-other", "a.b_c-1"]),
    Slot("recipe.description", R, [("description",)], ["any text $(id) `x` 'q' \"d\" ;|&"], rendered=False),
    Slot("image.ref", R, [("image", "ref")], ["ghcr.io/a/b@sha256:" + "a" * 64, "reg:5000/x/y:tag"]),
    Slot("image.id", R, [("image", "id")], ["sha256:" + "0123456789abcdef" * 4], expect=_image_id),
    Slot("model.repo", R, [("model", "repo")], ["org/model.v2", "/models/local dir;$(x)"]),
    Slot("model.revision", R, [("model", "revision")], ["main", "0123abcd", "refs/pr/1"], expect=_revision,
         hidden={"main"}),
    Slot("serve.served_model_name", R, [("serve", "served_model_name")], ["zq.other-name"]),
    Slot("serve.host", R, [("serve", "host")], ["127.0.0.1", "::"], anchor="--host"),
    Slot("vllm.distributed_executor_backend", R, [("vllm", "distributed_executor_backend")],
         ["external_launcher"], anchor="--distributed-executor-backend"),
    Slot("vllm.moe_backend", R, [("vllm", "moe_backend")], ["b12x", "marlin"], anchor="--moe-backend"),
    Slot("vllm.kv_cache_dtype", R, [("vllm", "kv_cache_dtype")], ["auto", "fp8_e5m2"], anchor="--kv-cache-dtype"),
    Slot("speculative_config.method", R, [("vllm", "speculative_config", "method")],
         ["mtp", "a \"quoted\" 'x' $(id) é"], kind="json"),
    Slot("speculative_config.<extra value>", R, [("vllm", "speculative_config", "zq_spec_key")],
         ["block", "\\ \" ' $(id) 🙂"], kind="json"),
    Slot("speculative_config.<extra key>", R, [("vllm", "speculative_config", "zq_spec_key")],
         ["rejection_sample_method", "we ird\"key\n"], key=True, kind="json", reject=None,
         avoid={"method", "num_speculative_tokens"}),
    Slot("vllm.extra.<flag>", R, [("vllm", "extra", "zq-flag")], ["block-size", "no-enable-chunked-prefill"],
         key=True, avoid={"zq-switch"}),
    Slot("vllm.extra.<switch flag>", R, [("vllm", "extra", "zq-switch")], ["trust-remote-code"], key=True,
         avoid={"zq-flag"}),
    Slot("vllm.extra.<value>", R, [("vllm", "extra", "zq-flag")], ["deepseek_v4", "a b", "--x", "$(id)", ""],
         expect=_extra_value),
    Slot("env.<key>", R, [("env", "ZQ_ENV_KEY")], ["VLLM_USE_X", "_x1"], key=True, avoid=RENDERED_ENV_KEYS),
    Slot("env.<value>", R, [("env", "ZQ_ENV_KEY")], ["1", "a b=c $(id) `x` 'q' ;", ""]),
    Slot("secrets[0]", R, [("secrets", 0)], ["HF_TOKEN", "OTHER_SECRET"], rendered=False),
    Slot("mounts.hf_cache", R, [("mounts", "hf_cache")], ["/cache/hf", *PATHS], kind="path"),
    Slot("mounts.jit_cache", R, [("mounts", "jit_cache")], ["/jitcache", *PATHS], kind="path"),
    Slot("mounts.overlays[0].source", R, [("mounts", "overlays", 0, "source")], PATHS, kind="path"),
    Slot("mounts.overlays[0].target", R, [("mounts", "overlays", 0, "target")], PATHS, kind="path"),
    Slot("mounts.extra[0].source", R, [("mounts", "extra", 0, "source")], PATHS, kind="path"),
    Slot("mounts.extra[0].target", R, [("mounts", "extra", 0, "target")], PATHS, kind="path"),
    Slot("docker.gpus", R, [("docker", "gpus")], ["2", "device=0,1", "all"], anchor="--gpus"),
    Slot("docker.ipc", R, [("docker", "ipc")], ["host", "private"], anchor="--ipc"),
    Slot("docker.network", R, [("docker", "network")], ["host"], anchor="--network"),
    Slot("docker.shm_size", R, [("docker", "shm_size")], ["1g", "512M"], anchor="--shm-size"),
    Slot("docker.restart.policy", R, [("docker", "restart", "policy")], ["on-failure"]),
    Slot("expect.lines[0].name", R, [("expect", "lines", 0, "name")], ["moe-backend"], rendered=False),
    Slot("expect.lines[0].pattern", R, [("expect", "lines", 0, "pattern")], ["Using '(?P<value>[^']+)'"],
         rendered=False),
    Slot("expect.lines[0].contains", R, [("expect", "lines", 0, "contains")], ["B12X $(id)"], rendered=False),
    Slot("expect.lines[0].nodes[0]", R, [("expect", "lines", 0, "nodes")], ["zq-node-b"], listed=True,
         rendered=False),
    Slot("expect.identical[0].pattern", R, [("expect", "identical", 0, "pattern")], ["x: (?P<value>.*)"],
         rendered=False),
    # ---- inventory
    Slot("cluster", I, [("cluster",)], ["spark-pair", "a.b-c_d"]),
    Slot("head + nodes[0].name", I, [("head",), ("nodes", 0, "name")], ["spark-1", "A.b_C-1"]),
    Slot("head alone", I, [("head",)], ["zq-node-b"], rendered=False, expect=lambda argv, s, v: None),
    Slot("nodes[1].name", I, [("nodes", 1, "name")], ["Spark_2"]),
    Slot("nodes[0].address", I, [("nodes", 0, "address")], ["spark-1.local", "fe80::1", "10.0.0.9"], rendered=False),
    Slot("nodes[0].fabric_ip", I, [("nodes", 0, "fabric_ip")], ["192.168.100.1", "fe80::1", "0:0::1"], kind="ip"),
    Slot("nodes[1].fabric_ip", I, [("nodes", 1, "fabric_ip")], ["192.168.100.2", "::ffff:10.0.0.1"], kind="ip",
         rendered=False),
    Slot("nodes[0].jit_cache", I, [("nodes", 0, "jit_cache")], ["/var/cache/vllm-jit", *PATHS], kind="path"),
    Slot("nodes[1].hf_cache", I, [("nodes", 1, "hf_cache")], ["/home/u/.cache/huggingface", *PATHS], kind="path"),
    Slot("nodes[1].state_dir", I, [("nodes", 1, "state_dir")], ["/var/lib/spark-deploy", *PATHS], kind="path"),
    Slot("nodes[1].env.<key>", I, [("nodes", 1, "env", "ZQ_NODE_KEY")], ["NCCL_P2P_LEVEL"], key=True,
         avoid=RENDERED_ENV_KEYS),
    Slot("nodes[1].env.<value>", I, [("nodes", 1, "env", "ZQ_NODE_KEY")], ["INFO", "a b $(id) `x` ' \" ;"]),
    Slot("nodes[1].ssh.user", I, [("nodes", 1, "ssh", "user")], ["spark"], rendered=False),
    Slot("nodes[1].ssh.key", I, [("nodes", 1, "ssh", "key")], ["/home/u/.ssh/id_ed25519", *PATHS], kind="path",
         rendered=False),
    Slot("ssh.user", I, [("ssh", "user")], ["root"], rendered=False),
    Slot("ssh.known_hosts", I, [("ssh", "known_hosts")], PATHS, kind="path", rendered=False),
    Slot("interconnect.profile", I, [("interconnect", "profile")], ["roce"], rendered=False),
    Slot("interconnect.hca", I, [("interconnect", "hca")], ["rocep1s0f0", "mlx5_0,mlx5_1", "a b;$(id)"]),
    Slot("interconnect.socket_ifname", I, [("interconnect", "socket_ifname")], ["enp1s0f0np0", "e th0;`x`"]),
]
SLOTS_BY_NAME = {s.name: s for s in SLOTS}
assert len(SLOTS_BY_NAME) == len(SLOTS)


def _quoted(data):
    """Every string double-quoted, so YAML carries any character (ruamel folds a plain NEL, for one)."""
    if isinstance(data, dict):
        return {_quoted(k): _quoted(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_quoted(v) for v in data]
    return DoubleQuotedScalarString(data) if isinstance(data, str) else data


def _write(data: dict, path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        YAML(typ="rt").dump(_quoted(data), fh)
    return path


def _carried(data: dict, path: Path) -> bool:
    """The harness's own guard: the file says exactly what the test meant to write."""
    return YAML(typ="rt").load(path.read_text(encoding="utf-8")) == data


HASH_LABELS = ("spark-deploy.recipe-hash=", "spark-deploy.plan-hash=")  # every value changes them, by design


def _masked(argv) -> list[str]:
    """Hash labels and the container name's plan-hash part masked (the name carries the plan hash)."""
    out = [t.split("=", 1)[0] + "=<masked>" if t.startswith(HASH_LABELS) else t for t in argv]
    return [re.sub(r"-[0-9a-f]{8}$", "-<hash>", t) if i and out[i - 1] == "--name" else t for i, t in enumerate(out)]


class Harness:
    def __init__(self, directory: Path):
        self.dir = directory
        self.base = {R: _write(BASE_RECIPE, directory / "base-recipe.yaml"),
                     I: _write(BASE_INVENTORY, directory / "base-inventory.yaml")}
        assert _carried(BASE_RECIPE, self.base[R]) and _carried(BASE_INVENTORY, self.base[I])
        self.baseline = [_masked(l.argv) for l in render_plan(load_deployment(self.base[R], self.base[I]))]

    def check(self, slot: Slot, value: str) -> str:
        """Place `value`; assert it is refused cleanly or rendered intact. Returns which."""
        recipe, inventory = copy.deepcopy(BASE_RECIPE), copy.deepcopy(BASE_INVENTORY)
        slot.put(recipe, inventory, value)
        changed = _write(recipe if slot.file == R else inventory, self.dir / f"{slot.file}.yaml")
        paths = {**self.base, slot.file: changed}
        try:
            dep = load_deployment(paths[R], paths[I])
        except ConfigError as exc:
            assert exc.issues and str(exc)
            assert {i.file for i in exc.issues} <= {str(paths[R]), str(paths[I])}
            assert _carried(recipe if slot.file == R else inventory, changed), "YAML did not carry the value"
            return "rejected"
        plan = render_plan(dep)
        stored = slot.stored(dep, value)
        if slot.kind == "path":
            assert stored == (value.rstrip("/") or "/")
        elif slot.kind == "ip":
            assert stored == str(ipaddress.ip_address(value))
        else:
            assert stored == value
        assert len(plan) == len(self.baseline) == 2
        for launch, base in zip(plan, self.baseline):
            argv = list(launch.argv)
            assert all(isinstance(t, str) for t in argv)
            assert shlex.split(launch.printed) == argv, "the printed command is not the argv"
            expected = slot.expected(base, stored)
            if expected is None:  # the value changes who is head: no token-level expectation applies
                continue
            assert _masked(argv) == expected, "the value moved, split or changed other tokens"
        if slot.rendered and stored not in slot.hidden:
            inner = _json_inner(stored) if slot.kind == "json" else stored
            assert any(inner in t for l in plan for t in l.argv), "the value does not appear intact in any token"
            if slot.kind == "json":
                head = list(plan[0].argv)
                spec = json.loads(head[head.index("--speculative-config") + 1])
                assert (stored in spec) if slot.key else (stored in spec.values())
        return "accepted"


def values_for(slot: Slot):
    nasty = st.sampled_from(NASTY)
    seeds = st.sampled_from(slot.seeds)
    return st.one_of(
        st.text(),
        nasty,
        seeds,
        st.builds(lambda a, b: a + b, seeds, st.one_of(nasty, st.text(max_size=6))),
        st.builds(lambda a, b: a + b, nasty, seeds),
    )


@pytest.mark.parametrize("slot", SLOTS, ids=[s.name for s in SLOTS])
def test_any_string_in_any_field_is_refused_or_rendered_intact(slot, tmp_path):
    harness = Harness(tmp_path)
    for seed in slot.seeds:
        assert harness.check(slot, seed) == "accepted", f"seed {seed!r} should be a valid {slot.name}"
    if slot.reject is not None:
        assert harness.check(slot, slot.reject) == "rejected"

    @settings(max_examples=10, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(value=values_for(slot))
    def prop(value):
        assume(value not in slot.avoid)
        harness.check(slot, value)

    prop()


def test_the_harness_sees_a_broken_renderer(tmp_path, monkeypatch):
    """If rendering glued a value into the wrong token or split it, the check must notice."""
    import orchestrator.render.spec as launch

    harness = Harness(tmp_path)
    original = launch.render_tokens

    def splitting(template, **context):
        tokens = original(template, **context)
        return [part for token in tokens for part in token.split(" ")]  # a shell-style word split

    monkeypatch.setattr(launch, "render_tokens", splitting)
    with pytest.raises(AssertionError):
        harness.check(SLOTS_BY_NAME["env.<value>"], "a b")


def test_the_harness_sees_a_printed_command_that_is_not_the_argv(tmp_path, monkeypatch):
    import orchestrator.render.plan as launch

    harness = Harness(tmp_path)
    assert harness.check(SLOTS_BY_NAME["env.<value>"], "a b") == "accepted"
    monkeypatch.setattr(launch.RankLaunch, "printed", property(lambda self: " ".join(self.argv)))
    with pytest.raises(AssertionError, match="printed command"):
        harness.check(SLOTS_BY_NAME["env.<value>"], "a b")


CLI_IMAGE = "sha256:" + "c0ffee00" * 8  # its cached parser knows the sentinel flags (--zq-flag, --zq-switch)


@pytest.fixture
def image_knows_the_sentinel_flags(tmp_path, monkeypatch):
    """render checks vllm.extra against the pinned image's cached parser: one that has vLLM 0.33.0's
    options and the sentinel flags, so the flags' values reach the argv."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    options = {name: list(BUNDLED.values[name]) if name in BUNDLED.values else None for name in BUNDLED.names}
    options.update({"--zq-flag": None, "--zq-switch": None, "--no-zq-switch": None})
    write_cache("vllm-help", CLI_IMAGE, {"via": "--help=all", "options": options, "listed": {}})


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slot=st.sampled_from(SLOTS), data=st.data())
def test_through_the_cli_render_json_exits_0_with_the_same_argv_or_2(slot, data, tmp_path,
                                                                     image_knows_the_sentinel_flags):
    value = data.draw(values_for(slot), label="value")
    assume(value not in slot.avoid)
    recipe, inventory = copy.deepcopy(BASE_RECIPE), copy.deepcopy(BASE_INVENTORY)
    recipe["image"]["id"] = CLI_IMAGE
    slot.put(recipe, inventory, value)
    rpath, ipath = _write(recipe, tmp_path / "recipe.yaml"), _write(inventory, tmp_path / "inventory.yaml")
    assert _carried(recipe, rpath) and _carried(inventory, ipath)
    result = CliRunner().invoke(app, ["render", str(rpath), "-i", str(ipath), "--json"])
    assert "Traceback" not in result.stdout + result.stderr
    try:
        dep = load_deployment(rpath, ipath)
        problems = flag_issues(dep.recipe, dep.recipe_doc)  # render's verdict on the flags, as validate's
        if problems:
            raise ConfigError(problems)
        plan = render_plan(dep)
    except ConfigError:
        assert result.exit_code == 2  # --json: stdout holds one JSON object, the error's (issue 22)
        doc = cli_json.envelope(result.stdout)
        assert doc["ok"] is False and doc["error"]["exit_code"] == 2 and doc["error"]["code"] == "bad-input"
        assert result.stderr.startswith("error: ")
        return
    assert result.exit_code == 0, result.stderr
    printed = cli_json.result(result.stdout)
    assert [e["argv"] for e in printed] == [list(l.argv) for l in plan]
    assert all(shlex.split(e["printed"]) == e["argv"] for e in printed)
