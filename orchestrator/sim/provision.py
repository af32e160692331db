"""What `sim up` puts on the nodes and in the state dir: SSH trust, image load, inventory, recipe."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import docker.errors
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from .state import (FABRIC_IFACE, NODE_HF_CACHE, NODE_JIT_CACHE, NODE_STATE_DIR, NODE_UID, NODE_USER,
                    NODE_USER_GROUPS, NodeInfo, SimError)
from .node_roce import SPARK_GID_INDEX, SPARK_HCA

DEFAULT_RECIPE = Path(__file__).resolve().parent / "recipes" / "sim-tiny.yaml"


def generate_keypair(state: Path, comment: str) -> tuple[Path, bytes, bytes]:
    """ed25519 key pair in OpenSSH format at <state>/id_ed25519(.pub); returns (path, private, public)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH) + f" {comment}\n".encode()
    path = state / "id_ed25519"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left by an earlier run
    with os.fdopen(fd, "wb") as f:
        f.write(private)
    (state / "id_ed25519.pub").write_bytes(public)
    return path, private, public


def read_host_key(container) -> str:
    """'<type> <base64>' of the node's own ed25519 host key, read through the engine (a trusted channel).
    Read as an archive, not by `docker exec cat`: on a loaded engine an exec of a short-lived process
    once returned exit 0 and no output (the CI of 2026-12-03), which read as an empty key."""
    path = "/etc/ssh/ssh_host_ed25519_key.pub"
    try:
        chunks, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member is not None else None
            out = handle.read() if handle is not None else b""
    except (docker.errors.APIError, tarfile.TarError) as exc:
        raise SimError(f"cannot read host key of {container.name}: {exc}") from exc
    fields = out.decode(errors="replace").split()
    if len(fields) < 2 or fields[0] != "ssh-ed25519":
        raise SimError(f"unexpected host key on {container.name}: {out[:80]!r}")
    return f"{fields[0]} {fields[1]}"


def known_hosts_lines(nodes: list[NodeInfo], host_keys: dict[str, str], with_names: bool) -> str:
    lines = []
    for n in nodes:
        # the nodes know each other by name and by both addresses (an image copy goes over the fabric)
        names = ",".join(filter(None, (n.name, n.ip, n.fabric_ip))) if with_names else n.ip
        lines.append(f"{names} {host_keys[n.container]}\n")
    return "".join(lines)


