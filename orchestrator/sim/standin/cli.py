"""The `vllm` command line, built from vllm_table/options_table.py: exactly the real 0.33.0 `serve` options.

Before argparse, the FlexibleArgumentParser rewrites vLLM applies: `--max_model_len` means
`--max-model-len`, `-O3` means `--optimization-level=3`, `--compilation-config.mode 3` (dotted keys of
JSON options) becomes one JSON value, and `--config FILE.yaml` (flat `key: value` lines) adds flags.
`-h/--help[=...]` is answered by helptext.py. Leftovers are reported by the TOP parser (exit 2).
"""
from __future__ import annotations

import argparse
import json
import sys

from ...vllm_table import options_table as table
from ...vllm_table.argtypes import normalise_choice, resolve, takes_json
from .base import TOP_USAGE, VERSION

__all__ = ["build_parser", "parse_cli", "non_default_args", "normalise_choice"]
SUPPRESS = "==SUPPRESS=="
SIM_DEFAULTS = {"block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 8192}  # what vLLM derives


class EnableDisable(argparse.Action):
    """vLLM's EnableDisableAction: the first option string sets True; the others and `--no-x` False."""

    def __init__(self, option_strings, dest, positive: str = "", **kw):
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.positive = positive

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string == self.positive)


class SortedHelp(argparse.RawDescriptionHelpFormatter):
    """Raw descriptions, options sorted by their first string, as vLLM prints `--help=all`."""

    def add_arguments(self, actions):
        super().add_arguments(sorted(actions, key=lambda a: a.option_strings[0] if a.option_strings else ""))


