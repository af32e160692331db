"""Boot facts: if this node rebooted now, what would come back, and is it what serves?

Two things bring containers back at boot (field note 9): enabled systemd units whose ExecStart runs
docker/podman/vllm/compose, and containers whose Docker restart policy restarts them when dockerd starts
(`always`, `unless-stopped`, `on-failure` with no retry bound). Each is matched against the serving
release by plan hash: a container's `spark-deploy.plan-hash` label, or, for our own unit, the container it
starts (else the plan hash recorded in the unit). `boot_items` is the shared judgement: the `boot` check
(preflight's checks_boot.py) runs it against what the labels say serves, `boot status` and `boot enable`
(deploy/boot.py) against the serving release, `maintenance` against the release it baselined.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from ..checks.verdict import Status
from ..docker_cli.containers import Container, container_of
from ..releases.serving import serving_plans
from .core import Observed, fact

Seen = dict[str, dict[str, Observed]]

OUR_UNIT_PREFIX = "spark-deploy-"
UNIT_KEY_PREFIX = "X-SparkDeploy-"  # keys systemd ignores (X- prefix): what our unit records about itself
ENGINE_UNITS = ("docker.service", "docker.socket", "containerd.service")
_RUNS_CONTAINERS = re.compile(r"(?<![\w.-])(docker|podman|vllm|docker-compose|podman-compose|nerdctl)(?![\w.-])")

# Prints "no-systemd: WHY" (exit 0) when systemd does not run this node; otherwise marked sections:
# the enabled unit files, our unit files in any state, `systemctl show` of every enabled service, and our
# enabled units' X-SparkDeploy- keys.
_BOOT_UNITS = r'''if ! command -v systemctl >/dev/null 2>&1; then
  echo "no-systemd: systemctl is not installed"; exit 0
fi
if [ ! -d /run/systemd/system ]; then
  echo "no-systemd: PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown), not systemd"; exit 0
fi
set -f
echo "@@enabled"
systemctl list-unit-files --state=enabled --type=service,socket --no-legend --no-pager || exit 1
units=$(systemctl list-unit-files --state=enabled --type=service --no-legend --no-pager |
  awk '$1 !~ /@\.service$/ {print $1}')
echo "@@ourfiles"
systemctl list-unit-files --type=service --no-legend --no-pager 'spark-deploy-*' || true
echo "@@show"
if [ -n "$units" ]; then systemctl show --no-pager -p Id,FragmentPath,ExecStartPre,ExecStart $units || exit 1; fi
for u in $units; do
  case $u in spark-deploy-*)
    echo "@@ours $u"
    f=$(systemctl show -p FragmentPath --value "$u")
    [ -n "$f" ] && grep '^X-SparkDeploy-' -- "$f"
  esac
done
exit 0'''

# One JSON object per container (every container: the serving release is judged from their labels too);
# "$1" is the format below.
_RESTART = r'''ids=$(docker ps --all --quiet --no-trunc) || exit 1
[ -n "$ids" ] || exit 0
docker container inspect --format "$1" $ids'''
_RESTART_FORMAT = ('{"Id":{{json .Id}},"Name":{{json .Name}},"Image":{{json .Image}},"Ref":{{json .Config.Image}},'
                   '"State":{"Status":{{json .State.Status}},"ExitCode":{{json .State.ExitCode}}},'
                   '"Restart":{{json .HostConfig.RestartPolicy}},"Config":{"Labels":{{json .Config.Labels}}}}')


class ItemKind(StrEnum):
    UNIT = "unit"
    CONTAINER = "container"


class BootMatch(StrEnum):
    SERVING = "comes back and matches the serving release"
    OTHER = "comes back but is another stack"
    BROKEN = "is enabled but would fail at boot"  # our unit whose container is gone


@dataclass(frozen=True)
class UnitInfo:
    """One enabled service unit: its ExecStart command lines (argv text as systemd shows it)."""

    id: str
    fragment: str
    exec_start: tuple[str, ...]
    exec_start_pre: tuple[str, ...] = ()
    recorded: tuple[tuple[str, str], ...] = ()  # our unit's X-SparkDeploy-* keys

    @property
    def ours(self) -> bool:
        return self.id.startswith(OUR_UNIT_PREFIX) and bool(self.recorded)

    @property
    def runs_containers(self) -> bool:
        return self.id not in ENGINE_UNITS and any(_RUNS_CONTAINERS.search(c) for c in self.exec_start)

    def key(self, name: str) -> str:
        return dict(self.recorded).get(name, "")

    def started_container(self) -> str | None:
        """The container `docker start [-a] NAME` names, when that is what ExecStart does (also as the argv
        a wrapper runs: our peer's unit is `bash -c SCRIPT ... docker start --attach NAME`)."""
        for line in self.exec_start:
            try:
                argv = shlex.split(line)
            except ValueError:
                argv = line.split()
            for i in range(len(argv) - 2):
                if argv[i].rsplit("/", 1)[-1] == "docker" and argv[i + 1] == "start":
                    names = [a for a in argv[i + 2:] if not a.startswith("-")]
                    if names:
                        return names[0]
        return None


@dataclass(frozen=True)
class BootUnits:
    """The `boot_units` fact: `systemd` False (with `why`) when systemd is not PID 1 or not installed."""

    systemd: bool
    why: str = ""
    enabled: tuple[str, ...] = ()  # every enabled service/socket unit file
    units: tuple[UnitInfo, ...] = ()  # enabled services that run containers or vLLM
    our_files: tuple[tuple[str, str], ...] = ()  # (unit, state) of every spark-deploy-* unit file, any state

    @property
    def engine_enabled(self) -> bool:
        """dockerd starts at boot (docker.service or its socket enabled): restart policies then act."""
        return "docker.service" in self.enabled or "docker.socket" in self.enabled

    @property
    def containerd_enabled(self) -> bool:
        return "containerd.service" in self.enabled


@dataclass(frozen=True)
class PolicyContainer:
    """One container with its Docker restart policy (every container is listed; `comes_back` selects)."""

    container: Container
    ref: str  # the image reference it was created from
    policy: str  # no | always | unless-stopped | on-failure
    max_retries: int

    @property
    def comes_back(self) -> bool:
        """Restarted by dockerd at its start: `always`; `unless-stopped` unless it was stopped (a stopped one
        is taken as stopped by hand: inspect does not show the flag); `on-failure` with no bound (0)."""
        if self.policy == "always":
            return True
        if self.policy == "unless-stopped":
            return self.container.running
        return self.policy == "on-failure" and self.max_retries == 0

    @property
    def plan_hash(self) -> str | None:
        labels = self.container.ours
        return labels.plan_hash if labels and labels.plan_hash else None

    def policy_text(self) -> str:
        return f"on-failure:{self.max_retries}" if self.policy == "on-failure" else self.policy


@fact("boot_units", _BOOT_UNITS)
def parse_boot_units(stdout: str) -> BootUnits:
    """The `_BOOT_UNITS` script's output -> BootUnits (systemd 252's list-unit-files/show formats)."""
    text = stdout.strip()
    if text.startswith("no-systemd:"):
        return BootUnits(False, text.split(":", 1)[1].strip())
    if "@@enabled" not in text:
        raise ValueError("no @@enabled section")
    sections = _sections(text)
    enabled = tuple(line.split()[0] for line in sections.get("enabled", []) if line.split())
    shown = parse_systemctl_show("\n".join(sections.get("show", [])))
    recorded = {name[len("ours "):]: tuple(_keys(lines))
                for name, lines in sections.items() if name.startswith("ours ")}
    units = []
    for props in shown:
        unit = UnitInfo(id=props.get("Id", [""])[0], fragment=props.get("FragmentPath", [""])[0],
                        exec_start=tuple(exec_argv(v) for v in props.get("ExecStart", []) if v),
                        exec_start_pre=tuple(exec_argv(v) for v in props.get("ExecStartPre", []) if v),
                        recorded=recorded.get(props.get("Id", [""])[0], ()))
        if unit.runs_containers or unit.ours:
            units.append(unit)
    our_files = tuple((p[0], p[1]) for p in (line.split() for line in sections.get("ourfiles", [])) if len(p) >= 2)
    return BootUnits(True, "", enabled, tuple(units), our_files)


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            out.setdefault(current, [])
        elif current is not None:
            out[current].append(line)
    return out


def _keys(lines: list[str]) -> Iterable[tuple[str, str]]:
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key.startswith(UNIT_KEY_PREFIX):
            yield key[len(UNIT_KEY_PREFIX):].strip(), value.strip()


def parse_systemctl_show(text: str) -> list[dict[str, list[str]]]:
    """`systemctl show -p ... UNIT...`: one block per unit, blank-line separated; a property printed more
    than once (one ExecStart= line per command) keeps every value in order. A command whose argv holds a
    newline is printed across lines unquoted: a line that does not start a property continues the last."""
    blocks: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] = {}
    last: str | None = None
    for line in text.splitlines() + [""]:
        if not line.strip():
            if current:
                blocks.append(current)
            current, last = {}, None
            continue
        m = _PROPERTY.match(line)
        if m:
            last = m.group(1)
            current.setdefault(last, []).append(line[m.end():])
        elif last is not None:
            current[last][-1] += "\n" + line
    return blocks


