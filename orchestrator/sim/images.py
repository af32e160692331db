"""Build the simulated-cluster images from nothing on the host engine.

Two stages per image, each cached by a sha256 of its inputs:

1. base  ``spark-deploy-sim/<kind>-base:<hash12>`` -- ``debootstrap --variant=minbase`` of the package
   list, host keys and docs removed, streamed as a tar into ``docker import`` (the slow part, ~1 min).
2. final ``spark-deploy-sim/<kind>:<hash12>`` -- the base plus our small files (stubs, entrypoint,
   the ``standin`` package), added with ``put_archive`` into a never-started container and
   ``docker commit``-ed with ENTRYPOINT/CMD/ENV. Editing a stub or the stand-in only redoes this stage.

The mirror is read from the machine's apt sources and is deliberately NOT part of the hash.
What each kind contains (node, node-systemd, vllm) is in images_spec.py; the systemd node image is built
only when asked for (`ensure_images(systemd=True)`).
"""

from __future__ import annotations

import calendar
import concurrent.futures
import contextlib
import fcntl
import io
import json
import os
import re
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from .images_spec import (  # noqa: F401 - re-exported: callers and tests use images.<name>
    LABEL,
    NODE_PACKAGES,
    REPO_PREFIX,
    STANDIN_DIR,
    STRIP,
    SUITE,
    SYSTEMD_PACKAGES,
    VLLM_PACKAGES,
    VLLM_REFERENCE_TAG,
    ImageBuildError,
    ImageSpec,
    node_spec,
    node_systemd_spec,
    standin_files,
    vllm_sim_source,
    vllm_spec,
)

_S_IFLNK = 0o120000


