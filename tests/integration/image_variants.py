"""Make a different image on one simulated node: the base plus one layer of random bytes.

Releases, rollback and prune tests need a second image that runs exactly like `vllm-sim:latest` but has its
own image ID and a known size. Building one would need a build context on the node; instead a never-started
container of the base gets a file of `extra_mb` MB (random, so no storage driver can dedupe or compress it)
and is committed. `docker commit` keeps the base's Entrypoint, Cmd and Env (checked below on every call).
Everything happens on the node's own dockerd through `cluster.exec`, as a real second image would be there.
"""

from __future__ import annotations

import json
import secrets

from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.images_spec import VLLM_TABLE_IN_IMAGE
from orchestrator.sim.state import SimError

MB = 1_000_000  # decimal, as `docker system df` counts
_KEPT = ("Entrypoint", "Cmd", "Env", "WorkingDir", "User")


def _inspect(cluster: SimCluster, node: int | str, ref: str) -> dict:
    result = cluster.exec(node, ["docker", "image", "inspect", "--format", "{{json .}}", ref], check=False)
    if result.code != 0:
        raise SimError(f"node {node}: no image {ref!r}: {(result.stderr or result.stdout).strip()}")
    return json.loads(result.stdout)


def derive_image(cluster: SimCluster, node: int | str, base_ref: str, new_tag: str, extra_mb: int = 16) -> str:
    """Commit `base_ref` plus one layer of `extra_mb` MB of random bytes as `new_tag` on `node`; its image ID.

    The temporary container and blob file are removed whatever happens. Raises SimError if the base is
    missing or the new image does not keep the base's run configuration or has other than one extra layer.
    """
    if extra_mb < 1:
        raise ValueError(f"extra_mb must be at least 1, not {extra_mb}")
    base = _inspect(cluster, node, base_ref)
    token = secrets.token_hex(6)
    blob = f"/tmp/sd-variant-{token}.bin"
    cluster.exec(node, ["sh", "-c", 'head -c "$1" /dev/urandom > "$2"', "sh", str(extra_mb * MB), blob])
    container = None
    try:
        container = cluster.exec(node, ["docker", "create", base_ref]).stdout.strip()  # no options: they would be committed
        cluster.exec(node, ["docker", "cp", blob, f"{container}:/sd-variant-{token}.bin"])
        image_id = cluster.exec(node, ["docker", "commit", container, new_tag]).stdout.strip()
    finally:
        if container:
            cluster.exec(node, ["docker", "rm", "--force", container], check=False)
        cluster.exec(node, ["rm", "-f", blob], check=False)
    made = _inspect(cluster, node, new_tag)
    if made["Id"] != image_id or image_id == base["Id"]:
        raise SimError(f"node {node}: commit printed {image_id!r}, {new_tag} is {made['Id']}, base is {base['Id']}")
    changed = [k for k in _KEPT if (made["Config"] or {}).get(k) != (base["Config"] or {}).get(k)]
    if changed:
        raise SimError(f"node {node}: docker commit changed {', '.join(changed)} of {base_ref}")
    layers = len(base["RootFS"]["Layers"]), len(made["RootFS"]["Layers"])
    if layers[1] != layers[0] + 1:
        raise SimError(f"node {node}: {new_tag} has {layers[1]} layers, base {base_ref} has {layers[0]} (want +1)")
    return image_id


STANDIN_OPTIONS = f"/{VLLM_TABLE_IN_IMAGE}/options_table.py"  # the table the stand-in's parser is built from


def derive_without_choice(cluster: SimCluster, node: int | str, base_ref: str, new_tag: str,
                          flag: str, choice: str) -> str:
    """An older build of the stand-in: the same image, but its parser lacks `choice` for `flag`.

    Real vLLM images differ this way (a backend added in a later release); the preflight flag check must
    judge the recipe against the parser of the image it will run, not against the version we know.
    The patched options table is written by the image's own sed and copied into a never-started container.
    """
    _inspect(cluster, node, base_ref)
    token = secrets.token_hex(6)
    patched = f"/tmp/sd-options-{token}.py"
    program = f"/^ *(('{flag}',)/ s/'{choice}', //"  # one sed argument, never seen by a shell
    cluster.exec(node, ["sh", "-c", 'docker run --rm --network none --entrypoint sed "$1" "$2" "$3" > "$4"',
                        "sh", base_ref, program, STANDIN_OPTIONS, patched])
    text = cluster.exec(node, ["cat", patched]).stdout
    line = next((ln for ln in text.splitlines() if ln.lstrip().startswith(f"(('{flag}',)")), None)
    if line is None or f"'{choice}'" in line:
        raise SimError(f"node {node}: could not drop {choice!r} from {flag} in {STANDIN_OPTIONS}")
    container = None
    try:
        container = cluster.exec(node, ["docker", "create", base_ref]).stdout.strip()
        cluster.exec(node, ["docker", "cp", patched, f"{container}:{STANDIN_OPTIONS}"])
        image_id = cluster.exec(node, ["docker", "commit", container, new_tag]).stdout.strip()
    finally:
        if container:
            cluster.exec(node, ["docker", "rm", "--force", container], check=False)
        cluster.exec(node, ["rm", "-f", patched], check=False)
    return image_id


def derive_by_script(cluster: SimCluster, node: int | str, base_ref: str, new_tag: str, script: str,
                     *args: str) -> str:
    """An upstream change to the image's files: `script` (sh, its args "$1"..) run once in a container of
    `base_ref` with no network, the result committed as `new_tag` with the base's Entrypoint put back (the
    script's `sh` would otherwise be committed as the entrypoint); its image ID. E.g. a file renamed, or
    one whose bytes changed, as a vLLM release does to a file a community overlay replaces."""
    base = _inspect(cluster, node, base_ref)
    container = None
    try:
        container = cluster.exec(node, ["docker", "run", "-d", "--network", "none", "--entrypoint", "sh", base_ref,
                                        "-c", script, "sh", *args]).stdout.strip()
        code = cluster.exec(node, ["docker", "wait", container]).stdout.strip()
        if code != "0":
            logs = cluster.exec(node, ["docker", "logs", container], check=False)
            raise SimError(f"node {node}: the variant script exited {code}: {logs.stdout}{logs.stderr}")
        entry = json.dumps((base["Config"] or {}).get("Entrypoint"))
        image_id = cluster.exec(node, ["docker", "commit", "--change", f"ENTRYPOINT {entry}", container,
                                       new_tag]).stdout.strip()
    finally:
        if container:
            cluster.exec(node, ["docker", "rm", "--force", container], check=False)
    made = _inspect(cluster, node, new_tag)
    changed = [k for k in _KEPT if (made["Config"] or {}).get(k) != (base["Config"] or {}).get(k)]
    if made["Id"] != image_id or changed:
        raise SimError(f"node {node}: {new_tag} is {made['Id']} (commit said {image_id}); changed: {changed}")
    return image_id
