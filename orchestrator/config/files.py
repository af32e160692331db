"""Reading a controller-side file the user named, without letting the path hang or flood the tool.

A path in a recipe, an inventory or on the command line may name a FIFO (an open blocks until a writer
comes), a device (/dev/zero never ends) or a huge file. Only regular files under a size limit are read.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileRefused(Exception):
    """The file cannot be read as asked; the message says why (without the path: the caller names it), `fix`
    what to do about it in general (a caller that knows what the file is for may say more)."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def _os_refusal(exc: OSError) -> FileRefused:
    fix = {errno.ENOENT: "check the path (a relative one starts at the current directory)",
           errno.EACCES: "make the file readable by this user (chmod u+r), or run as its owner"}.get(
        exc.errno or 0, "check the file and its directory")
    return FileRefused(f"cannot read file: {exc.strerror or exc}", fix)


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def size_text(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MiB" if size >= 1024 * 1024 else f"{size / 1024:.0f} KiB" if size >= 1024 else f"{size} bytes"


def check_regular(path: str | Path) -> os.stat_result:
    """stat() the path (following links): it must exist and be a regular file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _os_refusal(exc) from None
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"is {kind_of(st.st_mode)}, not a regular file", "name the file itself")
    return st


def read_regular(path: str | Path, limit: int) -> bytes:
    """The whole file, if it is a regular file of at most `limit` bytes.

    The size is checked before reading, and again while reading (the file may grow, or be swapped for a
    FIFO between stat and open: O_NONBLOCK keeps that open from blocking, fstat then refuses it).
    """
    st = check_regular(path)
    if st.st_size > limit:
        raise FileRefused(f"file is {size_text(st.st_size)}, over the {size_text(limit)} limit",
                          "name the right file (this one is far larger than any it could be)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise _os_refusal(exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FileRefused(f"is {kind_of(mode)}, not a regular file", "name the file itself")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(65536, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _os_refusal(exc) from None
    finally:
        os.close(fd)
    if total > limit:
        raise FileRefused(f"file grew past the {size_text(limit)} limit while being read",
                      "name a file nothing is writing to")
    return b"".join(chunks)
