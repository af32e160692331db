"""Prompt sets per workload profile (note 19): bundled ones (package data) or the user's file.

A prompt file is UTF-8 text: prompts separated by lines of exactly `---`, lines starting with `#`
before the first prompt are comments. A `.json` file is {"profile": ["prompt", ...], ...}.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

PROFILES = ("code", "prose", "zh", "chat")


class PromptError(ValueError):
    """A prompt file or profile name that cannot be used; the message names file:line."""


def parse_text(text: str, where: str) -> list[str]:
    prompts, current, start, line_no = [], [], 1, 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.strip() == "---":
            body = "\n".join(current).strip()
            if not body:
                raise PromptError(f"{where}:{line_no}: empty prompt before this separator (lines {start}-{line_no})")
            prompts.append(body)
            current, start = [], line_no + 1
        elif not (line.startswith("#") and not prompts and not "".join(current).strip()):
            current.append(line)
    body = "\n".join(current).strip()
    if body:
        prompts.append(body)
    elif prompts:
        raise PromptError(f"{where}:{line_no}: empty prompt after the last separator")
    if not prompts:
        raise PromptError(f"{where}:1: no prompts (prompts are separated by lines of ---)")
    return prompts


def bundled(profile: str) -> list[str]:
    if profile not in PROFILES:
        raise PromptError(f"unknown profile {profile!r} (bundled: {', '.join(PROFILES)}; or --prompts FILE)")
    text = resources.files("orchestrator.bench").joinpath("prompts", f"{profile}.txt").read_text("utf-8")
    return parse_text(text, f"bundled {profile}.txt")


def load_file(path: Path) -> dict[str, list[str]]:
    """{profile: prompts} from the user's file: JSON by profile, or one text set named after the file."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"{path}: cannot read: {exc}") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PromptError(f"{path}:{getattr(exc, 'lineno', 1)}: not JSON: {exc}") from None
        if not isinstance(data, dict) or not data:
            raise PromptError(f'{path}:1: want an object {{"profile": ["prompt", ...]}}')
        for name, prompts in data.items():
            if (not isinstance(prompts, list) or not prompts
                    or not all(isinstance(p, str) and p.strip() for p in prompts)):
                raise PromptError(f"{path}: profile {name!r} must be a non-empty list of non-empty strings")
        return {str(k): list(v) for k, v in data.items()}
    return {path.stem: parse_text(text, str(path))}


def select(profiles: list[str], prompts_file: Path | None) -> dict[str, list[str]]:
    """The prompt sets to shoot: the named bundled profiles, or the file's (filtered by name if given)."""
    if prompts_file is not None:
        sets = load_file(prompts_file)
        if profiles:
            missing = [p for p in profiles if p not in sets]
            if missing:
                raise PromptError(f"{prompts_file}: no profile {', '.join(missing)} (it has: {', '.join(sets)})")
            sets = {p: sets[p] for p in profiles}
        return sets
    return {p: bundled(p) for p in (profiles or list(PROFILES))}