class Shown:
    """A default the real parser held as an object (an EPLBConfig(...)): shown in help, never parsed."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, Shown) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]


def _default(value, convert):
    """argparse runs a str default through the type; one recorded as an object's repr must not be."""
    if value == SUPPRESS:
        return argparse.SUPPRESS
    if isinstance(value, str) and convert is not None:
        try:
            convert(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            return Shown(value)
    return value


def _add_option(target, row) -> None:
    strings, hidden, dest, group, action, type_, choices, nargs, default, metavar = row
    if action == "help":
        target.add_argument(*strings, action="help", help="show this help message and exit")
        return
    convert = resolve(type_, dest, choices)
    kw: dict = {"dest": dest, "default": _default(default, convert),
                "help": "" if default == SUPPRESS else "(default: %(default)s)"}
    if not strings:  # the positional model_tag
        target.add_argument(dest, nargs=nargs, type=convert, default=default,
                            help=kw["help"])
        return
    if action == "enable_disable":
        kw.update(action=EnableDisable, positive=strings[0])
    elif action == "store_true":
        kw.update(action="store_true")
    else:
        kw.update(action=action, type=convert, nargs=nargs,
                  choices=list(choices) if choices is not None else None,
                  metavar=list(metavar) if isinstance(metavar, tuple) else metavar)
    target.add_argument(*strings, **kw)
    if hidden:  # accepted but not shown (--no-enable-x): same dest, no help line
        target.add_argument(*hidden, **{**kw, "help": argparse.SUPPRESS, "default": argparse.SUPPRESS})


def build_serve(subs) -> argparse.ArgumentParser:
    serve = subs.add_parser("serve", usage=table.USAGE, description=table.PROLOGUE, epilog=table.EPILOGUE,
                            formatter_class=SortedHelp, allow_abbrev=False, add_help=False)
    groups = {"positional arguments": serve._positionals, "options": serve._optionals}
    for title, description in table.GROUPS:
        if title not in groups:
            groups[title] = serve.add_argument_group(title, description or None)
    for row in table.OPTIONS:
        _add_option(groups[row[3]], row)
    return serve


def build_parser() -> argparse.ArgumentParser:
    """The `vllm` parser: top-level usage is overridden to the real one so errors read the same."""
    top = argparse.ArgumentParser(prog="vllm", usage=TOP_USAGE, description="vLLM CLI")
    top.add_argument("-v", "--version", action="version", version=VERSION)
    subs = top.add_subparsers(dest="subparser", required=True, prog="vllm")
    for name in ("chat", "complete"):
        subs.add_parser(name)
    build_serve(subs)
    for name in ("bench", "collect-env", "run-batch"):
        subs.add_parser(name)
    return top


JSON_OPTIONS = {s for row in table.OPTIONS for s in row[0] if s.startswith("--") and takes_json(row[5])}


def _set_dotted(tree: dict, path: list[str], raw: str) -> None:
    append = path[-1].endswith("+")
    key = path[-1].rstrip("+")
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    if append:
        tree.setdefault(key, []).extend(_json_or_str(item) for item in raw.split(","))
    else:
        tree[key] = _json_or_str(raw)


def _json_or_str(raw: str):
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def flexible(argv: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser rewrites (underscores, -O<n>, dotted JSON keys)."""
    out: list = []  # strings, and (base,) where a dotted option's JSON goes
    dotted: dict[str, dict] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok.startswith("-O") and not tok.startswith("-O."):
            if tok == "-O":
                out.append("--optimization-level")
            else:
                out.append("--optimization-level=" + tok[2:].lstrip("="))
            continue
        if tok.startswith("-O."):
            tok = "--compilation-config." + tok[3:]
        if not tok.startswith("--") or tok == "--":
            out.append(tok)
            continue
        key, sep, value = tok.partition("=")
        base, dot, rest = key.partition(".")
        base = base.replace("_", "-")
        if dot and base in JSON_OPTIONS:
            if not sep:
                if i >= len(argv):
                    out.append(base + "." + rest)  # no value: let argparse report it
                    continue
                value, i = argv[i], i + 1
            if base not in dotted:
                dotted[base] = {}
                out.append((base,))
            _set_dotted(dotted[base], rest.split("."), value)
            continue
        out.append(base + dot + rest + sep + value)
    return [f"{t[0]}={json.dumps(dotted[t[0]])}" if isinstance(t, tuple) else t for t in out]


def config_file_args(path: str) -> list[str]:
    """`--config FILE.yaml`: flat `key: value` lines become flags (CLI flags after them win)."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        sys.stderr.write(f"vllm serve: error: --config {path}: {exc.strerror}\n")
        sys.exit(2)
    args: list[str] = []
    for n, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        key, sep, value = text.partition(":")
        value = value.strip().strip("'\"")
        if not sep or not key.strip() or line[0].isspace():
            sys.stderr.write(f"vllm serve: error: --config {path}:{n}: the stand-in reads flat 'key: value' lines only\n")
            sys.exit(2)
        flag = "--" + key.strip().replace("_", "-")
        if value.lower() == "true":
            args.append(flag)
        elif value.lower() != "false":
            args += [flag, value]
    return args


def _expand_config(argv: list[str]) -> list[str]:
    for i, tok in enumerate(argv):
        if tok == "--config" and i + 1 < len(argv):
            return argv[:1] + config_file_args(argv[i + 1]) + argv[1:i] + argv[i + 2:]
        if tok.startswith("--config="):
            return argv[:1] + config_file_args(tok.split("=", 1)[1]) + argv[1:i] + argv[i + 1:]
    return argv


def non_default_args(args: argparse.Namespace) -> dict:
    """What vLLM logs as `non-default args: {...}`: lets a deployer confirm flags took effect."""
    return dict(getattr(args, "non_default", {}))


def parse_cli(argv: list[str]) -> argparse.Namespace:
    """Parse like `vllm`; -h/--help[=X] print and exit 0; bad flags exit 2 with argparse's words."""
    from .helptext import answer_help  # only needed for --help

    parser = build_parser()
    if argv[:1] == ["serve"]:
        answer_help(parser, argv[1:])
        argv = ["serve", *flexible(_expand_config(argv[1:]))]
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.subparser != "serve":
        sys.stderr.write(f"vllm {args.subparser}: not available in the spark-deploy stand-in\n")
        sys.exit(1)
    defaults = vars(parser.parse_args(["serve"]))
    args.non_default = {k: v for k, v in vars(args).items()
                        if k != "subparser" and defaults.get(k) != v}
    args.model = args.model_tag or args.model
    args.host = args.host or "0.0.0.0"  # None: uvicorn binds every address
    args.served_name = (args.served_model_name or [args.model])[0]
    for key, value in SIM_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.max_model_len == -1:  # "auto"
        args.max_model_len = None
    return args
