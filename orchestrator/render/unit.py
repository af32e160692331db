"""One systemd unit per node that brings its rank of the serving release back on boot.

Rendered from the same Plan as `up`: the unit starts the very container `up` created (`docker start
--attach`, by its name, which carries its plan and never changes), which keeps its env and env-file, so
nothing secret is ever written into a unit. `boot enable` also starts it, which attaches to the running
container: from then on systemd restarts a rank that exits (a head whose peer vanished exits after the
collective timeout and is started again, reopening the rendezvous; a peer whose head vanished exits at once
and waits for the head again). The peer's unit waits, bounded and logged to the journal, until the head's
rendezvous port listens, inside the ExecStart of a Type=simple unit: never in ExecStartPre, which would hold
the node's boot (`multi-user.target`, `is-system-running: starting`) for as long as it waits. Restarts are
systemd's, at most StartLimitBurst per StartLimitIntervalSec; the container's own Docker restart policy is
set to `no` by ExecStartPre so the two never fight (a recipe's `docker.restart: on-failure:N` becomes the
burst N).

Every value goes through systemd's own quoting (`command_word`, `setting_value`), never a shell's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .plan import Plan, RankLaunch

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "spark-deploy-"
KEY_PREFIX = "X-SparkDeploy-"  # systemd ignores X- keys; facts/boot.py reads them back
PEER_WAIT_SECONDS = 600  # the stand-in's and torch's own rendezvous timeout
STOP_SECONDS = 30
RESTART_SECONDS = 15
DEFAULT_RETRIES = 2
# Exit codes that are not restarted: 143 (SIGTERM: `docker stop` by down/up/the unit) and 137 (SIGKILL: the stop
# timeout, or the kernel's OOM killer; a unified-memory leak must not be retried: eugr spark-vllm-docker #257);
# and the unit's own `docker start --attach` killed by SIGKILL: `boot disable` letting go of a running container.
NO_RESTART_CODES = "143 137 SIGKILL"

# ExecStart of a peer: "$1" head fabric IP, "$2" rendezvous port, "$3" seconds, then the `docker start --attach
# NAME` argv. A container that already runs (the unit started by `boot enable`) is attached to at once; else the
# head's rendezvous is waited for (one TCP connect per attempt, each bounded; the whole wait bounded: exit 1,
# and systemd's Restart= tries again) and the container started. One line: `systemctl show` prints a command's
# argv unquoted, so a newline in it would break readers.
_PEER_START = ("ip=$1 port=$2 bound=$3; shift 3; "
               "if [ \"$(docker container inspect --format '{{.State.Running}}' \"${!#}\" 2>/dev/null)\" = true ]; "
               "then echo \"${!#} runs: attaching to it\"; exec \"$@\"; fi; "
               "echo \"waiting for the head's rendezvous at $ip:$port (up to $bound s)\"; "
               "until timeout 3 bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' \"$ip\" \"$port\" 2>/dev/null; do "
               "if [ \"$SECONDS\" -ge \"$bound\" ]; then "
               "echo \"the head's rendezvous at $ip:$port did not listen within $bound s\"; exit 1; fi; "
               "if [ $((SECONDS % 30)) -lt 2 ]; then echo \"still waiting for the head at $ip:$port ($SECONDS s)\"; fi; "
               "sleep 2; done; "
               "echo \"the head's rendezvous at $ip:$port listens (waited $SECONDS s)\"; exec \"$@\"")


def start_limit_window(burst: int, peer_wait: int = PEER_WAIT_SECONDS) -> int:
    """StartLimitIntervalSec: `burst` starts per `burst` rendezvous timeouts. A rank that waits out a whole
    rendezvous (head or peer: PEER_WAIT_SECONDS, then RESTART_SECONDS) is never stopped by it, so a head keeps
    reopening its rendezvous until its peer is back; a rank that fails faster (a crash at start) gets `burst`
    starts and stays failed."""
    return burst * peer_wait


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
    """Pure: the unit for `launch`'s node. The head's unit starts its container; a peer's attaches to its running
    container, or waits for the head's rendezvous first.
    `container`: the name of the container that serves the rank (`boot enable` finds it by its labels),
    by default the plan's own name for it."""
    name = unit_name(plan.cluster, plan.recipe)
    container = container or launch.container
    start = ["docker", "start", "--attach", container]
    if not launch.is_head:
        head = plan.head
        ip, port = head.node.fabric_ip, str(head.spec.master_port)
        start = ["bash", "-c", _PEER_START, "wait-for-head", ip, port, str(peer_wait), *start]
    burst = restart_burst(launch)
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
        f"StartLimitIntervalSec={start_limit_window(burst, peer_wait)}",
        f"StartLimitBurst={burst}",
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
        "ExecStartPre=" + command_line(["docker", "update", "--restart", "no", container]),
        "ExecStart=" + command_line(start),
        # systemd runs ExecStop only after a clean exit (checked on 252): a rank that failed, or the unit's
        # `docker start --attach` killed by `boot disable` letting go, never stops a container through it
        "ExecStop=" + command_line(["docker", "stop", "--time", str(stop_seconds), container]),
        "Restart=on-failure",
        f"RestartPreventExitStatus={NO_RESTART_CODES}",
        f"RestartSec={RESTART_SECONDS}",
        "TimeoutStartSec=120",  # ExecStartPre only: the peer's wait is in ExecStart, bounded by itself
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
