"""`docker ...` argv parsed into operations on a node's model, answered as the engine prints them.

Only the subcommands and flags the product sends are known; anything else is an AssertionError naming it
(a new command must be taught here, never answered by accident).
"""

from __future__ import annotations

import json
import re

from .model import Container, Node, new_id

Answer = tuple[int, str, str]  # exit code, stdout, stderr

# `docker run` flags that take a value (as templates/docker-run.j2 renders them); the rest are booleans
_RUN_VALUED = {"--name", "--label", "--gpus", "--network", "--ipc", "--shm-size", "--restart", "--ulimit",
               "--device", "--volume", "--env", "--env-file"}
_RUN_BOOLEAN = {"--detach", "--privileged"}


def unknown(what: str) -> AssertionError:
    return AssertionError(f"the in-memory node does not know {what!r}: teach tests/memnode what the engine does")


def answer(node: Node, argv: list[str]) -> Answer:
    sub, rest = argv[1], argv[2:]
    if sub == "container" and rest[:1] == ["inspect"]:
        return inspect(node, rest[1:])
    if sub == "image" and rest[:1] == ["inspect"]:
        return image_field(node, rest[1:])
    if sub == "image" and rest[:1] == ["ls"]:
        return image_ls(node, rest[1:])
    handler = _HANDLERS.get(sub)
    if handler is None:
        raise unknown(" ".join(argv[:3]))
    return handler(node, rest)


def run(node: Node, args: list[str]) -> Answer:
    name, labels, env, restart = None, {}, {}, "no"
    i = 0
    while i < len(args) and args[i].startswith("--"):
        flag = args[i]
        if flag in _RUN_BOOLEAN:
            i += 1
            continue
        if flag not in _RUN_VALUED:
            raise unknown(f"docker run {flag}")
        value = args[i + 1]
        if flag == "--name":
            name = value
        elif flag == "--label":
            key, _, val = value.partition("=")
            labels[key] = val
        elif flag == "--env":
            key, _, val = value.partition("=")
            env[key] = val
        elif flag == "--restart":
            restart = value
        i += 2
    image_ref, serve_args = args[i], args[i + 1:]
    image = node.image(image_ref)
    if image is None:
        return 125, "", f"Unable to find image '{image_ref}' locally\ndocker: Error response from daemon: pull access denied"
    if name and node.container(name) is not None:
        held = node.container(name)
        return 125, "", (f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in '
                         f'use by container "{held.id}". You have to remove (or rename) that container to be able '
                         "to reuse that name.")
    container = Container(new_id(), name or f"memnode_{len(node.containers)}", image.id, list(serve_args),
                          {**image.labels, **labels}, env, restart=restart, entrypoint=image.entrypoint)
    node.containers[container.id] = container
    node.start(container)
    return 0, container.id + "\n", ""


_FORMATS = {"{{json .HostConfig.RestartPolicy}}": lambda data: json.dumps(data["HostConfig"]["RestartPolicy"])}


def inspect(node: Node, refs: list[str]) -> Answer:
    if refs[:1] == ["--format"]:  # only the templates the product sends; one line per container, as docker does
        template, refs = refs[1], refs[2:]
        if template not in _FORMATS:
            raise unknown(f"docker container inspect --format {template}")
        code, out, err = inspect(node, refs)
        return code, "".join(_FORMATS[template](d) + "\n" for d in json.loads(out)), err
    found, missing = [], []
    for ref in refs:
        c = node.container(ref)
        (found.append(c.inspect()) if c else missing.append(ref))
    err = "".join(f"Error: No such container: {ref}\n" for ref in missing)
    return (1 if missing else 0), json.dumps(found, indent=4) + "\n", err


def _no_such(ref: str) -> Answer:
    return 1, "", f"Error response from daemon: No such container: {ref}\n"


def start(node: Node, refs: list[str]) -> Answer:
    for ref in refs:
        c = node.container(ref)
        if c is None:
            return _no_such(ref)
        node.start(c)
    return 0, "".join(r + "\n" for r in refs), ""


def stop(node: Node, args: list[str]) -> Answer:
    refs = args[2:] if args[:1] == ["--time"] else args
    for ref in refs:
        c = node.container(ref)
        if c is None:
            return _no_such(ref)
        node.stop(c)
    return 0, "".join(r + "\n" for r in refs), ""


def rm(node: Node, args: list[str]) -> Answer:
    force = args[:1] in (["--force"], ["-f"])
    for ref in args[1:] if force else args:
        c = node.container(ref)
        if c is None:
            return _no_such(ref)
        if c.running and not force:
            return 1, "", f"Error response from daemon: cannot remove container \"/{c.name}\": container is running"
        node.stop(c, code=137 if c.running else c.exit_code)
        del node.containers[c.id]
    return 0, "".join(r + "\n" for r in args if not r.startswith("-")), ""


def rename(node: Node, args: list[str]) -> Answer:
    ref, new = args
    c = node.container(ref)
    if c is None:
        return 1, "", f"Error response from daemon: No such container: {ref}\n"
    held = node.container(new)
    if held is not None and held is not c:
        return 1, "", (f'Error response from daemon: Conflict. The container name "/{new}" is already in use by '
                       f'container "{held.id}". You have to remove (or rename) that container to be able to reuse '
                       "that name.\n")
    c.name = new
    return 0, "", ""


