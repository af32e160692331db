"""The product's fixed scripts, recognised by IDENTITY with the module constant that sends them
(`script is lock._CREATE`), each answered by a Python handler over the node's model: never by reading
the shell text.
"""

from __future__ import annotations

import json
import posixpath

from orchestrator.checks import model_cache
from orchestrator.docker_cli import containers, images
from orchestrator.deploy import down
from orchestrator.watching import sample as watch_sample
from orchestrator.transport import copies
from orchestrator.operation import state
from orchestrator.releases import audit, identity, lock, store

from orchestrator.facts import core as facts
from orchestrator.facts import supervisor as supervisor_facts
from orchestrator.facts import vllm as vllm_facts

from . import systemd
from .facts import SAMPLES, driver as fact_driver
from .docker import Answer, ps_ids, rm, stop, unknown
from .model import Node


def _cat(node: Node, path: str) -> Answer:  # '[ -f "$1" ] && cat -- "$1" || true'
    return 0, node.files.get(path, ""), ""


def _lock_create(node: Node, path: str, details: str, *then: str) -> Answer:
    """TAKEN, then what the optional read-only `then` script ("$3", its args "$4"..) prints under the lock
    (answered by identity too), with "@then-failed CODE" when it failed; or HELD and the holder's text."""
    if path in node.files:
        return 0, "HELD\n" + node.files[path], ""
    node.files[path] = details
    if not then:
        return 0, "TAKEN\n", ""
    code, out, _err = answer(node, then[0], tuple(then[1:]))
    return 0, "TAKEN\n" + out + (f"@then-failed {code}\n" if code else ""), ""


def _identity_create(node: Node, path: str, text: str) -> Answer:
    """identity._CREATE: WRITTEN where none was; else HELD and the one there."""
    if path in node.files:
        return 0, "HELD\n" + node.files[path], ""
    node.files[path] = text
    return 0, "WRITTEN\n", ""


def _lock_set_aside(node: Node, path: str, seen: str, _token: str) -> Answer:
    if path not in node.files:
        return 0, "GONE\n", ""
    if node.files[path] == seen:
        del node.files[path]
        return 0, "ASIDE\n", ""
    return 0, "CHANGED\n", ""


def _holds(node: Node, path: str, token: str) -> bool:
    return f'"token": "{token}"' in node.files.get(path, "")


def _lock_refresh(node: Node, path: str, token: str, details: str) -> Answer:
    if not _holds(node, path, token):
        return 0, "LOST\n", ""
    node.files[path] = details
    return 0, "OK\n", ""


def _lock_release(node: Node, path: str, token: str) -> Answer:
    if not _holds(node, path, token):
        return 0, "NOT-OURS\n", ""
    del node.files[path]
    return 0, "RELEASED\n", ""


def _lock_force(node: Node, path: str) -> Answer:
    node.files.pop(path, None)
    return 0, "", ""


def _audit_append(node: Node, path: str, text: str) -> Answer:
    node.files[path] = node.files.get(path, "") + text + "\n"
    return 0, "", ""


def _records(node: Node, directory: str) -> str | None:
    """What `for f in "$d"/*.json; do cat -- "$f"; echo; done` prints; None when the directory is absent."""
    inside = sorted(p for p in node.files if posixpath.dirname(p) == directory)
    if not inside and not any(p.startswith(directory + "/") for p in node.files):
        return None
    return "".join(node.files[p] + "\n" for p in inside if p.endswith(".json"))


def _store_write(node: Node, path: str, text: str) -> Answer:  # printf '%s' "$2", then mv over "$1"
    node.files[path] = text
    return 0, "", ""


def _store_read(node: Node, directory: str) -> Answer:
    text = _records(node, directory)
    return 0, ("MISSING\n" if text is None else "DIR\n" + text), ""


def _state_read(node: Node, nonce: str, managed: str, releases: str, baseline: str, lock_file: str) -> Answer:
    m = f"@@spark-deploy-state-{nonce}"
    out = [f"{m} containers"]
    ids = ps_ids(node, ["--all", "--quiet", "--no-trunc", "--filter", managed])
    out.append(json.dumps([node.containers[i].inspect() for i in ids], indent=4) if ids else "[]")
    out.append(f"{m} releases")
    text = _records(node, releases)
    out.append("MISSING" if text is None else "DIR\n" + text.rstrip("\n"))
    out.append(f"{m} window")
    out.append(node.files[baseline] if baseline in node.files else "MISSING")
    out.append(f"{m} lock")
    if lock_file and lock_file in node.files:
        out.append(node.files[lock_file])
    out.append(f"{m} end")
    return 0, "\n".join(out) + "\n", ""


def _list(node: Node, *filters: str) -> Answer:
    ids = ps_ids(node, ["--all", "--quiet", "--no-trunc", *filters])
    return 0, (json.dumps([node.containers[i].inspect() for i in ids], indent=4) if ids else "[]") + "\n", ""


