"""What a process that forces a CPU kernel set (ATEN_CPU_CAPABILITY: each stands in for another user's CPU, issue 32)
needs beyond the variable: a compile cache of its own. The kernel set in use is demo_models.cpu_capability."""

from __future__ import annotations

import os
import stat
import tempfile

# torch's compile cache (inductor's FX graph cache, torch 2.13) leaves the CPU kernel set out of its key: C++ compiled
# for the machine's native set and loaded under a lower one that ATEN_CPU_CAPABILITY forces is rebuilt without the
# vector headers and fails ("'at::vec' has not been declared"); vLLM's CPU sampler is compiled so, and its engine
# died at the first request (docs/vllm-cpu.md, "What had to change", 6). A process that forces a set gets a cache of
# its own: the cache it would use, suffixed with the set. Always, not only when unset: importing TRL sets the variable
# to torch's default, and every child inherits it. $UID: bash's own (read-only), no `id` looked up on PATH.
KERNEL_SET_CACHE_LINE = (
    'if [ -n "$ATEN_CPU_CAPABILITY" ]; then d="${TORCHINDUCTOR_CACHE_DIR:-${TMPDIR:-/tmp}/torchinductor_$UID}"; '
    'export TORCHINDUCTOR_CACHE_DIR="${d%_$ATEN_CPU_CAPABILITY}_$ATEN_CPU_CAPABILITY"; fi')


def private_compile_cache() -> str:
    """This process's compile cache (TORCHINDUCTOR_CACHE_DIR, which torch reads at each compile and its children
    inherit): what KERNEL_SET_CACHE_LINE does in a launch script, and a folder only this user can write. Torch's
    default, <tmp>/torchinductor_<user>, is made with exist_ok in the shared temp folder: another user who made it
    first (or a link there) would hand every compile code of theirs to load (round 18). A cache that is not a
    folder of this user's, writable by no one else, under folders no one else can rename it in, is replaced by
    this user's own under $XDG_CACHE_HOME (~/.cache/llm-finetuning/torchinductor), else by a fresh one of this
    process's (mkdtemp: 0700, made here)."""
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for cache in (os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                            f"torchinductor_{os.getuid()}"),
                  os.path.join(home, "llm-finetuning", "torchinductor")):
        if forced:
            cache = cache.removesuffix(f"_{forced}") + f"_{forced}"
        if private_folder(cache):
            break
    else:
        cache = tempfile.mkdtemp(prefix="llm-finetuning-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    return cache


def private_folder(path: str) -> bool:
    """`path` made (0700) when absent; True when it is a folder, not a link, owned by this user and writable by no
    other, and every entry above it (as written and as resolved) is this user's or root's, a folder among them
    writable by others only when sticky (/tmp): no one else can rename it away and put theirs in its place."""
    path = os.path.abspath(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
            return False
        for above in (path, os.path.realpath(path)):
            while above != os.path.dirname(above):
                above = os.path.dirname(above)
                entry = os.lstat(above)
                if entry.st_uid not in (0, os.getuid()) or (
                        not stat.S_ISLNK(entry.st_mode) and entry.st_mode & 0o022 and not entry.st_mode & stat.S_ISVTX):
                    return False
    except OSError:
        return False
    return True
