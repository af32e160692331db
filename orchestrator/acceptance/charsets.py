"""The character sets the `language` check judges with, shipped as data (data/zh_*.txt)."""
from __future__ import annotations

import re
from functools import cache
from importlib import resources

CJK_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@cache
def charset(name: str) -> frozenset[str]:
    """`zh_simplified_only` / `zh_traditional_only`: every character of the file's non-comment lines."""
    text = resources.files(__package__).joinpath("data", f"{name}.txt").read_text(encoding="utf-8")
    return frozenset("".join(line.strip() for line in text.splitlines() if not line.startswith("#")))


def cjk_count(text: str) -> int:
    return len(CJK_RE.findall(text))


def simplified_only(text: str) -> list[str]:
    """The Simplified-only characters in `text`, each once, in order."""
    bad = charset("zh_simplified_only")
    return list(dict.fromkeys(ch for ch in text if ch in bad))
