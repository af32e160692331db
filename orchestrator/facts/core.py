"""Facts: a command run on a node plus a pure parser of what it printed (pyinfra's model).

Every fact a preflight needs is gathered in ONE SSH round trip per node: a constant driver script runs
every fact's constant script, its variable parts passed as positional arguments (never spliced
into the script), all at once, and frames each fact's stdout, stderr and exit code. Parsers are pure functions, unit
tested on captured real outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Callable

from ..config.inventory import Node
from ..config.load import Deployment
from ..render.plan import Plan
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection
from . import engine

if TYPE_CHECKING:
    from .boot_cache import BootEntry

SEP = "\x1e"  # record separator: never in the output of the commands we run

# "$@" = (name, script, argc, args...)*; every fact runs at once (each its own process, its output in its
# own files), then each is printed in the order given: a header line with its exit code, stdout, a stderr
# marker, stderr. The node's time is the slowest fact's, not their sum (docker and nvidia-smi calls mostly
# wait). No process per fact beyond its own `bash -c`: `wait PID` gives each exit code, the headers are
# written by printf (a builtin), and ONE `cat` prints every file in order (a `$(cat ...)` per file cost
# three forks per fact: ~0.2 s of a 23-fact gathering on a loaded 2-core node).
DRIVER = r'''d=$(mktemp -d) || exit 1
names=(); pids=(); i=0
while [ $# -gt 0 ]; do
  name=$1; script=$2; n=$3; shift 3
  args=("${@:1:$n}"); shift "$n"
  names+=("$name")
  bash -c "$script" fact "${args[@]}" >"$d/$i.out" 2>"$d/$i.err" </dev/null &
  pids+=("$!")
  i=$((i + 1))
done
printf '\n\036E\n' >"$d/e"
files=()
for ((k = 0; k < i; k++)); do
  wait "${pids[$k]}"; rc=$?
  printf '\036F %s %s\n' "${names[$k]}" "$rc" >"$d/$k.h"
  files+=("$d/$k.h" "$d/$k.out" "$d/e" "$d/$k.err")
done
[ "$i" -eq 0 ] || cat -- "${files[@]}"
rm -rf -- "$d"'''
ENGINE_SCRIPT = engine.script(DRIVER)  # a constant too: the facts with an Engine API op, in one entry


@dataclass(frozen=True)
class FactInput:
    """What a fact's arguments may depend on: the node's inventory entry and the deployment."""

    node: Node
    dep: Deployment
    plan: Plan
    boot: BootEntry | None = None  # what this node showed earlier on this boot (up only: boot_cache.py)


@dataclass(frozen=True)
class Fact:
    name: str
    script: str  # a constant; "$1".. are its args
    parse: Callable[[str], Any]
    args: Callable[[FactInput], list[str]] = lambda _i: []
    ok_codes: tuple[int, ...] = (0,)
    api: engine.Op | None = None  # engine_probe's op that answers it over the Engine API (None: only the script)
    api_args: Callable[[FactInput], list[str]] | None = None  # that op's arguments (None: the script's)


class Source(StrEnum):
    """What printed a fact's output: its script, or the Engine API process standing in for its CLI calls."""

    SCRIPT = "script"
    ENGINE_API = "engine-api"


@dataclass
class Observed:
    """One fact on one node: its parsed value, or why there is none (the command failed, the parser refused)."""

    value: Any = None
    error: str | None = None
    raw: str = ""
    code: int = 0
    source: Source = Source.SCRIPT

    @property
    def ok(self) -> bool:
        return self.error is None


Seen = dict[str, dict[str, Observed]]  # node -> fact name -> what it showed


FACTS: dict[str, Fact] = {}


