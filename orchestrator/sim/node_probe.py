"""The condition probe that runs INSIDE a simulated node: one `python3` process, stdlib only.

Its source is sent with `docker exec NODE python3 -c SOURCE PATHS_JSON` (condition.probe_argv), so it runs
on the node's own Python (Debian's 3.11) and imports nothing of the project. It prints one line per
value, "ASPECT<TAB>value", which condition.parse reads. It replaced a POSIX sh script that forked about a
hundred processes (three docker CLIs among them) per probe; the reset probes every node two to four times
per test, so the probe's cost was a large part of the suite's CPU (docs/performance.md). Read only; every
wait is bounded. What it looks at, and why each wait exists, is said at each function.
"""

import glob
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import time

DOCKER_SOCK = "/var/run/docker.sock"
# a node's last image command can outlive the controller's side of an interrupted `up` by a moment
IMAGE_COMMAND = re.compile(r"^docker (load|save|image|rmi|tag|pull|import)")
COPY_MARKERS = ("docker save", "docker load", "sdsend", "sdrecv", "sdlate", "dd bs=1M", "http.server", "earlyoom",
                "ssh ")  # sdlate: a cancelled image copy's remover (docker_cli/image_sync.LATE_REMOVER)


def docker_api(method: str, path: str, timeout: float = 20.0):
    """One call of the node's engine API (what the docker CLI asks, without starting a Go binary). HTTP/1.0
    on the unix socket: the engine answers unchunked and closes (http.client's imports cost more than this)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(DOCKER_SOCK)
        sock.sendall(f"{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n".encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or not status[1].startswith(b"2"):
        raise OSError(f"{method} {path}: {head[:40]!r} {body[:300]!r}")
    return json.loads(body) if body.strip().startswith((b"{", b"[")) else body.decode()


def docker_get(path: str, timeout: float = 20.0):
    return docker_api("GET", path, timeout)


def processes() -> list[tuple[int, str, str]]:
    """(pid, comm, args) of every process but this one; args as ps shows them (argv joined by spaces)."""
    out = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                args = fh.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/comm") as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        out.append((int(d), comm, args))
    return out


def sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def file_sha16(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return sha16(fh.read())
    except OSError:
        return ""


def read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def walk(root: str, depth: int) -> list[str]:
    """Paths under root down to `depth` levels (find -mindepth 1 -maxdepth depth), not following links."""
    out = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return out
    for e in entries:
        out.append(e.path)
        if depth > 1 and e.is_dir(follow_symlinks=False):
            out.extend(walk(e.path, depth - 1))
    return out


def owner(path: str, follow: bool = True) -> str:
    """`U:G mode` of path, as `stat [-L] -c '%U:%G %a'` prints it; '' if absent."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return ""
    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} {stat.S_IMODE(st.st_mode):o}"


def tree_digest(root: str) -> str:
    """Two digests of a tree: its listing (type, path, link target, size, mode) and its files' contents."""
    listing, contents = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in [None, *sorted(dirnames), *sorted(filenames)]:
            path = dirpath if name is None else os.path.join(dirpath, name)
            if name is None and dirpath != root:
                continue  # a directory is listed once, by its parent
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rel = os.path.relpath(path, root)
            kind = "l" if stat.S_ISLNK(st.st_mode) else "d" if stat.S_ISDIR(st.st_mode) else "f"
            link = os.readlink(path) if kind == "l" else ""
            listing.append(f"{kind} {rel} {link} {st.st_size} {stat.S_IMODE(st.st_mode):o}")
            if kind == "f":
                contents.append(f"{file_sha16(path)} {rel}")
    if not listing:
        return "-"
    return sha16("\n".join(sorted(listing)).encode()) + "-" + sha16("\n".join(sorted(contents)).encode())