def cache_root() -> Path:
    return Path(os.environ.get("SPARK_DEPLOY_SIM_CACHE", "/var/cache/spark-deploy-sim"))


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses for SUITE (deb822 sources first, then sources.list)."""
    candidates: list[str] = []
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", src.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
            if "deb" in fields.get("types", "").split() and SUITE in fields.get("suites", "").split():
                candidates += fields.get("uris", "").split()
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for lst in lists:
        if not lst.exists():
            continue
        for line in lst.read_text().splitlines():
            tokens = [t for t in re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()]
            if len(tokens) >= 3 and tokens[0] == "deb" and tokens[2] == SUITE:
                candidates.append(tokens[1])
    for uri in candidates:
        if uri.startswith(("http://", "https://", "file:/")):
            return uri.rstrip("/")
    raise ImageBuildError(
        f"no Debian mirror for '{SUITE}' found in /etc/apt/sources.list(.d); cannot debootstrap"
    )


@dataclass
class SimImages:
    node: docker.models.images.Image
    vllm: docker.models.images.Image
    built: list[str]  # tags that had to be (re)built in this call; empty = all cache hits
    node_systemd: docker.models.images.Image | None = None  # only when asked for (systemd=True)


def ensure_images(client: docker.DockerClient | None = None, console: Console | None = None,
                  *, systemd: bool = False) -> SimImages:
    """Return the node and vllm images (and with systemd=True the systemd node image), building whatever
    the cache lacks (the debootstraps in parallel). The systemd image is built only when asked for, so
    clusters of the proven docker-init node never pay for it."""
    client = client or docker.from_env(timeout=900)
    console = console or Console(stderr=True)
    specs = {"node": node_spec(), "vllm": vllm_spec()}
    if systemd:
        specs["node-systemd"] = node_systemd_spec()
    built: list[str] = []
    hits = {k: _get(client, s.tag) for k, s in specs.items()}
    missing = [s for k, s in specs.items() if hits[k] is None]
    if missing:
        with _build_lock():  # a concurrent run may be building the same thing: wait, then re-check
            hits = {k: _get(client, s.tag) for k, s in specs.items()}
            missing = [s for k, s in specs.items() if hits[k] is None]
            built = _build_missing(client, console, missing, hits)
    for s in specs.values():
        image = hits[s.kind]
        for ref in s.extra_tags:
            repo, _, tag = ref.rpartition(":")
            if ref not in image.tags:
                image.tag(repo, tag)
        hits[s.kind] = client.images.get(s.tag)
        _prune_stale(client, s)
    return SimImages(node=hits["node"], vllm=hits["vllm"], built=built, node_systemd=hits.get("node-systemd"))


def _build_missing(client: docker.DockerClient, console: Console, missing: list[ImageSpec],
                   hits: dict) -> list[str]:
    built: list[str] = []
    need_base = [s for s in missing if _get(client, s.base_tag) is None]
    if need_base:
        mirror = apt_mirror()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as progress:
            with concurrent.futures.ThreadPoolExecutor(len(need_base)) as pool:
                futures = [pool.submit(_build_base, client, s, mirror, progress) for s in need_base]
                for fut in futures:
                    fut.result()
        built += [s.base_tag for s in need_base]
    for s in missing:
        hits[s.kind] = _build_final(client, s)
        built.append(s.tag)
        console.print(f"[green]built[/] {s.tag} ({hits[s.kind].id[:19]})")
    return built


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _get(client: docker.DockerClient, ref: str):
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def _build_base(client: docker.DockerClient, spec: ImageSpec, mirror: str, progress: Progress) -> None:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    rootfs = root / f"rootfs-{spec.kind}-{spec.base_hash[:12]}"
    log_path = root / f"debootstrap-{spec.kind}.log"
    task = progress.add_task(f"{spec.kind}: debootstrap", total=None)
    remove_tree(rootfs)
    try:
        argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(spec.packages),
                SUITE, str(rootfs), mirror]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, bufsize=1)
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                if line.startswith(("I:", "W:", "E:")):
                    progress.update(task, description=f"{spec.kind}: {line[2:].strip()[:60]}")
            rc = proc.wait()
        if rc != 0:
            tail = "".join(log_path.read_text().splitlines(keepends=True)[-20:])
            raise ImageBuildError(f"debootstrap for {spec.kind} failed (rc={rc}); log {log_path}:\n{tail}")
        progress.update(task, description=f"{spec.kind}: trimming rootfs")
        _trim(rootfs, spec.strip)
        progress.update(task, description=f"{spec.kind}: docker import")
        labels = [f"LABEL {LABEL}.kind={spec.kind}-base", f"LABEL {LABEL}.hash={spec.base_hash}"]
        repo, _, tag = spec.base_tag.rpartition(":")
        client.api.import_image(src=_tar_stream(rootfs), repository=repo, tag=tag,
                                changes=labels, stream_src=True)
        if _get(client, spec.base_tag) is None:
            raise ImageBuildError(f"docker import did not produce {spec.base_tag}")
        progress.update(task, description=f"{spec.kind}: base imported", total=1, completed=1)
    finally:
        remove_tree(rootfs)


def _trim(rootfs: Path, strip: tuple[str, ...] = ()) -> None:
    for pattern in ("etc/ssh/ssh_host_*",):
        for key in rootfs.glob(pattern):
            key.unlink()
    for rel in STRIP:
        target = rootfs / rel
        if target.is_dir() and not target.is_symlink():
            for child in target.iterdir():
                remove_tree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        elif target.exists():
            target.unlink()
    for pattern in strip:  # the spec's own: the matches themselves go
        for target in sorted(rootfs.glob(pattern), reverse=True):
            if target.is_dir() and not target.is_symlink():
                remove_tree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
    for name in ("etc/hostname", "etc/machine-id"):
        p = rootfs / name
        if p.exists():
            p.write_text("")


def _tar_stream(rootfs: Path, chunk: int = 1 << 20) -> Iterator[bytes]:
    proc = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    err: list[bytes] = []
    t = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    t.start()
    while data := proc.stdout.read(chunk):
        yield data
    rc = proc.wait()
    t.join()
    if rc != 0:
        raise ImageBuildError(f"tar of {rootfs} failed: {b''.join(err).decode(errors='replace')}")


def _files_tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            content, mode = files[path]
            info = tarfile.TarInfo(path)
            if mode & 0o170000 == _S_IFLNK:  # a symlink (a masked or enabled unit)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, content.decode(), 0o777
                tar.addfile(info)
                continue
            info.size, info.mode = len(content), mode
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def _build_final(client: docker.DockerClient, spec: ImageSpec):
    repo, _, tag = spec.tag.rpartition(":")
    compile_argv = ["python3", "-m", "compileall", "-q", "--invalidation-mode", "checked-hash",
                    *spec.compile_dirs]
    container = client.containers.create(  # started only to byte-compile; the commit sets ENTRYPOINT
        spec.base_tag, entrypoint=compile_argv if spec.compile_dirs else list(spec.entrypoint),
        command=list(spec.cmd) or None, labels={f"{LABEL}.build": spec.kind},
    )
    try:
        if not container.put_archive("/", _files_tar(spec.files)):
            raise ImageBuildError(f"put_archive into the {spec.kind} build container failed")
        if spec.compile_dirs:
            container.start()
            code = container.wait(timeout=300).get("StatusCode")
            if code != 0:
                raise ImageBuildError(f"byte-compiling {', '.join(spec.compile_dirs)} in the {spec.kind} build "
                                      f"container exited {code}: {container.logs()[-2000:].decode(errors='replace')}")
        changes = [f"ENV {k}={v}" for k, v in spec.env.items()]
        changes += [f"ENTRYPOINT {json.dumps(list(spec.entrypoint))}",
                    f"LABEL {LABEL}.kind={spec.kind}", f"LABEL {LABEL}.hash={spec.final_hash}"]
        if spec.cmd:
            changes.append(f"CMD {json.dumps(list(spec.cmd))}")
        container.commit(repository=repo, tag=tag, changes=changes, pause=False)
    finally:
        container.remove(force=True)
    image = _get(client, spec.tag)
    if image is None:
        raise ImageBuildError(f"docker commit did not produce {spec.tag}")
    return image


STALE_AFTER_S = 3600  # another checkout/process may still be about to use a slightly older build


def _prune_stale(client: docker.DockerClient, spec: ImageSpec) -> None:
    """Untag builds of this kind that other inputs made, once they are an hour old, so rebuilds don't
    pile up (a final image is a few KB over its base; removing the last child also frees an untagged
    base). Images in use by a container are kept."""
    keep = {spec.tag, spec.base_tag}
    now = time.time()
    for repo in (f"{REPO_PREFIX}/{spec.kind}", f"{REPO_PREFIX}/{spec.kind}-base"):
        for image in client.images.list(name=repo):
            if now - _created(image) < STALE_AFTER_S:
                continue
            for ref in image.tags:
                if ref.startswith(repo + ":") and ref not in keep:
                    try:
                        client.images.remove(ref, noprune=False)
                    except docker.errors.APIError:
                        pass  # in use (e.g. a running cluster) or already gone: keep it


def _created(image) -> float:
    stamp = str(image.attrs.get("Created", ""))
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", stamp)
    if not m:
        return time.time()  # unknown age: treat as fresh
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))


def remove_tree(path: Path) -> None:
    """rm -rf that never crosses into a mount (debootstrap mounts proc/sys inside the target)."""
    if not path.exists() and not path.is_symlink():
        return
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f]
    for mnt in sorted((m for m in mounts if m == real or m.startswith(real + "/")), reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False)
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=True)
