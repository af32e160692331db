"""THE blob hash, one bash function every script that judges a Hugging Face cache blob uses: preflight's
`--verify-blobs` scan and `model pull`'s check of a blob on arrival (and of one a node already holds).

LFS blobs are named by their sha256 (64 hex); small files by their git blob id,
sha1("blob <size>\\0" + content) (40 hex). A name that is neither cannot be checked ("unnamed").
"""

from __future__ import annotations

# `blob_digest FILE NAME` prints what FILE hashes to under the rule NAME's length implies; non-zero when
# the file cannot be read.
BLOB_DIGEST_SH = r'''blob_digest() {
  local f=$1 blob=$2 size sum
  size=$(stat -L -c %s -- "$f") || return
  case ${#blob} in
    64) sum=$(sha256sum < "$f") || return ;;
    40) sum=$({ printf 'blob %s\0' "$size"; cat -- "$f"; } | sha1sum) || return ;;
    *) sum=unnamed ;;
  esac
  printf '%s\n' "${sum%% *}"
}'''
