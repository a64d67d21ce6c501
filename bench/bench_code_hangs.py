"""Benchmark: the code reward on a batch where some completions hang, vs one `pytest` subprocess per completion.

64 completions (default): 8 infinite loops (`while True: pass`, the common hang of generated code) spread among
56 completions of bench_sandbox.py's problems (right, wrong, crashing, not parsing). Every side gets the same
per-completion timeout, the reward's default 10 s: the baseline runs `python -m pytest` on each completion one
after the other, killing it at the timeout, as a naive reward would; "now" is `code_execution_reward` with its
defaults; "before" is the sandbox as it was at BEFORE_REV (4 runs at a time on 2 cores, every loop holding its
slot and a core until the wall clock ran out), loaded from git. Prints the wall times, the ratios (goal: >= 30x
serial pytest) and whether every verdict is identical (exit 1 if not).

    .venv/bin/python bench/bench_code_hangs.py [--completions 64] [--hangs 8] [--timeout 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sandbox import make_completions  # noqa: E402

from mcp_server.rewards import build_reward_funcs  # noqa: E402
from mcp_server.rewards.code import extract_code  # noqa: E402
from mcp_server.rewards.sandbox import check_sandbox  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEFORE_REV = "f48fad9"  # main before issue 26's CPU budget and elastic slots


def load_before(rev: str):
    """sandbox.py and harness.py at `rev`, as a module of their own (standard library only)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-before-sandbox-"))
    for name in ("sandbox.py", "harness.py"):
        proc = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:mcp_server/rewards/{name}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"cannot read {name} at {rev} from git (a clone with history is needed): {proc.stderr.strip()}")
        (folder / name).write_text(proc.stdout)
    spec = importlib.util.spec_from_file_location("before_sandbox", folder / "sandbox.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["before_sandbox"] = module  # dataclasses looks its module up
    spec.loader.exec_module(module)
    return module

LOOP = "Here:\n```python\ndef add(a, b):\n    while True:\n        pass\n\nadd(1, 2)\n```\n"
LOOP_TESTS = "def test_add():\n    assert add(2, 3) == 5\n"


def workload(n: int, hangs: int) -> tuple[list[str], list[str]]:
    completions, tests = make_completions(n - hangs)
    step = max(1, n // max(hangs, 1))
    for k in range(hangs):  # spread through the batch, as a sampler would return them
        completions.insert(min(k * step, len(completions)), LOOP)
        tests.insert(min(k * step, len(tests)), LOOP_TESTS)
    return completions, tests


def pytest_serial(completions: list[str], tests: list[str], timeout: float) -> list[float]:
    """One `python -m pytest` per completion, killed at `timeout` (a timeout scores 0)."""
    scores = []
    for completion, test in zip(completions, tests, strict=True):
        with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
            Path(tmp, "solution.py").write_text(extract_code(completion))
            Path(tmp, "test_solution.py").write_text("from solution import *\n\n" + test)
            try:
                proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                       "test_solution.py"], cwd=tmp, capture_output=True, timeout=timeout)
                scores.append(1.0 if proc.returncode == 0 else 0.0)
            except subprocess.TimeoutExpired:
                scores.append(0.0)
    return scores


def timed(score, rounds: int) -> tuple[float, list[float]]:
    seconds, scores = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        scores = score()
        seconds.append(time.perf_counter() - t0)
    return statistics.median(seconds), scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--hangs", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=10.0, help="Per-completion timeout, every side (s).")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds of the reward (median); the others run once.")
    parser.add_argument("--before-rev", default=BEFORE_REV)
    args = parser.parse_args()

    print(f"sandbox: {check_sandbox()}  cpus: {os.cpu_count()}  completions: {args.completions} "
          f"({args.hangs} infinite loops)  timeout: {args.timeout:g} s  before: {args.before_rev}")
    completions, tests = workload(args.completions, args.hangs)
    (reward,) = build_reward_funcs([{"name": "code_execution_reward", "params": {"timeout_s": args.timeout}}])
    before = load_before(args.before_rev)
    jobs = [(extract_code(c), t) for c, t in zip(completions, tests, strict=True)]
    reward(completions[:4], tests=tests[:4])  # warm the sandbox check and the page cache
    before.run_many(jobs[:4], before.Limits(timeout_s=args.timeout))

    ours_s, ours = timed(lambda: reward(completions, tests=tests), args.rounds)
    before_s, was = timed(lambda: [1.0 if r.passed else 0.0
                                   for r in before.run_many(jobs, before.Limits(timeout_s=args.timeout))], 1)
    baseline_s, baseline = timed(lambda: pytest_serial(completions, tests, args.timeout), 1)

    n = len(completions)
    print(f"{'':44}{'wall s':>9}{'ms/completion':>15}{'passed':>8}")
    for name, secs, scores in (("pytest subprocess per completion, serial", baseline_s, baseline),
                               ("code_execution_reward, now", ours_s, ours),
                               (f"code_execution_reward, before ({args.before_rev})", before_s, was)):
        print(f"{name:44}{secs:9.2f}{1000 * secs / n:15.1f}{int(sum(scores)):8d}")
    ratio = baseline_s / ours_s
    print(f"speed ratio vs serial pytest: {ratio:.1f}x (goal >= 30x: {'met' if ratio >= 30 else 'MISSED'}); "
          f"before: {baseline_s / before_s:.1f}x")
    same = baseline == ours == was
    print(f"verdicts identical: {same}" + ("" if same else f"\n  pytest: {baseline}\n  now:    {ours}\n"
                                                           f"  before: {was}"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
