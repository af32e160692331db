"""What a real shell makes of a command's text: bash reads it, a function named like the command prints its
arguments NUL-separated. Used to prove printed commands paste into a shell as the argv they show."""

from __future__ import annotations

import subprocess


def shell_words(text: str) -> list[str]:
    """The words bash reads from `text` (line continuations, quotes and all), the command's name first."""
    name = text.split(None, 1)[0]
    script = f"{name}() {{ printf '%s\\0' {name} \"$@\"; }}\n{text}\n"
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, check=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=30)
    return done.stdout.decode().split("\0")[:-1]