_PROPERTY = re.compile(r"^([A-Z][A-Za-z0-9]*)=")


_ARGV = re.compile(r"argv\[\]=(.*?) ; (?:ignore_errors|flags)=", re.DOTALL)


def exec_argv(value: str) -> str:
    """`{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run x ; ignore_errors=no ; ... }` -> the argv text."""
    m = _ARGV.search(value)
    if m:
        return m.group(1).strip()
    if value.strip().startswith("{"):
        raise ValueError(f"unexpected ExecStart value: {value[:120]!r}")
    return value.strip()


@fact("restart_policies", _RESTART, args=lambda _i: [_RESTART_FORMAT])
def parse_restart_policies(stdout: str) -> list[PolicyContainer]:
    """One JSON object per line (the `_RESTART` format) -> every container with its restart policy."""
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        policy = data.get("Restart") or {}
        data["Config"]["Labels"] = data["Config"].get("Labels") or {}
        out.append(PolicyContainer(container_of(data), data.get("Ref") or "", policy.get("Name") or "no",
                                   int(policy.get("MaximumRetryCount") or 0)))
    return out


@dataclass(frozen=True)
class BootItem:
    """One thing that comes back on boot on one node, judged against the serving release."""

    kind: ItemKind
    name: str  # the unit or container name
    starts: str  # what it would start, in words
    plan_hash: str | None  # the plan it brings back, when it is one of ours
    match: BootMatch

    @property
    def status(self) -> Status:
        return {BootMatch.SERVING: Status.OK, BootMatch.OTHER: Status.FAIL, BootMatch.BROKEN: Status.WARN}[self.match]

    def describe(self) -> str:
        return f"{self.kind} {self.name} {self.match}: starts {self.starts}"

    def as_dict(self) -> dict:
        return {"kind": str(self.kind), "name": self.name, "starts": self.starts, "plan_hash": self.plan_hash,
                "match": str(self.match), "status": str(self.status)}


