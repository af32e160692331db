"""A Hugging Face Hub stand-in: the part of the Hub's HTTP API that huggingface_hub's `snapshot_download` uses.

`model pull` must be tested with the real huggingface_hub client (its resume, its cache layout, its error
types), so this serves what that client asks for, and nothing else:

- ``GET /api/models/{repo}/revision/{rev}``   the commit a branch/tag names, and the files (``siblings``)
- ``GET /api/models/{repo}/tree/{rev}[/path]`` the file listing with git blob ids and LFS sha256/size
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``   ``X-Repo-Commit``, ``ETag`` (git blob id) or ``X-Linked-Etag``
  + ``X-Linked-Size`` (LFS: sha256), ``Range: bytes=N-`` (how the client resumes) and ``bytes=N-M`` (how
  ``parse_safetensors_file_metadata`` reads a header) answered 206

Every body it sends is recorded (`served`: file, byte range, where the safetensors header ends), so a test
can tell header bytes from weight bytes. A `SparseFile` stands for a checkpoint too large to hold: a real
header, then zeros up to its size, produced only for the ranges asked.

Faults, each a real HTTP behaviour: a file that answers 500 (`fail`), a body cut off midway by closing the
connection (`drop`), a gated repo that answers 401 ``GatedRepo`` without the right bearer token (`token`).
It binds on all addresses so the simulated nodes reach it at their management gateway (`HF_ENDPOINT`).
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from . import fake_model


@dataclass(frozen=True)
class SparseFile:
    """A file of `size` bytes whose first bytes are `prefix` (a safetensors header) and the rest zeros:
    a 160 GB checkpoint's headers served without holding its weights. Its blob name is derived from the
    prefix and the size, not the content (nothing downloads one whole)."""

    prefix: bytes
    size: int

    def read(self, start: int, stop: int) -> bytes:
        head = self.prefix[start:stop]
        return head + bytes(max(0, stop - max(start, len(self.prefix))))


Body = bytes | SparseFile


def _size(data: Body) -> int:
    return data.size if isinstance(data, SparseFile) else len(data)


def _read(data: Body, start: int, stop: int) -> bytes:
    return data.read(start, stop) if isinstance(data, SparseFile) else data[start:stop]


def _blob(name: str, data: Body, git: bool = False) -> str:
    if isinstance(data, SparseFile):
        return fake_model.blob_name("git" if git else name, data.prefix + str(data.size).encode())
    return fake_model.blob_name("git" if git else name, data)


def header_end(name: str, data: Body) -> int:
    """Where a safetensors file's header ends (8 + n): bytes past it are weights. 0 for other files."""
    if not name.endswith(".safetensors"):
        return 0
    first = _read(data, 0, 8)
    return 8 + int.from_bytes(first, "little") if len(first) == 8 else 0


@dataclass(frozen=True)
class Served:
    """One body sent: `name`'s bytes [start, stop), its header ending at `header_end`."""

    name: str
    start: int
    stop: int
    header_end: int
    ranged: bool  # a closed Range (bytes=N-M), as a header read asks; an open one or none reads to the end

    @property
    def weight_bytes(self) -> int:
        return max(0, self.stop - max(self.start, self.header_end)) if self.header_end else 0


@dataclass
class HubRepo:
    """One model repo at one commit: file name -> bytes, and the refs that name the commit."""

    repo_id: str
    commit: str
    files: dict[str, Body]
    refs: tuple[str, ...] = ("main",)
    token: str | None = None  # set: the repo is gated and this bearer token is the one that opens it

    @classmethod
    def fake(cls, repo_id: str = fake_model.REPO_ID, variant: str = "", token: str | None = None) -> "HubRepo":
        """The simulated model (the same bytes and commit `sim up` installs), optionally under another id."""
        meta = fake_model.model_metadata(variant)
        return cls(repo_id, meta["revision"], fake_model.model_files(variant), token=token)

    def resolve(self, rev: str) -> str | None:
        return self.commit if rev in self.refs or rev == self.commit else None

    def lfs(self, name: str) -> bool:
        return name.endswith(".safetensors")  # as fake_model.blob_name names them