def update(node: Node, args: list[str]) -> Answer:
    if args[:1] != ["--restart"]:
        raise unknown(f"docker update {args[:1]}")
    c = node.container(args[2])
    if c is None:
        return _no_such(args[2])
    c.restart = args[1]
    return 0, args[2] + "\n", ""


def tag(node: Node, args: list[str]) -> Answer:
    source, ref = args
    image = node.image(source)
    if image is None:
        return 1, "", f"Error response from daemon: No such image: {source}\n"
    for other in node.images.values():
        if ref in other.tags:
            other.tags.remove(ref)
    image.tags.append(ref)
    return 0, "", ""


def rmi(node: Node, refs: list[str]) -> Answer:
    out = []
    for ref in refs:
        image = node.image(ref)
        if image is None:
            return 1, "", f"Error response from daemon: No such image: {ref}\n"
        users = [c for c in node.containers.values() if c.image == image.id]
        if ref in image.tags and len(image.tags) > 1:
            image.tags.remove(ref)
            out.append(f"Untagged: {ref}")
            continue
        if users:
            return 1, "", (f"Error response from daemon: conflict: unable to remove repository reference \"{ref}\" "
                           f"(must force) - container {users[0].id[:12]} is using its referenced image "
                           f"{image.id[7:19]}\n")
        out += [f"Untagged: {t}" for t in image.tags] + [f"Deleted: {image.id}"]
        del node.images[image.id]
    return 0, "".join(line + "\n" for line in out), ""


def image_field(node: Node, args: list[str]) -> Answer:
    if args[:2] != ["--format", "{{.Size}}"]:
        raise unknown(f"docker image inspect {args[:2]}")
    image = node.image(args[2])
    if image is None:
        return 1, "", f"Error: No such image: {args[2]}\n"
    return 0, f"{image.size}\n", ""


def image_ls(node: Node, args: list[str]) -> Answer:
    if args != ["--all", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"]:
        raise unknown(f"docker image ls {args}")
    lines = [f"{i.id} {t}" for i in node.images.values() for t in (i.tags or ["<none>:<none>"])]
    return 0, "".join(line + "\n" for line in lines), ""


def version(node: Node, args: list[str]) -> Answer:
    return 0, "20.10.24+dfsg1\n", ""


def human(size: int) -> str:
    """go-units HumanSize: decimal units, 4 significant digits."""
    units, value = ["B", "kB", "MB", "GB", "TB"], float(size)
    i = 0
    while value >= 1000 and i < len(units) - 1:
        value, i = value / 1000, i + 1
    return f"{value:.4g}{units[i]}"


def system(node: Node, args: list[str]) -> Answer:
    if args[:1] != ["df"] or args[1:] != ["--format", "{{.Type}}\t{{.TotalCount}}\t{{.Size}}\t{{.Reclaimable}}"]:
        raise unknown(f"docker system {args}")
    used = {c.image for c in node.containers.values()}
    total = sum(i.size for i in node.images.values())
    free = sum(i.size for i in node.images.values() if i.id not in used)
    rows = [("Images", len(node.images), total, free), ("Containers", len(node.containers), 0, 0),
            ("Local Volumes", 0, 0, 0), ("Build Cache", 0, 0, 0)]
    return 0, "".join(f"{k}\t{n}\t{human(s)}\t{reclaimable(s, r)}\n" for k, n, s, r in rows), ""


def reclaimable(size: int, free: int) -> str:
    """The Reclaimable column: with its share in percent whenever the type holds anything."""
    return f"{human(free)} ({free * 100 // size}%)" if size else human(free)


def ps_ids(node: Node, args: list[str]) -> list[str]:
    """`docker ps --all --quiet --no-trunc [--filter F]...`: label filters AND'ed, name filters OR'ed (as
    regular expressions against `/NAME`)."""
    flags = [a for a in args if a in ("--all", "--quiet", "--no-trunc")]
    if flags != ["--all", "--quiet", "--no-trunc"]:
        raise unknown(f"docker ps {args}")
    filters = [args[i + 1] for i, a in enumerate(args) if a == "--filter"]
    labels = [f[len("label="):] for f in filters if f.startswith("label=")]
    names = [f[len("name="):] for f in filters if f.startswith("name=")]
    if len(labels) + len(names) != len(filters):
        raise unknown(f"docker ps filter {filters}")
    out = []
    for c in node.containers.values():
        if names and not any(re.search(n, "/" + c.name) for n in names):
            continue
        if all(_label_matches(c, spec) for spec in labels):
            out.append(c.id)
    return out


def _label_matches(c: Container, spec: str) -> bool:
    key, eq, value = spec.partition("=")
    return key in c.labels and (not eq or c.labels[key] == value)


_HANDLERS = {"run": run, "start": start, "stop": stop, "rm": rm, "rename": rename, "update": update, "tag": tag,
             "rmi": rmi, "version": version, "system": system}
