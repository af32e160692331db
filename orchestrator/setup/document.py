"""The inventory `setup` writes: every value with a comment saying where it came from (ruamel, as
config/edit.py writes recipes), validated before it replaces anything, and the difference to the file
it would replace.
"""

from __future__ import annotations

import difflib
import io
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ..config.load import load_inventory
from ..config.local_checks import inventory_known_hosts_problems, inventory_ssh_problems
from ..config.source import ConfigError
from .judge import Decision, Value

HEADER = "# written by `spark-deploy setup`; each comment says where its value came from\n"


@dataclass(frozen=True)
class Access:
    cluster: str
    user: str
    port: int
    key: str | None  # absolute; None: the agent or ~/.ssh's default keys logged in
    known_hosts: str  # absolute
    cluster_id: str | None = None  # the identity the head holds (releases/identity.py)


def _put(m: CommentedMap, key: str, v: Value) -> None:
    m[key] = v.value
    if v.source:
        m.yaml_add_eol_comment(v.source, key, column=1)  # one space before every "#", on every line


def build(d: Decision, access: Access) -> CommentedMap:
    doc = CommentedMap()
    _put(doc, "cluster", Value(access.cluster, "--cluster"))
    if access.cluster_id:
        _put(doc, "cluster_id", Value(access.cluster_id, "the identity the head holds (its state dir's cluster.json)"))
    _put(doc, "head", Value(d.nodes[0].name.value, "the first host given: rank 0"))
    ic = CommentedMap()
    for key in ("profile", "socket_ifname", "hca", "gid_index"):
        if key in d.interconnect:
            _put(ic, key, d.interconnect[key])
    doc["interconnect"] = ic
    ssh = CommentedMap()
    _put(ssh, "user", Value(access.user, "--user: the login that ran discovery"))
    _put(ssh, "port", Value(access.port, "--port"))
    if access.key:
        _put(ssh, "key", Value(access.key, "the key that logged in to every node"))
    _put(ssh, "known_hosts", Value(access.known_hosts, "host keys whose SHA256 fingerprints were confirmed"))
    doc["ssh"] = ssh
    nodes = CommentedSeq()
    for n in d.nodes:
        m = CommentedMap()
        _put(m, "name", n.name)
        _put(m, "address", Value(n.host, "as given to setup: the address this machine reaches"))
        _put(m, "fabric_ip", n.fabric_ip)
        _put(m, "gpus", n.gpus)
        _put(m, "jit_cache", n.jit_cache)
        _put(m, "hf_cache", n.hf_cache)
        if n.env:
            env = CommentedMap()
            for key, v in n.env.items():
                _put(env, key, v)
            m["env"] = env
        nodes.append(m)
    doc["nodes"] = nodes
    return doc


def render(doc: CommentedMap) -> str:
    y = YAML()
    y.indent(mapping=2, sequence=4, offset=2)
    y.width = 4096  # a comment is never folded onto a line of its own
    buf = io.StringIO()
    y.dump(doc, buf)
    return HEADER + buf.getvalue()


def diff(path: str, text: str) -> str:
    """A unified diff from the file at `path` (empty if absent) to `text`; "" when they are the same."""
    old = Path(path).read_text(encoding="utf-8") if os.path.exists(path) else ""
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), text.splitlines(keepends=True),
                                        f"{path} (now)", f"{path} (setup)"))


def check(path: str, environ) -> None:
    """What `validate` checks of an inventory alone: the models, the key and known_hosts files."""
    inv, doc = load_inventory(path)
    issues = inventory_ssh_problems(inv, doc) + inventory_known_hosts_problems(inv, doc, environ)
    if issues:
        raise ConfigError(issues)


def write(path: str, text: str, environ) -> None:
    """Write `text` to `path` atomically, only once it validates; a failure leaves the old file as it was."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".yaml", dir=target.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        check(tmp, environ)
        os.chmod(tmp, (target.stat().st_mode & 0o777) if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
