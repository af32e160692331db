"""THE blob hash, one bash function every script that judges a Hugging Face cache blob uses: preflight's
`--verify-blobs` scan and `model pull`'s check of a blob on arrival (and of one a node already holds).

LFS blobs are named by their sha256 (64 hex); small files by their git blob id,
sha1("blob <size>\\0" + content) (40 hex). A name that is neither cannot be checked ("unnamed").

Which program hashes is chosen once per script on each node: the fastest present that gives the right
digests of a known input. On a CPU with SHA instructions (x86 sha_ni, Arm's crypto extensions on a Spark)
`openssl dgst` and Python's hashlib use them and coreutils' `sha256sum` does not: 500 MB took 0.31 s,
0.28 s and 1.76 s of CPU here, and on a copy the hash runs on every byte that arrives
(docs/performance.md, section 9).
"""

from __future__ import annotations

import enum


class Hasher(enum.StrEnum):
    """The programs `blob_hasher` tries, fastest first; what it sets BLOB_HASHER to."""

    OPENSSL = "openssl"
    PYTHON3 = "python3"
    COREUTILS = "coreutils"  # sha256sum / sha1sum: always there, the slowest


# The known input and its digests: a hasher is taken only if it gives both.
_PROBE = "abc"
_PROBE_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
_PROBE_SHA1 = "a9993e364706816aba3e25717850c26c9cd0d89d"

# `blob_sum NAME SIZE` hashes stdin under the rule NAME's length implies (so a copy can hash the bytes as they
# arrive); `blob_digest FILE NAME` hashes a file with it. Both print the digest; non-zero when unreadable.
# `blob_hasher` runs when the script starts (before any `&` or `>(...)`, so every blob of the run uses it).
BLOB_DIGEST_SH = r'''hash_with() {  # TOOL ALGO < bytes: the hex digest
  local out
  case $1 in
    openssl) out=$(openssl dgst "-$2" -r) || return ;;
    python3) out=$(python3 -c 'import hashlib, sys
h, b, f = hashlib.new(sys.argv[1]), bytearray(1 << 20), sys.stdin.buffer.raw
while n := f.readinto(b):
    h.update(memoryview(b)[:n])
print(h.hexdigest())' "$2") || return ;;
    *) out=$("$2sum") || return ;;
  esac
  printf '%s\n' "${out%% *}"
}
blob_hasher() {  # the first of openssl, python3, coreutils present that gives the right digests
  local tool
  for tool in ''' + " ".join(h.value for h in Hasher) + r'''; do
    [ "$tool" = coreutils ] || command -v "$tool" >/dev/null 2>&1 || continue
    [ "$(printf ''' + _PROBE + r''' | hash_with "$tool" sha256 2>/dev/null)" = ''' + _PROBE_SHA256 + r''' ] || continue
    [ "$(printf ''' + _PROBE + r''' | hash_with "$tool" sha1 2>/dev/null)" = ''' + _PROBE_SHA1 + r''' ] || continue
    BLOB_HASHER=$tool; return 0
  done
  BLOB_HASHER=coreutils
}
blob_sum() {
  local blob=$1 size=$2 sum
  case ${#blob} in
    64) sum=$(hash_with "$BLOB_HASHER" sha256) || return ;;
    40) sum=$({ printf 'blob %s\0' "$size"; cat; } | hash_with "$BLOB_HASHER" sha1) || return ;;
    *) cat >/dev/null; sum=unnamed ;;
  esac
  printf '%s\n' "$sum"
}
blob_digest() {
  local size
  size=$(stat -L -c %s -- "$1") || return
  blob_sum "$2" "$size" < "$1"
}
blob_hasher'''

# For a copy: `blob_keep NAME SIZE FILE` appends stdin to FILE and prints its digest under blob_sum's rule,
# hashing each chunk between reading and writing it. One python3 process in place of `tee >(blob_sum) | dd`:
# every byte crosses two pipes instead of six, and on a copy the CPU is the limit (docs/performance.md,
# section 9). Non-zero with one line on stderr (naming FILE and the cause) when FILE cannot be written.
# `blob_keeper` says whether python3 can (its hashlib gave the right digests); else the copy tees.
BLOB_KEEP_SH = r'''blob_keeper() {
  [ "$BLOB_HASHER" = python3 ] && return 0
  command -v python3 >/dev/null 2>&1 || return 1
  [ "$(printf ''' + _PROBE + r''' | hash_with python3 sha256 2>/dev/null)" = ''' + _PROBE_SHA256 + r''' ]
}
blob_keep() {
  python3 -c 'import hashlib, os, sys
name, size, path = sys.argv[2:5]  # after -c and the marker word
h = hashlib.sha256() if len(name) == 64 else hashlib.sha1() if len(name) == 40 else None
if len(name) == 40:
    h.update(b"blob %d\0" % int(size))
buf, src = bytearray(1 << 20), sys.stdin.buffer.raw
try:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while n := src.readinto(buf):
        view = memoryview(buf)[:n]
        if h:
            h.update(view)
        while view:
            view = view[os.write(fd, view):]
    os.close(fd)
except OSError as e:
    sys.exit(f"{path}: {e.strerror}")
print(h.hexdigest() if h else "unnamed")' sdkeep "$@"
}'''
