"""The node side of `model pull`'s blob copy: three constant bash scripts and their pure parsers.

A Hugging Face cache is content-addressed: `blobs/<hash>` holds the bytes, `snapshots/<commit>/<file>` are
relative symlinks to them. So a copy moves blobs, never files: a blob a node holds and that hashes to its
name is not sent again, a damaged one is, and a half-arrived one (`<hash>.incomplete`) resumes where it
stopped. The snapshot links to a blob only after it hashed right (checks/blob_hash.py, the hash
`preflight --verify-blobs` uses), so nothing partial is ever reachable by its name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..checks.blob_hash import BLOB_DIGEST_SH, BLOB_KEEP_SH
from ..checks.pull_mark import PULL_MARK_SH
from ..transport.bulk_ssh import BULK_SSH_OPTS

# On the source. "$1" the HF cache, "$2" the repo id, "$3" the commit: one record per snapshot file.
LIST_SH = r'''cache=$1; repo=$2; commit=$3
root="$cache/hub/models--${repo//\//--}"; snap="$root/snapshots/$commit"
[ -d "$snap" ] || { printf 'absent\tno snapshot directory %s\n' "$snap"; exit 0; }
find "$snap" -mindepth 1 -type l -printf '%P\t%l\n' | sort | while IFS=$'\t' read -r name target; do
  blob=${target##*/}
  if [ -f "$root/blobs/$blob" ]; then size=$(stat -c %s -- "$root/blobs/$blob") || exit
  else size=-1; fi
  printf 'file\t%s\t%s\t%s\n' "$name" "$blob" "$size"
done'''

# On a target. "$1" the HF cache, "$2" the repo id, then the blob names: what the node holds of each.
SURVEY_SH = BLOB_DIGEST_SH + r'''
cache=$1; repo=$2; shift 2
blobs="$cache/hub/models--${repo//\//--}/blobs"
for b in "$@"; do
  if [ -f "$blobs/$b" ]; then
    sum=$(blob_digest "$blobs/$b" "$b") || sum=unreadable
    if [ "$sum" = "$b" ]; then printf 'have\t%s\n' "$b"; else printf 'damaged\t%s\t%s\n' "$b" "$sum"; fi
  elif [ -f "$blobs/$b.incomplete" ]; then printf 'partial\t%s\t%s\n' "$b" "$(stat -c %s -- "$blobs/$b.incomplete")"
  else printf 'missing\t%s\n' "$b"; fi
done'''

# On a target. "$1" HF cache, "$2" repo id, "$3" commit, "$4" the source's blobs dir, "$5" user@source's
# fabric address, "$6" its sshd port, "$7" streams, "$8" ref to write ("" = none); then `F blob size`
# (fetch) and `L name blob` (link) triples. Records: at/got/ok/refetch/bad/fail/linked, tab separated.
COPY_SH = BLOB_DIGEST_SH + "\n" + BLOB_KEEP_SH + "\n" + PULL_MARK_SH + r'''
blob_keeper && keep=python3 || keep=tee
cache=$1; repo=$2; commit=$3; srcblobs=$4; dest=$5; port=$6; streams=$7; ref=$8; shift 8
root="$cache/hub/models--${repo//\//--}"; blobs="$root/blobs"
mkdir -p -- "$blobs" || { printf 'fail\t-\ttarget\tcannot create %s\n' "$blobs"; exit 1; }
SSH=(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes ''' + BULK_SSH_OPTS + r''' -o ConnectTimeout=10
     -o ServerAliveInterval=2 -o ServerAliveCountMax=3 -p "$port" "$dest")
err=$("${SSH[@]}" "test -d $(printf %q "$srcblobs")" 2>&1 </dev/null); rc=$?
if [ $rc = 255 ]; then printf 'fail\t-\treach\t%s\n' "$(printf '%s' "$err" | tail -n 1)"; exit 1; fi
if [ $rc != 0 ]; then printf 'fail\t-\tsource\tno blobs directory %s\n' "$srcblobs"; exit 1; fi
reader() {  # offset blob: the source's command that sends the blob from that byte on, in 1 MiB reads (tail -c
  # +N writes 4 KiB at a time: at GB scale those writes into ssh cost the source more CPU than the cipher)
  printf 'dd if=%s bs=1M iflag=skip_bytes skip=%s status=none' "$(printf %q "$srcblobs/$2")" "$1"
}
fetch() {  # blob size: append what is missing to blob.incomplete, verify, then rename
  local b=$1 size=$2 part=$blobs/$1.incomplete have got sum e side why
  have=$(stat -c %s -- "$part" 2>/dev/null || echo 0)
  [ "$have" -le "$size" ] || { rm -f -- "$part"; have=0; }
  e=$(mktemp); rc=(0 0); rm -f "$e.sum"
  for try in 1 2 3 4 5; do  # a refused SSH start (the source's MaxStartups, under many streams): again
    [ "$have" = 0 ] || break
    if [ "$keep" = python3 ]; then  # a whole blob: hashed as it arrives, by the process that writes it
      "${SSH[@]}" "$(reader 0 "$b")" 2>"$e.s" </dev/null \
        | blob_keep "$b" "$size" "$part" > "$e.sum" 2>"$e"
      rc=("${PIPESTATUS[@]}")
    else  # no python3: tee into the hash
      "${SSH[@]}" "$(reader 0 "$b")" 2>"$e.s" </dev/null \
        | tee >(blob_sum "$b" "$size" > "$e.sum") | dd of="$part" oflag=append conv=notrunc bs=1M status=none 2>"$e"
      rc=("${PIPESTATUS[0]}" "${PIPESTATUS[2]}"); wait $!
    fi
    [ "${rc[0]}" = 255 ] && [ ! -s "$part" ] && grep -qE 'kex_exchange_identification|Connection (reset|closed) by' \
      "$e.s" || break
    sleep "0.$((RANDOM % 9 + 1))"
  done
  if [ "$have" = 0 ]; then :
  elif [ "$have" -lt "$size" ]; then  # resumed: the rest appended, the whole file hashed afterwards
    "${SSH[@]}" "$(reader "$have" "$b")" 2>"$e.s" </dev/null \
      | dd of="$part" oflag=append conv=notrunc bs=1M status=none 2>"$e"
    rc=("${PIPESTATUS[@]}")
  fi
  got=$(( $(stat -c %s -- "$part" 2>/dev/null || echo "$have") - have ))
  printf 'got\t%s\t%s\n' "$b" "$got"
  side=
  if [ "${rc[1]}" != 0 ]; then side=target; why=$(tail -n 1 "$e")  # the sink (or dd) could not write: the target's disk
  elif [ "${rc[0]}" = 255 ]; then side=link; why=$(tail -n 1 "$e.s")  # ssh itself: the way between the nodes
  elif [ "${rc[0]}" != 0 ]; then side=source; why=$(tail -n 1 "$e.s"); fi  # the reader on the source
  rm -f "$e" "$e.s"
  if [ -n "$side" ]; then rm -f "$e.sum"; printf 'fail\t%s\t%s\t%s\n' "$b" "$side" "$why"; return 1; fi
  if [ -s "$e.sum" ]; then sum=$(cat "$e.sum"); rm -f "$e.sum"
  else sum=$(blob_digest "$part" "$b") || { printf 'fail\t%s\ttarget\tcannot read %s\n' "$b" "$part"; return 1; }; fi
  if [ "$sum" != "$b" ]; then
    rm -f -- "$part"
    # resumed: the bytes this node already held may be the bad ones, so the whole blob once more from byte 0
    # before the source is blamed (a fresh fetch that fails too is the source's)
    if [ "$have" != 0 ]; then printf 'refetch\t%s\t%s\n' "$b" "$sum"; fetch "$b" "$size"; return; fi
    printf 'bad\t%s\t%s\n' "$b" "$sum"; return 1
  fi
  mv -f -- "$part" "$blobs/$b" && printf 'ok\t%s\n' "$b"
}
watch_parts() { while :; do for p in "$blobs"/*.incomplete; do [ -f "$p" ] && printf 'at\t%s\t%s\n' \
  "$(basename "$p" .incomplete)" "$(stat -c %s -- "$p" 2>/dev/null)"; done; sleep 0.5; done; }
watcher=; mark=
trap 'kill $watcher 2>/dev/null; [ -z "$mark" ] || rm -f -- "$mark"' EXIT
mark=$(pull_mark "$root")  # up and rollback name this running copy instead of calling its files leftovers
watch_parts & watcher=$!
links=(); failed=0; pids=()
reap() {  # until fewer than $1 fetches run, each ended one waited for by its PID. Not `wait -n`: bash 5.2
  # reaps a job that ends while it waits for another, and a later `wait -n` then never returns for it
  local p live
  while :; do
    live=()
    for p in "${pids[@]}"; do
      if kill -0 "$p" 2>/dev/null; then live+=("$p"); else wait "$p" || failed=1; fi
    done
    pids=("${live[@]}")
    [ "${#pids[@]}" -lt "$1" ] && return 0
    sleep 0.1
  done
}
while [ $# -ge 3 ]; do
  case $1 in
    F) [ $failed = 0 ] || { shift 3; continue; }  # after a failure: no new fetch, the running ones end
       fetch "$2" "$3" & pids+=($!)
       reap "$streams" ;;
    L) links+=("$2" "$3") ;;
  esac
  shift 3
done
reap 1
kill $watcher 2>/dev/null
[ $failed = 0 ] || exit 1
set -- "${links[@]}"
while [ $# -ge 2 ]; do
  name=$1; b=$2; shift 2
  [ -f "$blobs/$b" ] || { printf 'fail\t%s\ttarget\tblob missing when linking %s\n' "$b" "$name"; exit 1; }
  up=../..; d=$name; while [ "${d#*/}" != "$d" ]; do up=$up/..; d=${d#*/}; done
  link="$root/snapshots/$commit/$name"
  [ -L "$link" ] && [ "$(readlink -- "$link")" = "$up/blobs/$b" ] && continue  # already right: not touched
  mkdir -p -- "$(dirname -- "$link")" && ln -sfn -- "$up/blobs/$b" "$link" || exit
  printf 'relinked\t%s\n' "$name"
done
if [ -n "$ref" ]; then mkdir -p -- "$root/refs" && printf '%s' "$commit" > "$root/refs/$ref"; fi
printf 'linked\t%s\n' "$commit"'''


@dataclass(frozen=True)
class SnapFile:
    name: str
    blob: str
    size: int


@dataclass
class Listing:
    files: list[SnapFile] = field(default_factory=list)
    absent: str | None = None

    def blobs(self) -> dict[str, int]:
        return {f.blob: f.size for f in self.files}


def parse_listing(stdout: str) -> Listing:
    out = Listing()
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if kind == "absent":
            out.absent = rest
        elif kind == "file" and len(parts) == 3:
            out.files.append(SnapFile(parts[0], parts[1], int(parts[2])))
        elif line:
            raise ValueError(f"unexpected line {line!r}")
    return out


class Held(enum.StrEnum):
    HAVE = "have"  # present and hashes to its name: not sent
    DAMAGED = "damaged"  # present under its name, other bytes: sent again
    PARTIAL = "partial"  # an .incomplete: the rest is sent
    MISSING = "missing"


@dataclass(frozen=True)
class BlobState:
    held: Held
    offset: int = 0  # bytes of a partial already there
    digest: str = ""  # what a damaged one hashes to


def parse_survey(stdout: str) -> dict[str, BlobState]:
    out: dict[str, BlobState] = {}
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if kind == "have" and len(parts) == 1:
            out[parts[0]] = BlobState(Held.HAVE)
        elif kind == "damaged" and len(parts) == 2:
            out[parts[0]] = BlobState(Held.DAMAGED, digest=parts[1])
        elif kind == "partial" and len(parts) == 2:
            out[parts[0]] = BlobState(Held.PARTIAL, offset=int(parts[1]))
        elif kind == "missing" and len(parts) == 1:
            out[parts[0]] = BlobState(Held.MISSING)
        elif line:
            raise ValueError(f"unexpected line {line!r}")
    return out


def copy_args(listing: Listing, fetch: list[str]) -> list[str]:
    """The F/L triples COPY_SH takes: the blobs to fetch, then every snapshot link."""
    sizes = listing.blobs()
    args: list[str] = []
    for blob in fetch:
        args += ["F", blob, str(sizes[blob])]
    for f in listing.files:
        args += ["L", f.name, f.blob]
    return args
