"""What both peers share: `defaults` filling a `vllm serve` command template, and `env`. Each source key
ends up placed (with its origin) or left (with why)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..source import ConfigError, Document
from .parts import Left, Placed, Source
from .serve_args import place
from .serve_command import PLACEHOLDER, SPELLINGS, Arg, NotServe, canonical, fill, parse

_ENV_REFERENCE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
NOT_RUN = ("spark-deploy runs only `vllm serve` in the container: bake this into the image, or mount the files it "
           "changes (mounts.overlays, docs/overlays.md)")
MOD = ("a patch applied at launch: spark-deploy mounts patched files over the image's own instead "
       "(mounts.overlays, docs/overlays.md), with the hash of the file they were written against")


@dataclass
class Reading:
    """One peer file being read: its document, and what has been placed and left so far."""

    doc: Document
    placed: list[Placed] = field(default_factory=list)
    left: list[Left] = field(default_factory=list)

    def source(self, *loc: object) -> Source:
        return Source(".".join(str(p) for p in loc), self.doc.line_of(tuple(loc)))

    def put(self, target: tuple[str, ...], value: object, source: Source, note: str = "") -> None:
        self.placed.append(Placed(target, value, source, note))

    def leave(self, source: Source, reason: str) -> None:
        self.left.append(Left(source, reason))

    def take(self, outcome: Placed | Left) -> None:
        (self.placed if isinstance(outcome, Placed) else self.left).append(outcome)

    def refuse(self, loc: tuple, message: str) -> ConfigError:
        return ConfigError([self.doc.issue(loc, message)])


def mapping_at(reading: Reading, data: dict, key: str) -> dict:
    """A key that must hold a mapping (`defaults`, `env`): {} when absent, bad input when it is something else."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise reading.refuse((key,), f"`{key}` must be a mapping of `name: value` lines")
    return value


def _command_lines(reading: Reading, template: str) -> tuple[list[str], int | None]:
    """The template's lines and the file line of its first one (a block scalar starts below its key)."""
    line = reading.doc.line_of(("command",))
    lines = template.splitlines()
    return lines, (line + 1 if line is not None and len(lines) > 1 else line)


def _where(reading: Reading, lines: list[str], first: int | None, spelled: str) -> Source:
    """The option's own line in the template, and the `defaults` key that filled it there."""
    pattern = re.compile(re.escape(spelled) + r"(?=[\s=.'\"]|$)")
    for i, text in enumerate(lines):
        found = pattern.search(text)
        if found:
            filled = PLACEHOLDER.findall(text[found.end():])
            via = f" = defaults.{filled[0]}" if filled else ""
            return Source(f"command {spelled}{via}", first + i if first is not None else None)
    return Source(f"command {spelled}", first)


def read_serve(reading: Reading, data: dict, values: dict, flag_map: dict[str, str] | None,
               bool_flags: frozenset[str] = frozenset(), appended: frozenset[str] = frozenset()) -> None:
    """`command` filled from `values` and parsed; `defaults` the template does not use are placed through
    `flag_map` when the peer itself turns them into flags (sparkrun without a template; `appended`: keys
    sparkrun adds to a template that lacks them), else left."""
    defaults = mapping_at(reading, data, "defaults")
    template = data.get("command")
    given: set[str] = set()
    used: frozenset[str] = frozenset()
    if template is not None:
        if not isinstance(template, str):
            raise reading.refuse(("command",), "`command` must be text: the `vllm serve ...` line")
        filled = fill(template, values)
        used = filled.used
        lines, first = _command_lines(reading, template)
        try:
            command = parse(filled.text)
        except NotServe as exc:
            raise reading.refuse(("command",), str(exc)) from None
        except ValueError as exc:
            raise reading.refuse(("command",), f"cannot split the command as a shell would: {exc}") from None
        if command.model is not None:
            reading.put(("model", "repo"), command.model, Source("command (the model served)", first))
        for arg in command.args:
            given.add(arg.name)
            reading.take(place(arg, _where(reading, lines, first, arg.spelled)))
        for name, value in command.env:
            reading.put(("env", name), value, Source(f"command {name}=...", first))
        for other in command.other:
            reading.leave(Source(f"command `{other}`", first), NOT_RUN)
        for word in command.missing_value:
            reading.leave(_where(reading, lines, first, word), f"{word} has no value after it in the command")
    for key, value in defaults.items():
        if key in used:
            continue
        flag = (flag_map or {}).get(key)
        mapped = flag is not None and (template is None or key in appended)
        option = SPELLINGS.get(flag) if flag else None
        if mapped and option is not None and canonical(option) not in given:
            if key in bool_flags and not value:
                reading.leave(reading.source("defaults", key), "false: the peer passes no flag for it")
                continue
            arg = Arg(canonical(option), True if key in bool_flags else value, flag, True)
            reading.take(place(arg, reading.source("defaults", key)))
        elif template is not None:
            reading.leave(reading.source("defaults", key), "not used by the command template")
        else:
            reading.leave(reading.source("defaults", key), "the peer turns only the keys of its flag map into "
                                                           "flags when there is no `command`")


def read_env(reading: Reading, data: dict, expands: bool) -> None:
    """`env` into `env:`; with `expands` (sparkrun), `NAME: ${NAME}` (passed from the control machine's
    environment) becomes `secrets: [NAME]`, which is how spark-deploy passes a value it must not write down."""
    for name, value in mapping_at(reading, data, "env").items():
        source = reading.source("env", name)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        reference = _ENV_REFERENCE.match(text) if expands else None
        if reference and reference.group(1) == str(name):
            reading.put(("secrets", str(name)), str(name), source, "read from your shell's environment by `up`")
        elif expands and "$" in text:
            reading.leave(source, "expanded from the control machine's environment by sparkrun: export it and "
                                  f"list `- {name}` under `secrets:`, or write its value")
        else:
            reading.put(("env", str(name)), text, source)


def read_mods(reading: Reading, data: dict) -> None:
    """`mods`: eugr's patch scripts, run in the container at launch (sparkrun runs them the same way)."""
    mods = data.get("mods") or []
    if not isinstance(mods, list):
        reading.leave(reading.source("mods"), MOD)
        return
    for i, mod in enumerate(mods):
        reading.leave(reading.source("mods", i), f"{mod}: {MOD}")
