"""One systemd unit per node that brings its rank of the serving release back on boot.

Rendered from the same Plan as `up`: the unit starts the very container `up` created (`docker start
--attach`, by its name, which carries its plan and never changes), which keeps its env and env-file, so
nothing secret is ever written into a unit. The peer's
unit first waits, bounded and logged to the journal, until the head's rendezvous port listens. Restarts
are systemd's, bounded by StartLimitBurst; the container's own Docker restart policy is set to `no` by
ExecStartPre so the two never fight (a recipe's `docker.restart: on-failure:N` becomes the burst N).

Every value goes through systemd's own quoting (`command_word`, `setting_value`), never a shell's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .plan import Plan, RankLaunch

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "spark-deploy-"
KEY_PREFIX = "X-SparkDeploy-"  # systemd ignores X- keys; checks_boot reads them back
PEER_WAIT_SECONDS = 600  # the stand-in's and torch's own rendezvous timeout
STOP_SECONDS = 30
RESTART_SECONDS = 15
DEFAULT_RETRIES = 2
# StartLimitBurst starts per this window; "infinity": the window never ends, so a rank gets at most that many
# starts per boot however far apart its failures are (a failure after each 10-70 minute load included).
START_LIMIT_WINDOW = "infinity"
# Exit codes that are not restarted: 143 (SIGTERM: `docker stop` by down/up/the unit) and 137 (SIGKILL: the stop
# timeout, or the kernel's OOM killer; a unified-memory leak must not be retried: eugr spark-vllm-docker #257).
NO_RESTART_CODES = "143 137"

# "$1" head fabric IP, "$2" rendezvous port, "$3" seconds. One TCP connect per attempt, each bounded.
# One line: `systemctl show` prints a command's argv unquoted, so a newline in it would break readers.
_WAIT_FOR_HEAD = ("echo \"waiting for the head's rendezvous at $1:$2 (up to $3 s)\"; "
                  "until timeout 3 bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' \"$1\" \"$2\" 2>/dev/null; do "
                  "if [ \"$SECONDS\" -ge \"$3\" ]; then "
                  "echo \"the head's rendezvous at $1:$2 did not listen within $3 s\"; exit 1; fi; "
                  "if [ $((SECONDS % 30)) -lt 2 ]; then echo \"still waiting for the head at $1:$2 ($SECONDS s)\"; fi; "
                  "sleep 2; done; "
                  "echo \"the head's rendezvous at $1:$2 listens (waited $SECONDS s)\"")

_UNIT_CHARS = re.compile(r"[A-Za-z0-9:_.\\-]")
_PLAIN = re.compile(r"^[A-Za-z0-9._:@/+-]+$")


class UnitError(ValueError):
    pass


def escape_name(text: str) -> str:
    """Like `systemd-escape` (characters a unit name may not hold become \\xNN, `/` becomes `-`), but a `-`
    is kept: the name stays readable, and what a unit is for is read from its keys, never parsed from it."""
    out = []
    for i, ch in enumerate(text):
        if ch == "/":
            out.append("-")
        elif _UNIT_CHARS.fullmatch(ch) and not (ch == "." and i == 0) and ch != "\\":
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode()))
    return "".join(out)


def unit_name(cluster: str, recipe: str) -> str:
    return f"{UNIT_PREFIX}{escape_name(cluster)}-{escape_name(recipe)}.service"


def command_word(word: str) -> str:
    """One argv word for ExecStart=/ExecStop=: double-quoted, C-escaped, `%` and `$` doubled (systemd
    expands specifiers and environment variables inside quotes too)."""
    if "\x00" in word:
        raise UnitError("a NUL byte cannot reach a unit")
    escaped = (word.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
               .replace("%", "%%").replace("$", "$$"))
    return f'"{escaped}"'


def command_line(argv: list[str] | tuple[str, ...]) -> str:
    return " ".join(command_word(w) for w in argv)


def setting_value(text: str) -> str:
    """A free-text setting (Description=): one line, specifiers escaped."""
    if "\n" in text or "\r" in text or "\x00" in text:
        raise UnitError(f"a unit setting is one line: {text!r}")
    return text.strip().replace("%", "%%")


def _key(value: str) -> str:
    """An X-SparkDeploy- value: plain tokens only, so `grep` reads them back unchanged."""
    if not _PLAIN.match(value):
        raise UnitError(f"not a plain value for a unit key: {value!r}")
    return value


@dataclass(frozen=True)
class BootUnit:
    node: str
    name: str
    text: str
    container: str
    plan_hash: str
    release: int

    @property
    def path(self) -> str:
        return f"{UNIT_DIR}/{self.name}"


def restart_burst(launch: RankLaunch) -> int:
    """Starts allowed per window: the first plus the recipe's own retry bound (`on-failure:N` -> N), else
    DEFAULT_RETRIES. StartLimitBurst counts starts, not restarts."""
    restart = launch.spec.restart
    if restart and restart.startswith("on-failure:"):
        return int(restart.split(":", 1)[1]) + 1
    return DEFAULT_RETRIES + 1


def render_unit(plan: Plan, launch: RankLaunch, release: int, *, container: str | None = None,
                peer_wait: int = PEER_WAIT_SECONDS, stop_seconds: int = STOP_SECONDS) -> BootUnit:
    """Pure: the unit for `launch`'s node. The head's unit starts its container; a peer's waits first.
    `container`: the name of the container that serves the rank (`boot enable` finds it by its labels),
    by default the plan's own name for it."""
    name = unit_name(plan.cluster, plan.recipe)
    container = container or launch.container
    pre = [command_line(["docker", "update", "--restart", "no", container])]
    start_timeout = 120
    if not launch.is_head:
        head = plan.head
        ip, port = head.node.fabric_ip, str(head.spec.master_port)
        pre.append(command_line(["bash", "-c", _WAIT_FOR_HEAD, "wait-for-head", ip, port, str(peer_wait)]))
        start_timeout = peer_wait + 120
    role = "head" if launch.is_head else "peer"
    lines = [
        "# Written by `spark-deploy boot enable`; `spark-deploy boot disable` removes it.",
        (f"# Brings back release {release} (plan {plan.plan_hash}) of {plan.recipe}: rank {launch.rank} of "
         f"{len(plan.ranks)} ({role})."),
        "# It starts the container `up` created, which keeps its own env: no secret is written here.",
        "[Unit]",
        "Description=" + setting_value(f"spark-deploy {plan.recipe} rank {launch.rank} ({role}), release {release}"),
        "After=docker.service network-online.target",
        "Requires=docker.service",
        "Wants=network-online.target",
        f"StartLimitIntervalSec={START_LIMIT_WINDOW}",
        f"StartLimitBurst={restart_burst(launch)}",
        f"{KEY_PREFIX}Cluster={_key(plan.cluster)}",
        f"{KEY_PREFIX}Recipe={_key(plan.recipe)}",
        f"{KEY_PREFIX}PlanHash={_key(plan.plan_hash)}",
        f"{KEY_PREFIX}Release={release}",
        f"{KEY_PREFIX}Rank={launch.rank}",
        f"{KEY_PREFIX}Container={_key(container)}",
        f"{KEY_PREFIX}DockerRestart={_key(launch.spec.restart or 'no')}",  # put back by `boot disable`
        "",
        "[Service]",
        "Type=simple",
        *[f"ExecStartPre={p}" for p in pre],
        "ExecStart=" + command_line(["docker", "start", "--attach", container]),
        "ExecStop=" + command_line(["docker", "stop", "--time", str(stop_seconds), container]),
        "Restart=on-failure",
        f"RestartPreventExitStatus={NO_RESTART_CODES}",
        f"RestartSec={RESTART_SECONDS}",
        f"TimeoutStartSec={start_timeout}",
        f"TimeoutStopSec={stop_seconds + 30}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return BootUnit(launch.node.name, name, "\n".join(lines), container, plan.plan_hash, release)


def render_units(plan: Plan, release: int) -> list[BootUnit]:
    """Every node's unit, head first."""
    return [render_unit(plan, launch, release) for launch in plan.ranks]
