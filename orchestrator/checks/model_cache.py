"""Which model revision a node's Hugging Face cache holds: one command plus a pure parser.

A release records the commit each node resolves the recipe's revision to, so `rollback` can refuse when
a node's cache moved on (`refs/main` now names another commit) or the snapshot was deleted.
"""

from __future__ import annotations

import posixpath
import re

from ..transport.node import NodeConnection

_COMMIT = re.compile(r"^[0-9a-f]{40}$")

# "$1" repo dir in the cache, "$2" revision. Prints the commit, then whether its snapshot exists.
_RESOLVE = r'''d="$1"; rev="$2"
if [ ! -d "$d" ]; then echo "NOREPO"; exit 0; fi
if [ -f "$d/refs/$rev" ]; then commit="$(cat -- "$d/refs/$rev")"; else commit="$rev"; fi
if [ -d "$d/snapshots/$commit" ]; then echo "SNAPSHOT $commit"; else echo "NOSNAPSHOT $commit"; fi'''


# A bash fragment for node scripts that read a snapshot: with $cache, $repo (a repo id) and $rev set, it sets
# $snap to the snapshot directory, or prints an `absent<TAB>why` record and exits 0 (the revision is a ref
# in refs/, or a 40-hex commit).
SNAPSHOT_SH = r'''root="$cache/hub/models--${repo//\//--}"
if [ -f "$root/refs/$rev" ]; then commit=$(cat -- "$root/refs/$rev")
elif [[ $rev =~ ^[0-9a-f]{40}$ ]]; then commit=$rev
else printf 'absent\tno refs/%s in %s\n' "$rev" "$root"; exit 0; fi
snap="$root/snapshots/$commit"
[ -d "$snap" ] || { printf 'absent\tno snapshot directory %s\n' "$snap"; exit 0; }'''


def repo_dir(hf_cache: str, repo: str) -> str:
    return posixpath.join(hf_cache, "hub", "models--" + repo.replace("/", "--"))


def parse_revision(stdout: str) -> str:
    """Pure: the commit the cache resolves the revision to, or "" when the node does not hold it."""
    words = stdout.split()
    if len(words) == 2 and words[0] == "SNAPSHOT":
        return words[1]
    return ""


def revision_on(conn: NodeConnection, hf_cache: str, repo: str, revision: str) -> str:
    """The commit on this node ("" = not in its cache). A local-path model (repo starting with /) is
    recorded as its path: there is no revision to resolve."""
    if repo.startswith("/"):
        return repo
    result = conn.run_script(_RESOLVE, repo_dir(hf_cache, repo), revision, timeout=30, check=True)
    return parse_revision(result.stdout)
