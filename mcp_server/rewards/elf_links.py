"""The shared libraries an ELF extension module links from its own run path (DT_RPATH / DT_RUNPATH, `$ORIGIN`
substituted), read from the bytes of the module as hashed, as the dynamic linker reads them: its program headers,
the PT_DYNAMIC segment, its DT_NEEDED names and the string table they point into.

A user extension module runs from a private copy of its hashed bytes (rewards.source_only), so a library it links
through `$ORIGIN` is not beside the copy and would not load (or would load another process's copy of that name),
and one linked from a workspace folder by an absolute run path would load unpinned: what trains could differ from
what was reviewed. source_only refuses such a module, naming the library (linked_user_libraries finds it)."""

from __future__ import annotations

import os
import struct

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29


def dynamic_entries(data: bytes) -> tuple[list[str], list[str]] | None:
    """(the DT_NEEDED names, the run path entries: DT_RUNPATH's, else DT_RPATH's, as glibc reads them) of the ELF
    file `data`; None for a file that is no ELF or whose dynamic section cannot be read (the linker refuses it)."""
    if data[:4] != b"\x7fELF" or len(data) < 0x40 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        if wide:
            phoff, = struct.unpack_from(order + "Q", data, 0x20)
            phentsize, phnum = struct.unpack_from(order + "HH", data, 0x36)
        else:
            phoff, = struct.unpack_from(order + "I", data, 0x1C)
            phentsize, phnum = struct.unpack_from(order + "HH", data, 0x2A)
        segments = []  # (type, offset, vaddr, filesz)
        for i in range(phnum):
            at = phoff + i * phentsize
            if wide:
                kind, _, offset, vaddr, _, filesz = struct.unpack_from(order + "IIQQQQ", data, at)
            else:
                kind, offset, vaddr, _, filesz = struct.unpack_from(order + "IIIII", data, at)
            segments.append((kind, offset, vaddr, filesz))
        dynamic = next(((offset, filesz) for kind, offset, _, filesz in segments if kind == PT_DYNAMIC), None)
        if dynamic is None:
            return [], []
        entry = order + ("qQ" if wide else "iI")
        tags: list[tuple[int, int]] = []
        for at in range(dynamic[0], dynamic[0] + dynamic[1], struct.calcsize(entry)):
            tag, value = struct.unpack_from(entry, data, at)
            if tag == DT_NULL:
                break
            tags.append((tag, value))
        strtab = next((v for t, v in tags if t == DT_STRTAB), None)
        base = next((offset + strtab - vaddr for kind, offset, vaddr, filesz in segments
                     if kind == PT_LOAD and strtab is not None and vaddr <= strtab < vaddr + filesz), None)
        if base is None:
            return None

        def string(at: int) -> str:
            return data[base + at: data.index(b"\0", base + at)].decode("utf-8", "surrogateescape")

        needed = [string(v) for t, v in tags if t == DT_NEEDED]
        runpath = [string(v) for t, v in tags if t == DT_RUNPATH] or [string(v) for t, v in tags if t == DT_RPATH]
    except (struct.error, ValueError, IndexError):
        return None
    return needed, [p for entry in runpath for p in entry.split(":")]


def linked_from_run_path(data: bytes, path: str) -> list[tuple[str, str, str]]:
    """(library name, run path entry, the file it resolves to) for each DT_NEEDED library of the ELF `data` (an
    extension module whose file is `path`) that its run path finds, `$ORIGIN` being the module's own folder."""
    found = dynamic_entries(data)
    if not found:
        return []
    needed, runpath = found
    origin = os.path.dirname(os.path.realpath(path))
    out = []
    for name in needed:
        for entry in runpath:
            if not entry or "$LIB" in entry or "${LIB}" in entry or "PLATFORM" in entry:
                continue
            folder = entry.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
            candidate = os.path.normpath(os.path.join(folder, name))
            if os.path.isfile(candidate):
                out.append((name, entry, candidate))
                break
    return out


def linked_user_libraries(data: bytes, path: str, is_user_file) -> list[tuple[str, str, str]]:
    """linked_from_run_path's libraries that are user files (`is_user_file`: not the interpreter's installation):
    the ones no pin covers."""
    return [link for link in linked_from_run_path(data, path) if is_user_file(link[2])]