def probe(paths: dict) -> list[tuple[str, str]]:
    lines: list[tuple[str, str]] = []

    def p(aspect: str, value: str) -> None:
        lines.append((aspect, " ".join(value.split("\n")).strip()))

    deadline = time.monotonic() + 15  # a node's last image command: let it end before looking (bounded)
    while time.monotonic() < deadline and any(IMAGE_COMMAND.match(a) for _, _, a in processes()):
        time.sleep(0.1)

    up = False
    for attempt in range(5):  # a loaded host can fail one ping: down only after five, a second apart
        try:
            docker_get("/_ping", timeout=10)
            up = True
            break
        except OSError:
            if attempt < 4:
                time.sleep(1)
    if up:
        p("dockerd", "up")
        for c in docker_get("/containers/json?all=1"):
            names = ",".join(n.lstrip("/") for n in c.get("Names") or [])
            p("containers", f"{c['Id']} {names} {c.get('Image', '')}")
        for i in sorted({i["Id"] for i in docker_get("/images/json?all=1")}):
            p("images", i)
    else:
        p("dockerd", "down")

    procs = processes()
    p("sshd", "up" if any(comm == "sshd" for _, comm, _ in procs) else "down")
    key = (read("/etc/ssh/ssh_host_ed25519_key.pub") or "").split()
    p("host-key", key[1] if len(key) > 1 else "")

    for d in sorted(glob.glob("/sys/class/net/*")):
        n = os.path.basename(d)
        if n in ("lo", "docker0") or n.startswith(("veth", "br-")):
            continue
        p("interfaces", n)
        p("mtu", f"{n} {(read(d + '/mtu') or '').strip()}")
    for line in run(["tc", "qdisc", "show"]).splitlines():
        dev = re.search(r" dev (\S+)", line)
        if dev and dev.group(1) != "lo" and re.search(r"qdisc (netem|tbf|htb|prio) ", line):
            p("qdisc", f"{dev.group(1)}: {line.strip()}")
    default = []
    for line in run(["ip", "-4", "route", "show"]).splitlines():
        line = " ".join(line.split())
        if line.startswith(("blackhole ", "unreachable ")):
            p("routes", line)
        elif line.startswith("default "):
            default.append(line)
    p("routes", "default: " + "; ".join(default))
    rules = [re.sub(r"\[[0-9]*:[0-9]*\]", "", r) for r in (run(["iptables-save"]) + run(["ip6tables-save"])).splitlines()
             if not r.startswith("#") and "127.0.0.11" not in r]
    p("iptables", sha16(("\n".join(sorted(rules)) + "\n").encode()))

    p("gpu", file_sha16(paths["GPU_FILE"]))
    total = next((" ".join(line.split()) for line in (read("/proc/meminfo") or "").splitlines()
                  if line.startswith("MemTotal:")), "")
    p("meminfo", f"{(read(paths['MEMINFO_SPEC']) or '').strip()} {total}")
    fill = read(paths["FILL_SPEC"])
    if fill is not None:
        p("fill-disk", f"spec {fill.strip()}")
    if os.path.ismount(paths["DOCKER_TMP"]):
        p("fill-disk", f"tmpfs over {paths['DOCKER_TMP']}")
    if os.path.lexists(paths["UNAME_WRAPPER"]):
        p("kernel", f"{paths['UNAME_WRAPPER']} fakes uname -r")
    for f in glob.glob("/run/sim-port-*.pid"):
        p("ports", f.removeprefix("/run/sim-port-"))
    for f in glob.glob("/run/sim-mtu-*"):
        p("mtu", "saved " + f.removeprefix("/run/sim-mtu-"))

    jit = paths["NODE_JIT_CACHE"]
    if os.path.islink(jit):
        p("jit", f"symlink to {os.readlink(jit)}")
    else:
        for path in sorted(walk(jit, 2))[:20]:
            p("jit", path)
    p("jit", f"owner {owner(jit)}")
    for path in walk(paths["SHARED_MOUNT"], 1):
        p("shared", path)
    p("model", tree_digest(paths["MODEL_DIR"]))
    state = paths["NODE_STATE_DIR"]
    for path in walk(state, 2):
        p("state", path)
    p("state", f"owner {owner(state, follow=False)}")
    for path in walk(paths["UNIT_DIR"], 2):
        p("units", path)
    for f in sorted(glob.glob("/etc/sudoers.d/*")):
        p("sudoers", f"{f} {file_sha16(f)}")
    p("roce", f"spec {file_sha16(paths['ROCE_SPEC']) or 'absent'}")
    for path in ("/sys/class/infiniband", "/dev/infiniband"):
        if os.path.exists(path):
            p("roce", path)
    if shutil.which("systemctl"):
        p("system", run(["systemctl", "is-system-running"]).strip())
    for f in sorted(glob.glob("/root/.ssh/*") + glob.glob("/home/*/.ssh/*")):
        p("ssh-trust", f"{f} {file_sha16(f)}")
    for pid, _, args in procs:
        if "grep" in args or " sh -c " in args:
            continue
        if any(m in args for m in COPY_MARKERS):
            p("processes", f"{pid} {args}")
    return lines


CLEARED = "=cleared"  # the line between the condition as found and as left after clear()


def _empty_owned(path: str, user: str) -> None:
    """path a local directory again (a symlink to it removed), emptied, and user's (chown -R)."""
    if os.path.islink(path):
        os.unlink(path)
    os.makedirs(path, exist_ok=True)
    for e in os.scandir(path):
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path)
        else:
            os.unlink(e.path)
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def clear(paths: dict, want: dict, seen: dict[str, list[str]]) -> list[str]:
    """Undo what every test leaves by doing its job, where `seen` (the probe's values by aspect) differs
    from `want` (the baseline's): containers, images the baseline lacks, the state dir and the JIT cache
    as made. The errors, one per step that failed (each step runs whatever failed before)."""
    errors = []

    def step(aspect, fn):
        if sorted(seen.get(aspect, [])) == sorted(want.get(aspect, [])):
            return
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - named, and the reset looks again
            errors.append(f"clearing {aspect}: {exc}")

    def containers():
        for c in docker_get("/containers/json?all=1"):
            docker_api("DELETE", f"/containers/{c['Id']}?force=1")

    def images():
        keep = set(want.get("images") or [])
        extra = [i["Id"] for i in docker_get("/images/json?all=1") if i["Id"] not in keep]
        for image in extra:
            try:
                docker_api("DELETE", f"/images/{image}?force=1")
            except OSError as exc:
                if "404" not in str(exc):  # gone with a parent already
                    raise
        if extra:
            docker_api("POST", "/images/prune")

    step("containers", containers)
    step("images", images)
    step("state", lambda: _empty_owned(paths["NODE_STATE_DIR"], want["user"]))
    step("jit", lambda: _empty_owned(paths["NODE_JIT_CACHE"], want["user"]))
    return errors


def main(argv: list[str]) -> int:
    """argv: PATHS_JSON [WANT_JSON]. With WANT_JSON (the baseline's values of the residue aspects, and the
    login user): the condition, the CLEARED line, clear()'s errors as `!<TAB>message`, the condition again."""
    paths = json.loads(argv[1])
    found = probe(paths)
    out = [f"{a}\t{v}" for a, v in found]
    if len(argv) > 2:
        seen: dict[str, list[str]] = {}
        for aspect, value in found:
            seen.setdefault(aspect, []).append(value)
        errors = clear(paths, json.loads(argv[2]), seen)
        out += [CLEARED, *(f"!\t{e}" for e in errors), *(f"{a}\t{v}" for a, v in probe(paths))]
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
