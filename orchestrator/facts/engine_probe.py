"""Run ON a node (`python3 -I -S -c THIS ...`, stdlib only): the docker facts of one gathering answered by the
Docker Engine API over its unix socket, in this one process instead of one `docker` CLI start per call.

Why: on the nodes each `docker` CLI start costs ~25 ms of CPU before it asks anything, and a gathering made
nine of them per node; this process costs about one. The answers are the Engine API's JSON, which is what
the CLI's inspect/info print, so each fact's own parser reads them unchanged (facts/engine.py).

argv: (fact name, op, argc, args...)*. stdout: each fact framed as facts/core.DRIVER frames a script's
output (header `RS F NAME CODE engine-api`), printed only once every answer is in. A socket that is absent
or refused (or DOCKER_HOST not a unix socket) prints one `@engine` frame with the reason and exits 3
before any fact is printed: the caller then runs the facts' CLI scripts instead. Any other failure of this
program exits 1 the same way; a request the engine answers with an error fails that fact only.
"""

import json
import os
import socket
import sys

SEP = "\x1e"
SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:@/")


class Refused(Exception):
    """The engine's socket could not be used at all: the CLI answers instead."""


class Failed(Exception):
    """The engine answered this fact with an error: the fact fails with this reason, as its CLI call would."""


def socket_path():
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return "/var/run/docker.sock"
    if host.startswith("unix://"):
        return host[len("unix://"):]
    raise Refused("DOCKER_HOST=%s is not a unix socket" % host)


def quote(text, safe=SAFE):
    return "".join(c if c in safe else "".join("%%%02X" % b for b in c.encode("utf-8")) for c in text)


_cache = {}


def get(path):
    """GET `path` (unversioned: the engine's own API version) -> (status, body). HTTP/1.0: one connection
    per request, the body delimited by the close (no chunked encoding to undo)."""
    if path in _cache:
        return _cache[path]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(60)
    try:
        try:
            conn.connect(socket_path())
        except OSError as exc:
            raise Refused("%s: %s" % (socket_path(), exc.strerror or exc))
        try:
            conn.sendall(("GET %s HTTP/1.0\r\nHost: docker\r\n\r\n" % path).encode("ascii"))
            chunks = []
            while True:
                chunk = conn.recv(262144)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError as exc:
            raise Failed("docker engine API %s: %s" % (path, exc))
    finally:
        conn.close()
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split(b" ")
    if len(status_line) < 2 or not status_line[1].isdigit():
        raise Failed("docker engine API %s: not an HTTP answer: %r" % (path, head[:80]))
    _cache[path] = (int(status_line[1]), body.decode("utf-8", "replace"))
    return _cache[path]


def message(status, body):
    """The engine's error body ({"message": ...}) as the CLI says it."""
    try:
        text = json.loads(body).get("message") or body.strip()
    except ValueError:
        text = body.strip()
    return "Error response from daemon: %s" % (text or "HTTP %d" % status)


def ok_json(path):
    status, body = get(path)
    if status != 200:
        raise Failed(message(status, body))
    return body.strip()


def filters(specs, **extra):
    """`--filter KEY=VALUE` arguments -> the engine's filters JSON (several values of a key: all must hold)."""
    out = {}
    for spec in list(specs) + ["%s=%s" % kv for kv in extra.items()]:
        key, _, value = spec.partition("=")
        out.setdefault(key, {})[value] = True
    return quote(json.dumps(out, separators=(",", ":")), SAFE - {"/", ":", "@"})


def container_ids(specs, all_states):
    query = "/containers/json?filters=%s%s" % (filters(specs), "&all=1" if all_states else "")
    return [c["Id"] for c in json.loads(ok_json(query))]


def op_info():
    """docker info --format '{{json .}}' (the CLI adds only its own ClientInfo)."""
    return ok_json("/info")


def op_server_version():
    """facts/basics._RAN of `docker version --format {{.Server.Version}}`: the exit code, then the version."""
    status, body = get("/version")
    if status != 200:
        return "1\n%s" % message(status, body)
    return "0\n%s" % json.loads(body)["Version"]


def op_image_disk(image):
    """facts/disk._DISK: free bytes under DockerRootDir (df's Available: f_bavail blocks of f_frsize), then
    the image's size or `absent`."""
    root = json.loads(ok_json("/info"))["DockerRootDir"]
    try:
        fs = os.statvfs(root)
    except OSError as exc:
        raise Failed("df: %s: %s" % (root, exc.strerror or exc))
    status, body = get("/images/%s/json" % quote(image))
    size = json.loads(body)["Size"] if status == 200 else "absent"
    return "%d\n%s" % (fs.f_bavail * fs.f_frsize, size)


def op_images(*refs):
    """docker_cli.images.INSPECT_IMAGES: each ref's inspect JSON on a line, `null` where there is none."""
    lines = []
    for ref in refs:
        status, body = get("/images/%s/json" % quote(ref))
        if status == 404:
            lines.append("null")
        elif status == 200:
            lines.append(body.strip())
        else:
            raise Failed(message(status, body))
    return "\n".join(lines)


def op_recipe_or_named(filter1, filter2, *names):
    """docker_cli.containers.RECIPE_OR_NAMED: the inspect array of every container (any state) matching
    both filters, then of each name; a name with no container is left out."""
    found = []
    for ref in container_ids([filter1, filter2], all_states=True) + list(names):
        status, body = get("/containers/%s/json" % quote(ref))
        if status == 200:
            found.append(json.loads(body))
        elif status != 404:
            raise Failed(message(status, body))
    return json.dumps(found)


def op_inspect_lines(*specs):
    """facts/replaced._SCRIPT: per running container matching every filter, its Name, Config.Labels and
    Args as JSON, tab-separated."""
    lines = []
    for ref in container_ids(specs, all_states=False):
        data = json.loads(ok_json("/containers/%s/json" % quote(ref)))
        lines.append("\t".join(json.dumps(v, separators=(",", ":"))
                               for v in (data.get("Name"), (data.get("Config") or {}).get("Labels"), data.get("Args"))))
    return "\n".join(lines)


OPS = {"info": op_info, "server_version": op_server_version, "image_disk": op_image_disk, "images": op_images,
       "recipe_or_named": op_recipe_or_named, "inspect_lines": op_inspect_lines}


def frame(name, code, out, err="", source=" engine-api"):
    return "%sF %s %d%s\n%s\n%sE\n%s" % (SEP, name, code, source, out, SEP, err)


def main(argv):
    out = []
    try:
        rest = list(argv)
        while rest:
            name, op, count = rest[0], rest[1], int(rest[2])
            args, rest = rest[3:3 + count], rest[3 + count:]
            try:
                out.append(frame(name, 0, OPS[op](*args)))
            except Failed as exc:
                out.append(frame(name, 1, "", str(exc)))
    except Refused as exc:
        sys.stdout.write(frame("@engine", 3, str(exc), source=""))
        return 3
    except Exception as exc:  # noqa: BLE001 - whatever this program could not do, the CLI does: said, never lost
        sys.stdout.write(frame("@engine", 1, "%s: %s" % (type(exc).__name__, exc), source=""))
        return 1
    sys.stdout.write("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
