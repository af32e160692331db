"""Leave the layers a target already holds out of a `docker save` stream, on the fly.

Runs on the source node between `docker save` and the link (`python3 -c SOURCE PLAN`), so the bytes it
drops never cross the fabric; stdlib only, because that is all a node is sure to have. Members are copied
as raw tar blocks (headers untouched), so what passes is byte for byte what `docker save` wrote, and the
manifest and config always pass: `docker load` then takes a layer it already holds (by chain ID) from its
own store and never opens that layer's tar.

Which directory holds which layer: Docker 20.10 names a layer's directory by its v1 ID, a digest of the
layer's `json` (written just before its `layer.tar`, as the archive is in name order) together with the
layer's chain ID and its parent's v1 ID (moby image/v1.CreateID). So at each `json` the filter recomputes
that digest for every chain ID the target holds; a match names the layer and its `layer.tar` is dropped.
A layer it cannot name is sent (never a wrong drop, only a larger stream). In the OCI layout of newer
engines a layer is `blobs/sha256/<DiffID>`, named by itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from json.decoder import scanstring

BLOCK = 512
JSON_LIMIT = 1 << 20  # a layer's v1 json is a few KB; anything larger is passed without being read
_V1_DIR = re.compile(r"^([0-9a-f]{64})/(json|layer\.tar)$")
_BLOB = re.compile(r"^blobs/sha256/([0-9a-f]{64})$")


def _top_items(text: str) -> list[tuple[str, str]]:
    """The top-level (key, raw value) pairs of a JSON object, values kept byte for byte as written."""
    decoder, i, items = json.JSONDecoder(), text.index("{") + 1, []
    while True:
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "}":
            return items
        key, i = scanstring(text, i + 1)
        while text[i] in " \t\r\n:":
            i += 1
        _, end = decoder.raw_decode(text, i)
        items.append((key, text[i:end]))
        i = end


def v1_id(items: list[tuple[str, str]], chain_id: str, parent: str, keep_os: bool) -> str:
    """moby's v1.CreateID: the digest of the layer's v1 config (without id and parent; without os for a
    layer below the top, whose os is set after its ID) plus layer_id and parent, keys sorted as Go does."""
    fields = {k: v for k, v in items if k not in ("id", "parent") and (keep_os or k != "os")}
    fields["layer_id"] = json.dumps(chain_id)
    if parent:
        fields["parent"] = json.dumps("sha256:" + parent)
    body = "{" + ",".join(json.dumps(k) + ":" + fields[k] for k in sorted(fields)) + "}"
    return hashlib.sha256(body.encode()).hexdigest()


def held_layer(raw: bytes, held_chains: list[str]) -> bool:
    """True when this v1 `json` is the layer of one of `held_chains` (its own `id` must be recomputed)."""
    try:
        items = _top_items(raw.decode())
        fields = dict(items)
        own = json.loads(fields["id"])
        parent = json.loads(fields.get("parent", '""'))
    except (ValueError, KeyError, IndexError, UnicodeDecodeError):
        return False
    return any(v1_id(items, chain, parent, keep_os) == own for chain in held_chains for keep_os in (False, True))


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # base-256, for sizes beyond 8 GB
        return int.from_bytes(field[1:], "big")
    digits = field.replace(b"\0", b" ").strip()
    return int(digits, 8) if digits else 0


def _pax_path(data: bytes) -> str | None:
    for record in data.split(b"\n"):
        _, _, pair = record.partition(b" ")
        key, _, value = pair.partition(b"=")
        if key == b"path":
            return value.decode(errors="replace")
    return None


class ArchiveFilter:
    """Push a `docker save` stream in with feed(); what comes out is the same archive without the layer
    tars of `held_chains` (20.10 layout) or of the blobs named in `held_diffs` (OCI layout)."""

    def __init__(self, held_chains: list[str], held_diffs: list[str]):
        self.held_chains = list(held_chains)
        self.held_blobs = {d.split(":", 1)[-1] for d in held_diffs}
        self.dropped_dirs: set[str] = set()
        self.left_out = 0  # members left out
        self.left_out_bytes = 0
        self._buf = bytearray()
        self._pending = bytearray()  # PAX / GNU long-name headers that belong to the next member
        self._pending_name: str | None = None
        self._remaining = 0  # data + padding of the current member still to come
        self._mode = "header"  # header | pass | drop | collect | trailer
        self._collected = bytearray()
        self._collect_head = b""
        self._collect_size = 0

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        view = memoryview(data)
        while view:
            if self._mode == "trailer":
                out += view
                break
            if self._mode in ("pass", "drop", "collect"):
                take = min(self._remaining, len(view))
                if self._mode == "pass":
                    out += view[:take]
                elif self._mode == "drop":
                    self.left_out_bytes += take
                else:
                    self._collected += view[:take]
                view, self._remaining = view[take:], self._remaining - take
                if self._remaining == 0:
                    out += self._member_done()
                continue
            need = BLOCK - len(self._buf)
            self._buf += view[:need]
            view = view[need:]
            if len(self._buf) == BLOCK:
                header, self._buf = bytes(self._buf), bytearray()
                out += self._header(header)
        return bytes(out)

    def _header(self, header: bytes) -> bytes:
        if header == b"\0" * BLOCK:
            self._mode = "trailer"
            return bytes(self._pending) + header
        size = _octal(header[124:136])
        padded = (size + BLOCK - 1) // BLOCK * BLOCK
        kind = header[156:157]
        if kind in (b"x", b"L"):  # describes the next member: keep it with that member
            self._start_collect(header, size, padded, kind.decode())
            return b""
        name = self._pending_name or self._name(header)
        self._pending_name = None
        head, self._pending = bytes(self._pending) + header, bytearray()
        self._remaining = padded
        if self._drops(name):
            self.left_out += 1
            self.left_out_bytes += len(head)
            self._mode = "drop" if padded else "header"
            return b""
        match = _V1_DIR.match(name)
        if match and match.group(2) == "json" and 0 < size <= JSON_LIMIT:
            self._start_collect(head, size, padded, "json:" + match.group(1))
            return b""
        self._mode = "pass" if padded else "header"
        return head

    def _start_collect(self, head: bytes, size: int, padded: int, what: str) -> None:
        self._collect_head, self._collect_size, self._collect_what = head, size, what
        self._collected = bytearray()
        self._remaining = padded
        self._mode = "collect"
        if not padded:
            self._member_done()

    def _member_done(self) -> bytes:
        mode, self._mode = self._mode, "header"
        if mode != "collect":
            return b""
        whole = self._collect_head + bytes(self._collected)
        data = bytes(self._collected[:self._collect_size])
        what = self._collect_what
        if what in ("x", "L"):
            self._pending += whole
            if what == "x":
                self._pending_name = _pax_path(data) or self._pending_name
            else:
                self._pending_name = data.rstrip(b"\0").decode(errors="replace")
            return b""
        if held_layer(data, self.held_chains):
            self.dropped_dirs.add(what.split(":", 1)[1])
        return whole

    @staticmethod
    def _name(header: bytes) -> str:
        name = header[0:100].split(b"\0", 1)[0].decode(errors="replace")
        if header[257:262] == b"ustar":
            prefix = header[345:500].split(b"\0", 1)[0].decode(errors="replace")
            if prefix:
                name = prefix + "/" + name
        return name.removeprefix("./")

    def _drops(self, name: str) -> bool:
        match = _V1_DIR.match(name)
        if match and match.group(2) == "layer.tar":
            return match.group(1) in self.dropped_dirs
        blob = _BLOB.match(name)
        return bool(blob) and blob.group(1) in self.held_blobs


def main() -> int:
    """stdin (a `docker save` stream) to stdout without the held layers; argv[-1]: {"chains": [...],
    "diffs": [...]}. Ends with one line on stderr: `left-out MEMBERS BYTES`."""
    plan = json.loads(sys.argv[-1])  # after a marker word (sdfilter) that names the process in `ps`
    archive = ArchiveFilter(plan.get("chains") or [], plan.get("diffs") or [])
    try:
        while True:
            chunk = os.read(0, 1 << 20)
            if not chunk:
                break
            out = memoryview(archive.feed(chunk))
            while out:
                out = out[os.write(1, out):]
    except BrokenPipeError:
        return 141  # the reader went away first: its failure is the one to report
    sys.stderr.write(f"left-out {archive.left_out} {archive.left_out_bytes}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