def _normal(serving: str | Iterable[str] | None) -> frozenset[str]:
    if serving is None:
        return frozenset()
    return frozenset([serving]) if isinstance(serving, str) else frozenset(serving)


def boot_items(observed: dict[str, Observed], serving: str | Iterable[str] | None) -> list[BootItem]:
    """Pure: one node's `boot_units` and `restart_policies` facts -> what comes back on boot, each judged
    against the serving plan hash(es). A fact that could not be read contributes nothing (the caller
    reports it); restart policies count only where dockerd starts at boot (or systemd is not there to say)."""
    plans = _normal(serving)
    units_obs, pol_obs = observed.get("boot_units"), observed.get("restart_policies")
    units: BootUnits | None = units_obs.value if units_obs and units_obs.ok else None
    containers: list[PolicyContainer] = pol_obs.value if pol_obs and pol_obs.ok else []
    by_name = {p.container.name: p for p in containers}
    items: list[BootItem] = []
    started_by_units: set[str] = set()

    def judged(plan: str | None) -> BootMatch:
        return BootMatch.SERVING if plan is not None and plan in plans else BootMatch.OTHER

    for unit in (units.units if units else ()):
        name = unit.started_container()
        target = by_name.get(name) if name else None
        if unit.ours and name and target is None:
            items.append(BootItem(ItemKind.UNIT, unit.id, f"container {name}, which does not exist here",
                                  unit.key("PlanHash") or None, BootMatch.BROKEN))
            continue
        plan = target.plan_hash if target else (unit.key("PlanHash") or None) if unit.ours else None
        if target is not None:
            started_by_units.add(target.container.name)
            starts = f"container {name} ({_container_text(target)})"
        else:
            starts = "; ".join(unit.exec_start) or "nothing (no ExecStart)"
        items.append(BootItem(ItemKind.UNIT, unit.id, starts, plan, judged(plan)))
    engine_starts = units is None or not units.systemd or units.engine_enabled
    if engine_starts:
        for p in containers:
            if p.comes_back and p.container.name not in started_by_units:
                items.append(BootItem(ItemKind.CONTAINER, p.container.name,
                                      f"{_container_text(p)} (restart {p.policy_text()})", p.plan_hash,
                                      judged(p.plan_hash)))
    return items


def _container_text(p: PolicyContainer) -> str:
    labels = p.container.ours
    image = p.ref if p.ref and not p.ref.startswith("sha256:") else (p.ref or p.container.image)[:19]
    if labels:
        return f"{image}, spark-deploy {labels.recipe} rank {labels.rank} plan {labels.plan_hash or '?'}"
    return image


def serving_comes_back(items: list[BootItem]) -> bool:
    return any(i.match is BootMatch.SERVING for i in items)


@dataclass
class NodeBoot:
    """What `boot status` and the check show for one node."""

    items: list[BootItem] = field(default_factory=list)
    systemd: bool = True
    why: str = ""  # why systemd could not be asked
    engine_enabled: bool | None = None
    containerd_enabled: bool | None = None


def node_boot(observed: dict[str, Observed], serving: str | Iterable[str] | None) -> NodeBoot:
    units_obs = observed.get("boot_units")
    units: BootUnits | None = units_obs.value if units_obs and units_obs.ok else None
    return NodeBoot(boot_items(observed, serving), systemd=bool(units and units.systemd),
                    why=(units.why if units else (units_obs.error if units_obs else "boot_units not gathered")) or "",
                    engine_enabled=units.engine_enabled if units and units.systemd else None,
                    containerd_enabled=units.containerd_enabled if units and units.systemd else None)


def serving_from_seen(seen: Seen, cluster: str | None) -> set[str]:
    """Plan hashes that run on every rank of their world, read from every node's `restart_policies` fact."""
    containers = {n: [p.container for p in f["restart_policies"].value]
                  for n, f in seen.items() if f.get("restart_policies") and f["restart_policies"].ok}
    return serving_plans(containers, cluster)