def fact(name: str, script: str, args: Callable[[FactInput], list[str]] | None = None,
         ok_codes: tuple[int, ...] = (0,), api: engine.Op | None = None, api_args: Callable[[FactInput], list[str]] | None = None):
    """Register `parse` as the parser of the fact `name` (`script` run on the node; `api`: the engine_probe
    op printing the same text from the Engine API, used in a gathering: engine.py)."""
    def register(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        if name in FACTS:
            raise ValueError(f"fact {name!r} registered twice")
        FACTS[name] = Fact(name, script, parse, args or (lambda _i: []), ok_codes, api, api_args)
        return parse
    return register


def driver_args(facts: list[Fact], given: FactInput) -> list[str]:
    argv: list[str] = []
    for f in facts:
        args = [str(a) for a in f.args(given)]
        argv += [f.name, f.script, str(len(args)), *args]
    return argv


def parse_framed(stdout: str, facts: dict[str, Fact]) -> dict[str, Observed]:
    """Pure: the driver's framed output -> each fact's Observed (parsed, or the error)."""
    seen: dict[str, Observed] = {}
    for block in stdout.split(SEP + "F ")[1:]:
        header, _, rest = block.partition("\n")
        name, _, code = header.partition(" ")
        code, _, by = code.partition(" ")
        source = Source.ENGINE_API if by == Source.ENGINE_API else Source.SCRIPT
        out, _, err = rest.partition("\n" + SEP + "E\n")
        out = out.rstrip("\n")  # the fact's stdout as `$(...)` would give it: trailing newlines dropped
        spec = facts.get(name)
        if spec is None:
            continue
        rc = int(code) if code.strip().lstrip("-").isdigit() else -1
        if rc not in spec.ok_codes:
            seen[name] = Observed(error=(err.strip() or out.strip() or f"exit {rc}").splitlines()[-1][:300], raw=out,
                                  code=rc, source=source)
            continue
        try:
            seen[name] = Observed(value=spec.parse(out), raw=out, code=rc, source=source)
        except Exception as exc:  # noqa: BLE001 - a parser that refuses says why; never a silent default
            seen[name] = Observed(error=f"unexpected output ({exc})", raw=out, code=rc, source=source)
    return seen


def gather_argv(facts: list[Fact], given: FactInput, engine_api: bool = True) -> list[str]:
    """The driver's arguments: each fact's script, except that the facts with an Engine API op ride in one
    `@engine` entry (engine.py: one process for all their docker calls, their scripts on its fallback)."""
    api = [f for f in facts if f.api] if engine_api else []
    argv = driver_args([f for f in facts if f not in api], given)
    if api:
        inner = engine.probe_args(api, given)
        rest = [str(len(inner)), *inner, *driver_args(api, given)]
        argv += [engine.ENGINE, ENGINE_SCRIPT, str(len(rest)), *rest]
    return argv


def gather_node(conn: NodeConnection, names: list[str], given: FactInput, timeout: float = 90,
                engine_api: bool = True) -> dict[str, Observed]:
    facts = [FACTS[n] for n in names]
    result = conn.run_script(DRIVER, *gather_argv(facts, given, engine_api), timeout=timeout, check=True)
    seen = parse_framed(result.stdout, {f.name: f for f in facts})
    for name in names:
        seen.setdefault(name, Observed(error="the fact printed nothing (the driver stopped early)"))
    return seen


@dataclass
class Gathered:
    per_node: dict[str, dict[str, Observed]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)


def gather(cluster: Cluster, conns: list[NodeConnection], dep: Deployment, plan: Plan, names: list[str],
           boot: dict[str, BootEntry | None] | None = None) -> Gathered:
    """Every fact on every node in parallel, one SSH command per node (`boot`: what each node showed
    earlier on its current boot, which its per-boot facts then print instead of asking again)."""
    out = Gathered()

    def one(conn: NodeConnection) -> dict[str, Observed]:
        return gather_node(conn, names, FactInput(dep.inventory.node(conn.name), dep, plan,
                                                  (boot or {}).get(conn.name)))

    try:
        out.per_node = cluster.each(one, conns)
    except GroupError as exc:
        out.per_node = dict(exc.results)
        out.unreachable = {n: str(e) for n, e in exc.failures.items()}
    return out


def in_rank_order(seen: Seen, dep: Deployment) -> list[tuple[str, dict[str, Observed]]]:
    """Nodes head first, as the inventory ranks them (so fixes list them in a stable order)."""
    order = [n.name for n in dep.inventory.ranked]
    return sorted(seen.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order))
