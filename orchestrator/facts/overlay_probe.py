"""Run INSIDE the pinned image (`python3 -I -S -c THIS SPEC`, stdlib only): what each overlay meets there.

Why inside: the file an overlay replaces is the image's, and "does this .py compile" means with the image's
own Python (a patch written for 3.12 syntax fails on 3.10). One throwaway container answers every overlay.

argv[1]: JSON list, one entry per overlay: {"target": path in the image, "source": where the overlay's
bytes are mounted read-only (or null: not mounted, e.g. `overlay hash`), "compile": bool,
"symbols": [names]}. stdout: one JSON object per entry, in order: {"target", "exists", "sha256" (of the
image's file, null when absent or unreadable), "python" (this interpreter's version), "compile" (null: not
asked; "" compiled; else the error), "missing_symbols" (null: not asked), "elf_error"}. Nothing is written:
`compile()` builds the code object in memory.
"""

import hashlib
import json
import os
import struct
import sys

SHT_DYNSYM = 11
EXPORTED_BINDS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dynamic_symbols(data):
    """The names an ELF file's dynamic symbol table exports (defined, global/weak, default or protected
    visibility). Raises ValueError when `data` is not an ELF file or has no .dynsym."""
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(order + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(order + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", data, 0x2E)
    sections = []
    for i in range(shnum):
        at = shoff + i * shentsize
        if wide:
            _n, kind, _f, _a, off, size, link, _i, _al, entsize = struct.unpack_from(order + "IIQQQQIIQQ", data, at)
        else:
            _n, kind, _f, _a, off, size, link, _i, _al, entsize = struct.unpack_from(order + "IIIIIIIIII", data, at)
        sections.append((kind, off, size, link, entsize))
    found = set()
    tables = [s for s in sections if s[0] == SHT_DYNSYM]
    if not tables:
        raise ValueError("no dynamic symbol table (.dynsym): not a shared object")
    for _kind, off, size, link, entsize in tables:
        _sk, str_off, str_size, _l, _e = sections[link]
        strings = data[str_off:str_off + str_size]
        for at in range(off + entsize, off + size, entsize):  # entry 0 is the null symbol
            if wide:
                name, info, other, shndx = struct.unpack_from(order + "IBBH", data, at)
            else:
                name, _value, _size, info, other, shndx = struct.unpack_from(order + "IIIBBH", data, at)
            if shndx == 0 or (info >> 4) not in EXPORTED_BINDS or (other & 3) not in (0, 3):
                continue
            end = strings.index(b"\0", name)
            found.add(strings[name:end].decode("utf-8", "replace"))
    return found


def one(entry):
    target, source = entry["target"], entry.get("source")
    got = {"target": target, "exists": os.path.lexists(target), "sha256": None,
           "python": "%d.%d.%d" % sys.version_info[:3], "compile": None, "missing_symbols": None, "elf_error": None}
    if os.path.isfile(target):
        try:
            got["sha256"] = sha256(target)
        except OSError as exc:
            got["sha256_error"] = str(exc)
    if source is None:
        return got
    try:
        with open(source, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        got["source_error"] = str(exc)
        return got
    if entry.get("compile"):
        try:
            compile(data, target, "exec", dont_inherit=True)
            got["compile"] = ""
        except (SyntaxError, ValueError) as exc:
            where = " line %s" % exc.lineno if getattr(exc, "lineno", None) else ""
            got["compile"] = "%s%s: %s: %s" % (target, where, type(exc).__name__, getattr(exc, "msg", None) or exc)
    if entry.get("symbols"):
        try:
            exported = dynamic_symbols(data)
            got["missing_symbols"] = [s for s in entry["symbols"] if s not in exported]
        except (ValueError, struct.error, IndexError) as exc:
            got["elf_error"] = str(exc) or type(exc).__name__
    return got


def main(argv):
    for entry in json.loads(argv[1]):
        print(json.dumps(one(entry), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
