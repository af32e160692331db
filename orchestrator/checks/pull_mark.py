"""Is a `model pull` copying into this node's cache right now? A mark file the copy writes, and its reader.

The pull takes no lock (it never touches what serves), so `up` and `rollback` meet its `.incomplete` files
while it runs. Those must not be read as an interrupted download's leftovers (whose fix is to resume or
delete them): a running copy is named and waited for. The copy (model/scripts.COPY_SH) writes
`<repo dir>/.spark-deploy-pull.<pid>` holding its pid, its start in clock ticks since boot (field 22 of
/proc/PID/stat, so a reused pid is not taken for it), the time it started and the address the pull came
from; it removes the file when it ends, and a copy killed with SIGKILL leaves one that reads as dead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

MARK_PREFIX = ".spark-deploy-pull."

# Bash functions. `proc_start PID` prints the process's start (ticks since boot), non-zero when it is gone.
# `pull_mark ROOT` removes the marks of copies that ended and writes this shell's ("$$") one; prints its path.
# `pull_marks ROOT` prints one `pull<TAB>PID<TAB>SINCE<TAB>FROM<TAB>live|dead` record per mark.
PULL_MARK_SH = r'''proc_start() {
  local s f; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; [ -n "$s" ] || return 1
  read -ra f <<< "${s##*) }"; printf '%s' "${f[19]}"
}
pull_marks() {
  local p pid start since from state
  for p in "$1"/''' + MARK_PREFIX + r'''*; do
    [ -f "$p" ] || continue
    read -r pid start since from < "$p" 2>/dev/null || continue
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if [ "$(proc_start "$pid")" = "$start" ]; then state=live; else state=dead; fi
    printf 'pull\t%s\t%s\t%s\t%s\n' "$pid" "$since" "${from:--}" "$state"
  done
}
pull_mark() {
  local rec f
  while IFS=$'\t' read -ra f; do
    [ "${f[4]}" = dead ] && rm -f -- "$1/''' + MARK_PREFIX + r'''${f[1]}"
  done < <(pull_marks "$1")
  rec=${SSH_CLIENT%% *}
  printf '%s %s %s %s\n' "$$" "$(proc_start $$)" "$(date +%s)" "${rec:--}" > "$1/''' + MARK_PREFIX + r'''$$" &&
    printf '%s' "$1/''' + MARK_PREFIX + r'''$$"
}'''


@dataclass(frozen=True)
class RunningPull:
    """One mark: the copy's pid on the node, when it started (epoch s), where the pull was started from."""

    pid: int
    since: int
    origin: str
    live: bool

    def describe(self, node: str) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        origin = f", started from {self.origin}" if self.origin != "-" else ""
        return f"{node} pid {self.pid}, since {when}{origin}"


def parse_mark(parts: list[str]) -> RunningPull | None:
    """Pure: the fields after `pull` in one record, or None when they are not one."""
    if len(parts) != 4 or not parts[0].isdigit() or not parts[1].isdigit() or parts[3] not in ("live", "dead"):
        return None
    return RunningPull(int(parts[0]), int(parts[1]), parts[2], parts[3] == "live")