@dataclass
class HubFaults:
    """What goes wrong, and how often (a count of -1 = every time)."""

    fail: dict[str, int] = field(default_factory=dict)  # file -> how many GETs answer 500
    drop: dict[str, int] = field(default_factory=dict)  # file -> how many GETs close after half the body


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: the counters say what was asked
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    # ---- routing ----------------------------------------------------------------------------------
    def _route(self, head: bool) -> None:
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path)
        hub.count(self.command, path)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)(?:/(.*))?", path)
        if m:
            return self._api(m.group(1), m.group(2), m.group(3), m.group(4) or "")
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(m.group(1), m.group(2), m.group(3), head)
        self._error(404, "EntryNotFound", f"no route {path}")

    def _repo(self, repo_id: str, rev: str) -> tuple[HubRepo, str] | None:
        repo = self.server.hub.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}")
            return None
        if repo.token and self.headers.get("Authorization") != f"Bearer {repo.token}":
            self._error(401, "GatedRepo", f"Access to model {repo_id} is restricted. You must have access to it "
                                          "and be authenticated to access it. Please log in.")
            return None
        commit = repo.resolve(rev)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return repo, commit

    def _api(self, repo_id: str, kind: str, rev: str, sub: str) -> None:
        found = self._repo(repo_id, rev)
        if found is None:
            return
        repo, commit = found
        if kind == "revision":
            body = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": False,
                    "gated": "manual" if repo.token else False, "disabled": False,
                    "siblings": [{"rfilename": n} for n in sorted(repo.files)]}
        else:
            body = [self._entry(repo, n) for n in sorted(repo.files) if not sub or n.startswith(sub.rstrip("/") + "/")]
        self._json(body)

    @staticmethod
    def _entry(repo: HubRepo, name: str) -> dict:
        data = repo.files[name]
        entry = {"type": "file", "oid": _blob(name, data, git=True), "size": _size(data), "path": name}
        if repo.lfs(name):
            entry["lfs"] = {"oid": _blob(name, data), "size": _size(data), "pointerSize": 134}
        return entry

    def _resolve(self, repo_id: str, rev: str, name: str, head: bool) -> None:
        found = self._repo(repo_id, rev)
        if found is None:
            return
        repo, commit = found
        if name not in repo.files:
            self._error(404, "EntryNotFound", f"{name} does not exist in {repo_id}@{commit}")
            return
        hub, data = self.server.hub, repo.files[name]
        if not head and hub.take(hub.faults.fail, name):
            self._error(500, "", f"Internal Error (simulated) serving {name}")
            return
        size = _size(data)
        start, stop = 0, size
        ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if ranged:
            start = min(int(ranged.group(1)), size)
            stop = min(int(ranged.group(2)) + 1, size) if ranged.group(2) else size
        self.send_response(206 if ranged else 200)
        self.send_header("X-Repo-Commit", commit)
        if repo.lfs(name):
            self.send_header("X-Linked-Etag", f'"{_blob(name, data)}"')
            self.send_header("X-Linked-Size", str(size))
            self.send_header("ETag", f'"{_blob(name, data, git=True)}"')
        else:
            self.send_header("ETag", f'"{_blob(name, data)}"')
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        if head:
            return
        closed = bool(ranged and ranged.group(2))
        if hub.take(hub.faults.drop, name):
            half = start + (stop - start) // 2
            self.wfile.write(_read(data, start, half))
            self.wfile.flush()
            hub.add_sent(Served(name, start, half, header_end(name, data), closed))
            self.close_connection = True
            self.connection.shutdown(2)  # the peer sees the body end early: a dropped connection
            return
        for at in range(start, stop, 1 << 20):  # a sparse file's zeros are made a MiB at a time
            self.wfile.write(_read(data, at, min(stop, at + (1 << 20))))
        hub.add_sent(Served(name, start, stop, header_end(name, data), closed))

    # ---- answers ----------------------------------------------------------------------------------
    def _json(self, body) -> None:
        raw = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    def _error(self, status: int, code: str, message: str) -> None:
        raw = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: "HubStandIn"


class HubStandIn:
    """The server, its repos, its faults and what it was asked (`requests`: (method, path) -> count)."""

    def __init__(self, repos: list[HubRepo], faults: HubFaults | None = None, host: str = "0.0.0.0", port: int = 0):
        self.repos = {r.repo_id: r for r in repos}
        self.faults = faults or HubFaults()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.served: list[Served] = []  # every file body sent, with its range
        self._lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.hub = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def endpoint(self, host: str) -> str:
        """The HF_ENDPOINT a client at `host`'s side uses (e.g. the nodes' management gateway)."""
        return f"http://{host}:{self.port}"

    def count(self, method: str, path: str) -> None:
        with self._lock:
            self.requests[(method, path)] += 1

    def add_sent(self, served: Served) -> None:
        with self._lock:
            self.served.append(served)

    @property
    def sent(self) -> int:
        """Body bytes of files served, all requests."""
        return sum(s.stop - s.start for s in self.served)

    @property
    def weight_bytes(self) -> int:
        """Bytes sent from past a safetensors header (the weights), all requests."""
        return sum(s.weight_bytes for s in self.served)

    @property
    def downloaded(self) -> int:
        """Body bytes of whole-file reads (no Range, or an open one: a download and its resume), leaving
        out the closed ranges a header read asks for."""
        return sum(s.stop - s.start for s in self.served if not s.ranged)

    def take(self, table: dict[str, int], name: str) -> bool:
        """Use up one of a fault's occurrences for `name`: True when this request is to fail."""
        with self._lock:
            left = table.get(name, 0)
            if left == 0:
                return False
            if left > 0:
                table[name] = left - 1
            return True

    def gets(self, name: str) -> int:
        """How many GETs a file's resolve URL answered (any repo, any revision)."""
        return sum(c for (m, p), c in self.requests.items() if m == "GET" and "/resolve/" in p and p.endswith("/" + name))

    def __enter__(self) -> "HubStandIn":
        self._thread = threading.Thread(target=self._server.serve_forever, name="hub-standin", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