def tar_files(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, (content, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


# The login user as DGX OS makes it, and what `spark-deploy setup` would leave: the dirs the tool writes
# (state, JIT cache, HF cache) owned by that user. Idempotent: a reset runs the same again.
_USER_SH = r"""
id -u "$1" >/dev/null 2>&1 || useradd -m -u "$2" -s /bin/bash -G "$3" "$1"
passwd -l "$1" >/dev/null  # no password: sudo asks for one it cannot get (`sudo -n` fails)
shift 3
for d in "$@"; do mkdir -p -- "$d"; done
"""


def prepare_node(container, private: bytes, public: bytes, node_known_hosts: str) -> None:
    """Node dirs, the DGX OS login user, authorized keys, and the node-to-node SSH identity + known_hosts
    (for root and for that user: an image copy runs as whoever the inventory logs in as)."""
    dirs = [NODE_HF_CACHE, NODE_JIT_CACHE, NODE_STATE_DIR]
    code, out = container.exec_run(["sh", "-c", _USER_SH, "sh", NODE_USER, str(NODE_UID),
                                    ",".join(NODE_USER_GROUPS), *dirs, "/root/.ssh"])
    if code != 0:
        raise SimError(f"making {NODE_USER} and the node dirs on {container.name} failed: "
                       f"{out.decode(errors='replace')}")
    data = tar_files({
        "authorized_keys": (public, 0o600),
        "id_ed25519": (private, 0o600),
        "id_ed25519.pub": (public, 0o644),
        "known_hosts": (node_known_hosts.encode(), 0o644),
    })
    home = f"/home/{NODE_USER}/.ssh"
    for ssh_dir in ("/root/.ssh", home):
        container.exec_run(["install", "-d", "-m", "700", ssh_dir])
        if not container.put_archive(ssh_dir, data):
            raise SimError(f"installing SSH files in {ssh_dir} on {container.name} failed")
    own_dirs(container, [home, *dirs])


def own_dirs(container, dirs: list[str]) -> None:
    """Give the login user what it writes (a reset that recreates a dir as root calls this again)."""
    code, out = container.exec_run(["chown", "-R", f"{NODE_USER}:{NODE_USER}", *dirs])
    if code != 0:
        raise SimError(f"chown {NODE_USER} {' '.join(dirs)} on {container.name} failed: "
                       f"{out.decode(errors='replace')}")


def load_image(container_name: str, image_id: str, tags: list[str]) -> str:
    """`docker save ID | docker exec -i NODE docker load`, tag it inside the node, and check that the
    node's image ID equals the host's. Saving by ID is immune to a concurrent rebuild moving a tag."""
    save = subprocess.Popen(["docker", "save", image_id], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    load = subprocess.Popen(["docker", "exec", "-i", container_name, "docker", "load"],
                            stdin=save.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert save.stdout is not None
    save.stdout.close()  # load owns the read end now
    _, load_err = load.communicate()
    save_err = save.stderr.read() if save.stderr else b""
    save.wait()
    if save.returncode != 0 or load.returncode != 0:
        raise SimError(f"docker save | docker load into {container_name} failed: "
                       f"save rc={save.returncode} {save_err.decode(errors='replace').strip()} "
                       f"load rc={load.returncode} {load_err.decode(errors='replace').strip()}")
    for tag in tags:
        res = subprocess.run(["docker", "exec", container_name, "docker", "tag", image_id, tag],
                             capture_output=True, text=True)
        if res.returncode != 0:
            raise SimError(f"docker tag {tag} on {container_name} failed: {res.stderr.strip()}")
    ref = tags[0] if tags else image_id
    got = subprocess.run(["docker", "exec", container_name, "docker", "image", "inspect",
                          "--format", "{{.Id}}", ref], capture_output=True, text=True)
    node_id = got.stdout.strip()
    if got.returncode != 0 or node_id != image_id:
        raise SimError(f"image {ref} on {container_name} has ID {node_id or got.stderr.strip()!r}, "
                       f"host has {image_id}")
    return node_id


def _yaml() -> YAML:
    y = YAML()
    y.indent(mapping=2, sequence=4, offset=2)
    y.default_flow_style = False
    return y


def write_inventory(path: Path, name: str, nodes: list[NodeInfo], key: Path, known_hosts: Path,
                    user: str = NODE_USER, roce: bool = False) -> None:
    """The inventory `sim up` writes: the DGX OS login by default; `user="root"` for what needs root;
    roce=True: profile roce on the Spark's HCA, at its RoCE v2 IPv4-mapped GID (index 3)."""
    doc = CommentedMap()
    doc["cluster"] = f"sim-{name}"
    doc["head"] = nodes[0].name
    doc["interconnect"] = (CommentedMap(profile="roce", socket_ifname=FABRIC_IFACE, hca=SPARK_HCA,
                                        gid_index=SPARK_GID_INDEX) if roce
                           else CommentedMap(profile="tcp", socket_ifname=FABRIC_IFACE))
    doc["ssh"] = CommentedMap(user=user, port=22, key=str(key.resolve()),
                              known_hosts=str(known_hosts.resolve()))
    doc["nodes"] = [
        CommentedMap(name=n.name, address=n.ip, fabric_ip=n.fabric_ip or n.ip, gpus=1, jit_cache=NODE_JIT_CACHE,
                     hf_cache=NODE_HF_CACHE, state_dir=NODE_STATE_DIR)
        for n in nodes
    ]
    buf = io.StringIO()
    _yaml().dump(doc, buf)
    path.write_text("# generated by spark-deploy sim up\n" + buf.getvalue())


def write_recipe(dest: Path, image_id: str, template: Path | None = None, nodes: int | None = None) -> Path | None:
    """Copy the sim recipe with image.id pinned to the loaded image's ID and tensor parallelism spanning
    all `nodes` (one simulated GPU each); None if no template exists."""
    src = template or Path(os.environ.get("SPARK_DEPLOY_SIM_RECIPE", DEFAULT_RECIPE))
    if not src.is_file():
        return None
    y = YAML()  # round-trip: keeps the lead's comments and order
    y.preserve_quotes = True
    doc = y.load(src.read_text())
    if not isinstance(doc, dict):
        raise SimError(f"{src} is not a YAML mapping")
    image = doc.get("image")
    if image is None:
        image = doc["image"] = CommentedMap()
    elif not isinstance(image, dict):
        raise SimError(f"{src}: 'image' is not a mapping")
    image["id"] = image_id
    if nodes is not None and isinstance(doc.get("vllm"), dict):
        doc["vllm"]["tensor_parallel_size"] = nodes
    with dest.open("w") as f:
        y.dump(doc, f)
    return src
