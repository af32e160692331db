"""Which model revision a node's Hugging Face cache holds: one command plus a pure parser.

A release records the commit each node resolves the recipe's revision to, so `rollback` can refuse when
a node's cache moved on (`refs/main` now names another commit) or the snapshot was deleted.
"""

from __future__ import annotations

import re

from ..transport.node import NodeConnection

_COMMIT = re.compile(r"^[0-9a-f]{40}$")

# THE revision resolver, a bash fragment every node script that finds a model's snapshot uses (preflight's
# model and blob checks, the speculative config check, bench's headers, the release record): with $cache
# (the HF cache), $repo (a repo id) and $rev set, it sets $root to the repo's dir and $commit to what the
# revision names there (a ref in refs/, or a 40-hex commit), "" when it names nothing.
RESOLVE_SH = r'''root="$cache/hub/models--${repo//\//--}"
if [ -f "$root/refs/$rev" ]; then commit=$(cat -- "$root/refs/$rev")
elif [[ $rev =~ ^[0-9a-f]{40}$ ]]; then commit=$rev
else commit=; fi'''

# RESOLVE_SH, then $snap the snapshot directory, or an `absent<TAB>why` record and exit 0.
SNAPSHOT_SH = RESOLVE_SH + r'''
[ -n "$commit" ] || { printf 'absent\tno refs/%s in %s\n' "$rev" "$root"; exit 0; }
snap="$root/snapshots/$commit"
[ -d "$snap" ] || { printf 'absent\tno snapshot directory %s\n' "$snap"; exit 0; }'''

# "$1" the HF cache, "$2" the repo id, "$3" the revision: the commit and whether its snapshot exists.
_RESOLVE = r'''cache=$1; repo=$2; rev=$3
''' + RESOLVE_SH + r'''
if [ ! -d "$root" ]; then echo "NOREPO"; exit 0; fi
if [ -n "$commit" ] && [ -d "$root/snapshots/$commit" ]; then echo "SNAPSHOT $commit"; else echo "NOSNAPSHOT $commit"; fi'''


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
    result = conn.run_script(_RESOLVE, hf_cache, repo, revision, timeout=30, check=True)
    return parse_revision(result.stdout)
