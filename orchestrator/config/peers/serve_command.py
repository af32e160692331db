"""A peer's `vllm serve` command template: placeholders filled from `defaults`, then read as vLLM's parser
would read it (which options take a value, their short and negative spellings: the option table)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from ..types import SECRET_NAME, redact
from ..vllm_flags import OPTIONS, Option

PLACEHOLDER = re.compile(r"\{(\w+)\}")
_CONTINUATION = re.compile(r"\\[ \t]*\r?\n")  # sparkrun also forgives spaces after the backslash
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_SEPARATORS = {"&&", "||", ";", "|"}
_API_SERVER = ("-m", "vllm.entrypoints.openai.api_server")


def _spellings() -> dict[str, Option]:
    """Every spelling argparse accepts (`-tp`, `--no-enable-prefix-caching`), with its dashes."""
    return {s: option for option in OPTIONS.values() for s in option.strings}


SPELLINGS = _spellings()


def canonical(option: Option) -> str:
    """The option's name as the recipe writes it: its first long spelling, without the dashes."""
    return next(s for s in option.strings if s.startswith("--"))[2:]


def as_text(value: object) -> str:
    """A `defaults` value as the peers put it into the template (JSON for a mapping or a list)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


@dataclass(frozen=True)
class Filled:
    """The template with its placeholders replaced; which `defaults` keys it used and which it lacked."""

    text: str
    used: frozenset[str]
    unresolved: frozenset[str]


def fill(template: str, values: dict[str, object]) -> Filled:
    """Replace `{key}` from `values`, repeatedly (a value may hold another placeholder), as both peers do;
    an unknown placeholder is left as it is."""
    used: set[str] = set()

    def one(match: re.Match) -> str:
        if match.group(1) in values:
            used.add(match.group(1))
            return as_text(values[match.group(1)])
        return match.group(0)

    text = template
    for _ in range(8):
        new = PLACEHOLDER.sub(one, text)
        if new == text:
            break
        text = new
    return Filled(text, frozenset(used), frozenset(PLACEHOLDER.findall(text)))


@dataclass(frozen=True)
class Arg:
    """One option of the serve command: its canonical name (dotted for one key of a JSON option), the value
    (text, True/False for a switch, a list for a many-valued option) and how the template spelled it."""

    name: str
    value: object
    spelled: str
    known: bool


@dataclass
class ServeCommand:
    """What the template runs: the model, the options, environment assignments before `vllm`, and the
    parts that are not `vllm serve` (other commands chained with && or ;, stray words)."""

    model: str | None = None
    args: list[Arg] = field(default_factory=list)
    env: list[tuple[str, str]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    missing_value: list[str] = field(default_factory=list)


class NotServe(ValueError):
    """The command does not run `vllm serve` (sglang, llama-server, trtllm: not what spark-deploy runs)."""


def _segments(tokens: list[str]) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            parts.append([])
        elif token.endswith(";") and len(token) > 1:
            parts[-1].append(token[:-1])
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def _shown(words: list[str]) -> str:
    """Words kept apart from `vllm serve`, as a message may quote them: a credential-named assignment's value
    and any credential-shaped text masked."""
    masked = []
    for word in words:
        assignment = _ASSIGNMENT.match(word)
        masked.append(f"{assignment.group(1)}=<redacted>" if assignment and SECRET_NAME.search(assignment.group(1))
                      else shlex.quote(word))
    return redact(" ".join(masked))


def _serve_start(segment: list[str]) -> int | None:
    """Index of the first argument after `vllm serve` (or `python -m vllm.entrypoints.openai.api_server`)."""
    for i, token in enumerate(segment):
        if token.rsplit("/", 1)[-1] == "vllm" and segment[i + 1:i + 2] == ["serve"]:
            return i + 2
        if token.rsplit("/", 1)[-1].startswith("python") and tuple(segment[i + 1:i + 3]) == _API_SERVER:
            return i + 3
    return None


def split(text: str) -> list[str]:
    """The filled template as the shell would split it (ValueError on an unclosed quote)."""
    return shlex.split(_CONTINUATION.sub(" ", text), comments=True)


def parse(text: str) -> ServeCommand:
    """Read a filled template. Raises NotServe when no segment runs `vllm serve`."""
    found = ServeCommand()
    serve: list[str] | None = None
    for segment in _segments(split(text)):
        start = _serve_start(segment) if serve is None else None
        if start is None:
            found.other.append(_shown(segment))
            continue
        prefix, serve = segment[:start - 2], segment[start:]
        for word in prefix:
            assignment = _ASSIGNMENT.match(word)
            if assignment:
                found.env.append((assignment.group(1), assignment.group(2)))
            elif word not in ("exec", "env"):
                found.other.append(_shown([word]))
    if serve is None:
        first = text.strip().split(None, 1)[0] if text.strip() else "(empty)"
        raise NotServe(f"the command runs {first!r}, not `vllm serve`: spark-deploy deploys vLLM only")
    _read_options(serve, found)
    return found


def _read_options(words: list[str], found: ServeCommand) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-":
            if found.model is None and not found.args:
                found.model = word
            else:
                found.other.append(_shown([word]))
            continue
        head, eq, attached = word.partition("=")
        base, dot, key = head.partition(".")
        option = SPELLINGS.get(base)
        takes_value = option is None or not option.switch
        if option is not None and option.switch:
            positive = canonical(option)
            value: object = not (base != f"--{positive}" and base.startswith(("--no-", "--disable-")))
            if eq:
                value = attached
        elif eq:
            value = attached
        elif takes_value and i < len(words) and not _is_option(words[i]):
            values = [words[i]]
            i += 1
            while option is not None and option.nargs in ("+", "*") and i < len(words) and not _is_option(words[i]):
                values.append(words[i])
                i += 1
            value = values[0] if len(values) == 1 else values
        elif option is None:
            value = True  # an unknown option with no value after it: a switch, as far as can be told
        else:
            found.missing_value.append(word)
            continue
        name = (canonical(option) if option is not None else base.lstrip("-")) + (f".{key}" if dot else "")
        found.args.append(Arg(name, value, head, option is not None))


def _is_option(word: str) -> bool:
    """A word that starts another option (a negative number is a value)."""
    return word.startswith("-") and not re.fullmatch(r"-[0-9.]+", word)
