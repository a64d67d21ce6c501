"""Benchmark: the sandboxed, parallel code-execution reward vs one `pytest` subprocess per completion.

Same completions, same tests, run side by side in this process: the baseline writes each completion's
code to solution.py and its tests to test_solution.py (`from solution import *` first) and runs
`python -m pytest` on it, one after the other, as a naive reward would; ours is
`code_execution_reward` (one bubblewrap sandbox per completion, in parallel). Prints both wall times,
the speed ratio (goal: >= 10x) and checks that every verdict is identical (exit 1 if not).

    .venv/bin/python bench/bench_sandbox.py [--completions 24] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp_server.rewards import build_reward_funcs
from mcp_server.rewards.code import extract_code
from mcp_server.rewards.sandbox import check_sandbox

# (tests, right solution, wrong solutions...): the wrong ones fail an assert, raise, or do not parse.
PROBLEMS = [
    (
        "def test_small():\n    assert add(2, 3) == 5\n\ndef test_negative():\n    assert add(-1, 1) == 0\n",
        "def add(a, b):\n    return a + b\n",
        ["def add(a, b):\n    return a - b\n", "def add(a, b)\n    return a + b\n"],
    ),
    (
        "def test_primes():\n    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]\n",
        "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n",
        ["def is_prime(n):\n    return n % 2 == 1\n", "def is_prime(n):\n    return n / 0\n"],
    ),
    (
        "class TestFizz:\n    def test_values(self):\n        assert [fizz(i) for i in (3, 5, 15, 7)] == ['Fizz', "
        "'Buzz', 'FizzBuzz', '7']\n",
        "def fizz(i):\n    return 'Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0) or str(i)\n",
        ["def fizz(i):\n    return str(i)\n", "import sys\nsys.exit(3)\n"],
    ),
    (
        "def test_reverse():\n    assert rev('abc') == 'cba'\n    assert rev('') == ''\n",
        "def rev(s):\n    return s[::-1]\n",
        ["def rev(s):\n    return ''.join(sorted(s, reverse=True))\n", "def rev(s):\n    raise NotImplementedError\n"],
    ),
]


def make_completions(n: int) -> tuple[list[str], list[str]]:
    """n markdown completions (a third right) and their tests, cycling through the problems."""
    completions, tests = [], []
    for i in range(n):
        test, right, wrongs = PROBLEMS[i % len(PROBLEMS)]
        variants = [right] + wrongs
        code = variants[(i // len(PROBLEMS)) % len(variants)]
        completions.append(f"Here is my solution:\n```python\n{code}```\nIt handles the cases.")
        tests.append(test)
    return completions, tests


def pytest_baseline(completions: list[str], tests: list[str]) -> list[float]:
    """One `python -m pytest` subprocess per completion, in a fresh directory each."""
    scores = []
    for completion, test in zip(completions, tests, strict=True):
        with tempfile.TemporaryDirectory(prefix="bench-pytest-") as tmp:
            Path(tmp, "solution.py").write_text(extract_code(completion))
            Path(tmp, "test_solution.py").write_text("from solution import *\n\n" + test)
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solution.py"],
                cwd=tmp, capture_output=True, timeout=120,
            )
            scores.append(1.0 if proc.returncode == 0 else 0.0)
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=24)
    parser.add_argument("--workers", type=int, default=None, help="Parallel sandboxes (default: the reward's own).")
    args = parser.parse_args()

    print(f"sandbox: {check_sandbox()}  cpus: {os.cpu_count()}  completions: {args.completions}")
    completions, tests = make_completions(args.completions)
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"workers": args.workers}}])
    reward(completions[:2], tests=tests[:2])  # warm the sandbox check and the interpreter's page cache

    t0 = time.perf_counter()
    baseline = pytest_baseline(completions, tests)
    baseline_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = reward(completions, tests=tests)
    ours_s = time.perf_counter() - t0
    # The same reward one sandbox at a time: how much of the gain is the lean harness, how much parallelism.
    (serial_reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"workers": 1}}])
    t0 = time.perf_counter()
    serial = serial_reward(completions, tests=tests)
    serial_s = time.perf_counter() - t0

    n = len(completions)
    print(f"{'':34}{'wall s':>9}{'ms/completion':>15}{'passed':>8}")
    print(
        f"{'pytest subprocess per completion':34}{baseline_s:9.2f}{1000 * baseline_s / n:15.1f}{int(sum(baseline)):8d}"
    )
    print(f"{'code_execution_reward (sandbox)':34}{ours_s:9.2f}{1000 * ours_s / n:15.1f}{int(sum(ours)):8d}")
    print(f"{'  same, one sandbox at a time':34}{serial_s:9.2f}{1000 * serial_s / n:15.1f}{int(sum(serial)):8d}")
    ratio = baseline_s / ours_s
    same = baseline == ours == serial
    print(f"speed ratio: {ratio:.1f}x (goal >= 10x: {'met' if ratio >= 10 else 'MISSED'}); "
          f"serial sandbox alone: {baseline_s / serial_s:.1f}x")
    print(f"verdicts identical: {same}" + ("" if same else f"\n  pytest: {baseline}\n  ours:   {ours}"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