def _recipe_or_named(node: Node, managed: str, recipe: str, *names: str) -> Answer:
    """containers.RECIPE_OR_NAMED: ours of the recipe (two label filters), then the containers holding the
    names, in one inspect (docker lists one found both ways twice; a name nobody holds is left out)."""
    ids = ps_ids(node, ["--all", "--quiet", "--no-trunc", "--filter", managed, "--filter", recipe])
    ids += [c.id for name in names for c in node.containers.values() if c.name == name]
    return 0, (json.dumps([node.containers[i].inspect() for i in ids], indent=4) if ids else "[]") + "\n", ""


def _remove(node: Node, container_id: str, seconds: str) -> Answer:
    stop(node, ["--time", seconds, container_id])
    return rm(node, ["--force", container_id])


def _image_inspect(node: Node, *refs: str) -> Answer:
    lines = []
    for ref in refs:
        image = node.image(ref)
        lines.append(json.dumps(image.inspect()) if image else "null")
    return 0, "".join(line + "\n" for line in lines), ""


HELP_ALL = SAMPLES.parent.parent / "data" / "vllm" / "serve-help-all.txt"  # vLLM 0.33.0's, as the stand-in prints it


def _image_help(node: Node, image: str = "") -> Answer:
    """facts/vllm.HELP_SCRIPT (`pin`'s read, and preflight's image_help fact): nothing to do on a peer (no
    argument) or for a cached image, else the image's `vllm serve --help=all`, or docker's words for an
    image the node does not hold (`--pull never`)."""
    if image in ("", vllm_facts.CACHED):
        return 0, ("@peer" if not image else vllm_facts.CACHED) + "\n", ""
    if node.image(image) is None:
        return 125, "", f"docker: Error response from daemon: No such image: {image}\n"
    return 0, "@via --help=all\n" + HELP_ALL.read_text(), ""


def _resolve(node: Node, _cache: str, repo: str, revision: str) -> Answer:
    return 0, f"SNAPSHOT {node.commit(repo, revision)}\n", ""


def _copy_read(node: Node, path: str) -> Answer:
    return 0, node.files[path] if path in node.files else "MISSING\n", ""


def _forget_secrets(node: Node, directory: str, recipe: str) -> Answer:
    for path in [p for p in node.files if posixpath.dirname(p) == directory and p.endswith(".env")
                 and (recipe == "*" or posixpath.basename(p) == f"{recipe}.env")]:
        del node.files[path]
    return 0, "", ""


def _watch_node(node: Node) -> Answer:
    """`watch`'s read of a node: MemAvailable and swap (a Spark idle, or serving the sim recipe at 0.7), the SM clock."""
    serving = any(c.running and c.ours for c in node.containers.values())
    name = "meminfo-sim-spark-serving-0.7.txt" if serving else "meminfo-sim-spark-idle.txt"
    return 0, (SAMPLES / name).read_text() + "@@gpu\n2405\n", ""


def _supervisor_state(node: Node, unit: str, state_file: str) -> Answer:
    """facts/supervisor.SCRIPT: systemd's word for the unit, then the state file (absent: nothing after)."""
    sd = node.systemd
    active = "active" if unit in sd.active else "failed" if unit in sd.failed else "inactive"
    text = node.files.get(state_file, "")
    return 0, f"@active\n{active}\n@state\n" + (text + "\n" if text else ""), ""


# (the constant the product sends, its handler); compared with `is`, first match wins
SCRIPTS = [
    (lock._CREATE, _lock_create), (lock._SET_ASIDE, _lock_set_aside), (lock._REFRESH, _lock_refresh),
    (lock._RELEASE, _lock_release), (lock._FORCE, _lock_force), (lock._READ, _cat), (identity._CREATE, _identity_create),
    (identity._READ, _cat), (audit._APPEND, _audit_append), (audit._READ, _cat),
    (store.READ, _store_read), (store._WRITE, _store_write), (state._READ, _state_read), (containers._LIST, _list),
    (containers.RECIPE_OR_NAMED, _recipe_or_named), (containers._REMOVE, _remove),
    (images.INSPECT_IMAGES, _image_inspect), (model_cache._RESOLVE, _resolve), (vllm_facts.HELP_SCRIPT, _image_help),
    (down._FORGET, _forget_secrets), (copies.READ, _copy_read), (facts.DRIVER, fact_driver),
    (watch_sample.NODE_SCRIPT, _watch_node), (supervisor_facts.SCRIPT, _supervisor_state),
    *systemd.SCRIPTS,
]


def answer(node: Node, script: str, args: tuple[str, ...]) -> Answer:
    for constant, handler in SCRIPTS:
        if script is constant:
            return handler(node, *args)
    raise unknown(f"script {script[:60]!r}...")
