"""Pure: a plan's rendered `vllm serve` flags, and those flags judged against an image's parser (its
`--help=all`, parsed by help_parse). Preflight's vllm-flags check and `upgrade` (the new image's parser)
both judge with these."""

from __future__ import annotations

import difflib

from ..render.plan import Plan
from .help_parse import Options, canonical


def rendered_flags(plan: Plan) -> list[tuple[str, str | None]]:
    """Every (option token, its value or None) of every rank's `vllm serve` argv, in order, once each:
    the tokens after the image ID (after `vllm serve` when the image's entrypoint is not already it)."""
    seen: dict[tuple[str, str | None], None] = {}
    for launch in plan.ranks:
        argv = list(launch.argv)
        tokens = argv[argv.index(plan.image_id) + 1:]
        if not launch.spec.serve_entrypoint:
            tokens = tokens[2:]
        for i, tok in enumerate(tokens):
            if not tok.startswith("-") or tok == "-":
                continue
            flag, eq, value = tok.partition("=")
            if not eq:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                value = nxt if nxt is not None and not nxt.startswith("-") else None
            seen[(flag, value)] = None
    return list(seen)


def judge_flags(flags: list[tuple[str, str | None]], options: Options) -> tuple[list[str], list[str]]:
    """Pure: (failures, warnings), each naming the flag and the closest real option strings."""
    fails, warns = [], []
    for flag, value in flags:
        name = canonical(flag, options)
        if name not in options:
            close = difflib.get_close_matches(name, list(options), n=3, cutoff=0.6)
            fails.append(f"unknown flag {flag}" + (f" (closest: {', '.join(close)})" if close else ""))
            continue
        choices = options[name]
        if choices is None or value is None or value in choices:
            continue
        norm = value.lower().replace("-", "_")
        if norm in choices:
            warns.append(f"{flag} {value!r} is accepted only if the option normalises case and dashes "
                         f"(vLLM's backend flags do): write {norm!r}")
            continue
        close = difflib.get_close_matches(norm, list(choices), n=3, cutoff=0.5)
        fails.append(f"{flag}: invalid choice {value!r}" + (f" (closest: {', '.join(close)})" if close else "")
                     + f"; choices: {', '.join(choices)}")
    return fails, warns

