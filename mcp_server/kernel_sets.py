"""What a process that forces a CPU kernel set (ATEN_CPU_CAPABILITY: each stands in for another user's CPU, issue 32)
needs beyond the variable: a compile cache of its own. The kernel set in use is demo_models.cpu_capability."""

from __future__ import annotations

import os
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


def compile_cache_per_kernel_set() -> None:
    """In this process, what KERNEL_SET_CACHE_LINE does in a launch script; torch reads the variable at each compile."""
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    if forced:
        cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(),
                                                                           f"torchinductor_{os.getuid()}")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.removesuffix(f"_{forced}") + f"_{forced}"
