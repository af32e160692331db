"""`spark-deploy tune`'s variants, pure: `--set KEY=V1,V2` over dotted recipe keys expanded into recipe
texts, the original recipe and a no-speculation baseline among them, and the balanced order they run in.

A trial used to be a hand-edited recipe and a redeploy, and the baseline a second recipe written by hand
(issue 38). Here every variant is the original recipe's text with only the named keys changed (comments and
order kept), so its release records exactly what was tried.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass

from ruamel.yaml import YAML

SPEC_KEY = ("vllm", "speculative_config")
BASELINE = "no speculation"


class TuneInputError(ValueError):
    """A bad --set (no `=`, an empty key or value list, a key under a non-mapping): exit 2."""


@dataclass(frozen=True)
class Setting:
    key: tuple[str, ...]  # the dotted key, split
    values: tuple[object, ...]  # each value as YAML reads it (2 -> int, auto -> str, null -> None)

    @property
    def dotted(self) -> str:
        return ".".join(self.key)


@dataclass(frozen=True)
class Variant:
    label: str  # "num_speculative_tokens=6", "no speculation"
    changes: tuple[tuple[str, object], ...]  # (dotted key, value) applied to the original
    text: str  # the recipe text to deploy
    original: bool = False  # the recipe as given
    baseline: bool = False  # the no-speculation variant the ratios are taken against

    def as_dict(self) -> dict:
        return {"label": self.label, "changes": {k: v for k, v in self.changes}, "original": self.original,
                "baseline": self.baseline}


def parse_set(text: str) -> Setting:
    """`vllm.speculative_config.num_speculative_tokens=2,4,6,8` -> Setting."""
    key, sep, values = text.partition("=")
    parts = tuple(p.strip() for p in key.strip().split("."))
    if not sep or not all(parts):
        raise TuneInputError(f"--set {text!r}: want KEY=V1,V2,... with a dotted recipe key, e.g. "
                             "vllm.speculative_config.num_speculative_tokens=2,4,6,8")
    raw = [v.strip() for v in values.split(",")]
    if not any(raw) or not all(raw):
        raise TuneInputError(f"--set {text!r}: an empty value in {values!r}")
    safe = YAML(typ="safe")
    parsed = tuple(safe.load(v) for v in raw)
    if len(set(map(repr, parsed))) != len(parsed):
        raise TuneInputError(f"--set {text!r}: a value is given twice")
    return Setting(parts, parsed)


def _get(doc, key: tuple[str, ...]):
    node = doc
    for part in key:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _put(doc, key: tuple[str, ...], value) -> None:
    node = doc
    for i, part in enumerate(key[:-1]):
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise TuneInputError(f"--set {'.'.join(key)}: {'.'.join(key[:i + 1])} is not a mapping in the recipe")
    node[key[-1]] = value


def _render(text: str, changes: list[tuple[tuple[str, ...], object]]) -> str:
    rt = YAML()
    rt.preserve_quotes = True
    doc = rt.load(text)
    for key, value in changes:
        _put(doc, key, value)
    out = io.StringIO()
    rt.dump(doc, out)
    return out.getvalue()


def _label(changes: tuple[tuple[str, object], ...]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={'null' if v is None else v}" for k, v in changes)


def speculates(text: str) -> bool:
    return _get(YAML(typ="safe").load(text), SPEC_KEY) is not None


def expand(text: str, settings: list[Setting]) -> list[Variant]:
    """Every combination of the settings' values, in the order given; then the original recipe when no
    combination is it; then the no-speculation baseline when the recipe speculates and no variant is
    already without speculation. The original's own values mark the variant that is it."""
    if not settings:
        raise TuneInputError("nothing to tune: give at least one --set KEY=V1,V2,...")
    keys = [s.key for s in settings]
    if len({k for k in keys}) != len(keys):
        raise TuneInputError("a key is given in two --set options")
    safe = YAML(typ="safe").load(text)
    now = tuple(_get(safe, k) for k in keys)
    out: list[Variant] = []
    for combo in itertools.product(*(s.values for s in settings)):
        changes = tuple((".".join(k), v) for k, v in zip(keys, combo))
        is_original = combo == now
        spec_off = any(k == SPEC_KEY and v is None for k, v in zip(keys, combo))
        out.append(Variant(_label(changes) + (" (original)" if is_original else ""), changes,
                           text if is_original else _render(text, list(zip(keys, combo))), original=is_original,
                           baseline=spec_off))
    if not any(v.original for v in out):
        current = tuple((".".join(k), v) for k, v in zip(keys, now))
        out.append(Variant(_label(current) + " (original)", current, text, original=True))
    if speculates(text) and not any(v.baseline for v in out):
        changes = ((".".join(SPEC_KEY), None),)
        out.append(Variant(BASELINE, changes, _render(text, [(SPEC_KEY, None)]), baseline=True))
    return out


def order(n: int, rounds: int, last: int | None = None) -> list[int]:
    """Balanced: round 1 in the given order, round 2 reversed, and so on (0123 3210 0123 ...), so a drift
    through the sitting favours no variant; and a variant's two visits in a row at the turn share one deploy.
    `last` (the original) is moved to where the run ends (the end of round 1 when the rounds are odd, its
    start when even): when it stays the winner, nothing is started again after the last block."""
    if rounds < 1:
        raise TuneInputError(f"--rounds {rounds}: at least 1")
    perm = list(range(n))
    if last is not None and 0 <= last < n:
        perm.remove(last)
        perm = perm + [last] if rounds % 2 else [last] + perm
    seq: list[int] = []
    for r in range(rounds):
        seq += perm if r % 2 == 0 else list(reversed(perm))
    return seq
