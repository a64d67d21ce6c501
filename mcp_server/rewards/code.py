"""Code-execution reward: run each completion's code against its tests inside the bubblewrap sandbox.

1.0 when every test passes, else 0.0: a crash, a hang, a fork bomb or a flood of output scores 0 for
that completion only. Completions run in parallel, one sandbox each. No sandbox, no execution: the
reward raises `SandboxUnavailable` instead of running anything on the host.
"""

from __future__ import annotations


from mcp_server.errors import UserInputError
from mcp_server.rewards.declared import Column
from mcp_server.rewards.named import NamedReward
from mcp_server.rewards.sandbox import Limits, run_many
from mcp_server.rewards.text import column, completion_texts, fenced_blocks, single_tag

# The fenced blocks that are Python (text.fenced_blocks): those tagged python, python3, py or not at all.
PYTHON_TAGS = ("", "python", "python3", "py")


def extract_code(text: str, code_tag: str | None = None) -> str:
    """The code in a completion: the `<code_tag>` block when a tag is set, else the last fenced Python block
    (```python ... ```, PYTHON_TAGS), else the whole text."""
    if code_tag:
        return single_tag(text, code_tag) or ""
    blocks = fenced_blocks(text, PYTHON_TAGS)
    return blocks[-1] if blocks else text


def _tests_text(value, i: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return "\n".join(value)  # e.g. MBPP's list of assert lines
    raise UserInputError("params.tests_column", f"row {i}: tests must be Python source (a string or a list of lines), "
                                                f"got {type(value).__name__}")


def _entry_points(columns: dict, name: str | None, n: int) -> list:
    """The row's entry point (HumanEval's `entry_point`: the function its `check(candidate)` is called with), when
    the data set has that column; else None for every row."""
    if not name or name not in columns:
        return [None] * n
    values = column(columns, name, n, "params.entry_point_column")
    return [v if isinstance(v, str) and v else None for v in values]


def score_code(completions: list, columns: dict, tests_column: str = "tests", code_tag: str | None = None,
               limits: Limits = Limits(), workers: int | None = None, python: str | None = None,
               entry_point_column: str | None = "entry_point") -> list[float]:
    texts = completion_texts(completions)
    tests = column(columns, tests_column, len(texts), "params.tests_column")
    entries = _entry_points(columns, entry_point_column, len(texts))
    jobs = [(extract_code(t, code_tag), _tests_text(v, i), e)
            for i, (t, v, e) in enumerate(zip(texts, tests, entries, strict=True))]
    return [1.0 if r.passed else 0.0 for r in run_many(jobs, limits, workers, python)]


def make_code_execution_reward(
    tests_column: Column = "tests", code_tag: str | None = None, timeout_s: float = 10.0, cpu_s: float = Limits.cpu_s,
    memory_mb: int = 512, max_processes: int = 8, max_output_bytes: int = 65536, workers: int | None = None,
    python: str | None = None, entry_point_column: str | None = "entry_point",
) -> NamedReward:
    """1.0 when the completion's Python code (its tag block, else its last ```python block, else all of it) passes its
    row's tests, run inside a bubblewrap sandbox (no network, read-only system, private /tmp, no host
    home/credentials/env, CPU/memory/process/output limits, wall-clock timeout), else 0.0. Tests are Python source:
    asserts, pytest-style test_* functions or Test classes, unittest.TestCase classes, or HumanEval's check(candidate)
    (called with the row's entry point), with the solution's names in scope; tests that run nothing fail, as pytest's
    'no tests ran'. The tests run in a tester process the code cannot reach and call the solution with values that
    cross as data, so frame tricks, exit codes, printed tokens and always-equal objects cannot fake a pass.
    Completions run in parallel; a crash, hang, fork bomb or output flood scores 0 for that one only. Refuses to run
    (SandboxUnavailable) where bubblewrap does not work: never on the host.

    Role: task, scores 0 to 1

    Args:
        tests_column: Data set column with each row's test code (a string, or a list of lines).
        code_tag: Tag whose body is the code; null: last fenced block, else the whole completion.
        timeout_s: Wall-clock seconds per completion (interpreter start included).
        cpu_s: CPU seconds the solution's processes may use together, its imports included (at most timeout_s): a
            busy loop stops here, not at the timeout. Raise it for heavy tests or a `python` with slow-importing
            libraries.
        memory_mb: Memory of the whole sandbox, MiB: each process's address space, and the resident memory of all
            its processes together (a forked child shares it).
        max_processes: Processes and threads allowed inside one sandbox.
        max_output_bytes: stdout+stderr cap; more scores 0.
        workers: Sandboxes run at once; null: 4x the CPU count, at most 16 (a run still going after 1 s gives its
            slot to the next).
        python: Interpreter to run inside; null: /usr/bin/python3 (stdlib-only tests).
        entry_point_column: Column naming the function HumanEval-style check(candidate) tests are called with (used
            when the data set has it).
    """
    for name, value, low in (("timeout_s", timeout_s, 0.1), ("memory_mb", memory_mb, 32),
                             ("max_processes", max_processes, 2), ("max_output_bytes", max_output_bytes, 1024),
                             ("cpu_s", cpu_s, 0.1)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
            raise UserInputError(f"params.{name}", f"expected a number >= {low}, got {value!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise UserInputError("params.workers", f"expected a positive integer or null, got {workers!r}")
    limits = Limits(timeout_s=float(timeout_s), memory_mb=int(memory_mb), max_processes=int(max_processes),
                    max_output_bytes=int(max_output_bytes), cpu_s=float(cpu_s))
    return NamedReward("code_execution_reward", score_code, tests_column=tests_column, code_tag=code_tag,
                       limits=limits, workers=workers, python=python, entry_point_column=entry_point_column)

