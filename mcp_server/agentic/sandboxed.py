"""Model-written code that a tool runs goes into the plugin's bubblewrap sandbox (rewards/sandbox.py), never the
host: a fresh sandbox per call with no network, the system read-only, a private size-capped /tmp, no host home,
files or environment, rlimits and a wall-clock timeout that kills everything inside. Without a working bwrap
nothing runs: `SandboxUnavailable` propagates, and TRL records it as that call's `{'error': ...}`.

An environment's method (or a standalone tool) calls `run_code(code)`; `execute_python` is such a tool, ready
to pass as `tools=["mcp_server.agentic.sandboxed:execute_python"]`. What comes back is capped at
`max_bytes` of UTF-8, so a tool can declare `max_result_tokens` truthfully (a byte-level tokenizer makes at
most one token per byte) and emission sizes max_completion_length from it.
"""

from __future__ import annotations

from mcp_server.rewards.sandbox import Limits, run_python

TOOL_LIMITS = Limits(timeout_s=5.0, max_output_bytes=16 * 1024)
MAX_RESULT_BYTES = 512


def _cap(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", "ignore")


def run_code(code: str, limits: Limits = TOOL_LIMITS, max_bytes: int = MAX_RESULT_BYTES) -> str:
    """Run `code` in a fresh sandbox: what it printed (stdout and stderr), and a last line `[error: why]` when it
    raised, timed out or flooded; at most `max_bytes` bytes of UTF-8 in all (the error line kept)."""
    result = run_python(code, "assert True\n", limits)  # the tests only say whether the code ran to its end
    if result.passed:
        return _cap(result.output, max_bytes)
    error = _cap(f"[error: {result.error or 'failed'}]", max_bytes)
    head = _cap(result.output, max(0, max_bytes - len(error.encode("utf-8")) - 1))
    return f"{head}\n{error}" if head else error


def execute_python(code: str) -> str:
    """Run a Python program in a sandbox (no network, no files outside its own /tmp, a few seconds) and return
    what it prints.

    Args:
        code: The Python program to run; print what you want to see.
    """
    return run_code(code)


execute_python.max_result_tokens = MAX_RESULT_BYTES
