"""THE blob hash, one bash function every script that judges a Hugging Face cache blob uses: preflight's
`--verify-blobs` scan and `model pull`'s check of a blob on arrival (and of one a node already holds).

LFS blobs are named by their sha256 (64 hex); small files by their git blob id,
sha1("blob <size>\\0" + content) (40 hex). A name that is neither cannot be checked ("unnamed").
"""

from __future__ import annotations

# `blob_sum NAME SIZE` hashes stdin under the rule NAME's length implies (so a copy can hash the bytes as they
# arrive); `blob_digest FILE NAME` hashes a file with it. Both print the digest; non-zero when unreadable.
BLOB_DIGEST_SH = r'''blob_sum() {
  local blob=$1 size=$2 sum
  case ${#blob} in
    64) sum=$(sha256sum) || return ;;
    40) sum=$({ printf 'blob %s\0' "$size"; cat; } | sha1sum) || return ;;
    *) cat >/dev/null; sum=unnamed ;;
  esac
  printf '%s\n' "${sum%% *}"
}
blob_digest() {
  local size
  size=$(stat -L -c %s -- "$1") || return
  blob_sum "$2" "$size" < "$1"
}'''
