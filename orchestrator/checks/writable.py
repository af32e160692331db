"""The directories spark-deploy writes on a node must be writable by the login user (field: a stock DGX OS
account is a docker-group user without passwordless sudo, so nothing may assume root).

One read-only probe per node (preflight's `state_dir` fact, gathered with the others): whether the state
dir (releases, lock, audit, env files, maintenance baselines) exists and everything in it is writable, or
else whether it could be made, and who owns it.
"""

from __future__ import annotations


# "$1" the directory. Prints: `user NAME`, then `ok OWNER MODE`, `unwritable OWNER MODE [PATH]` (PATH: the
# first entry inside it the user cannot write), `creatable PARENT` or `uncreatable PARENT OWNER MODE`.
PROBE = r'''d=$1
echo "user $(id -un)"
if [ -d "$d" ]; then
  meta=$(stat -c '%U:%G %a' -- "$d")
  if [ -w "$d" ] && [ -x "$d" ]; then
    bad=$(find "$d" -mindepth 1 -maxdepth 2 ! -writable -print -quit 2>/dev/null)
    if [ -z "$bad" ]; then echo "ok $meta"; else echo "unwritable $meta $bad"; fi
  else echo "unwritable $meta"; fi
else
  p=$d; while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
  if [ -w "$p" ] && [ -d "$p" ]; then echo "creatable $p"; else echo "uncreatable $p $(stat -c '%U:%G %a' -- "$p")"; fi
fi'''


def owner_fix(user: str, path: str, nodes: list[str]) -> str:
    return (f"`sudo install -d -o {user} -g {user} {path}` on {', '.join(nodes)} (once, as an admin), or set "
            f"state_dir in the inventory to a directory {user} owns")


def parse(stdout: str, path: str) -> tuple[bool, str, str]:
    """(writable or creatable, what was seen, the login user) from the probe's two lines."""
    lines = dict(line.partition(" ")[::2] for line in stdout.splitlines() if line.strip())
    user = lines.get("user", "?")
    if "ok" in lines:
        return True, f"{path} writable by {user} ({lines['ok']})", user
    if "creatable" in lines:
        return True, f"{path} absent; {user} can create it in {lines['creatable']}", user
    if "unwritable" in lines:
        meta, _, inner = lines["unwritable"].partition(" ")
        mode, _, inner = inner.partition(" ")
        where = f"{inner} inside it is not writable" if inner else "not writable"
        return False, f"{path} ({meta} {mode}): {where} by {user}", user
    parent, _, meta = lines.get("uncreatable", "? ?").partition(" ")
    return False, f"{path} absent, and {user} cannot create it in {parent} ({meta})", user
