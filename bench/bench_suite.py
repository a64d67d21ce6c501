"""The suite's wall time under `make test`'s command against the command before it, on the same test files in one run.

old: `pytest -q FILES` (one process, as `make test` ran the suite before pytest-xdist);
new: `pytest -q -n JOBS --dist loadfile FILES` (`make test`: JOBS workers, each file's tests in one worker, the longest
     files first, one torch thread per worker: tests/conftest.py).
Each command runs REPEATS times, old and new alternating (old first), so a load that drifts during the bench weighs on
both; the figure is the old median over the new median. Both must pass the same number of tests (what fails is
printed, and the bench exits non-zero). The load averages before and after each run are printed beside it (a shared
machine's figures move with them).

    .venv/bin/python bench/bench_suite.py [--jobs 2] [--repeats 1] [FILES ...]

Without FILES: SUBSET, files whose tests train, start servers and workers or only compute (about 5% of the suite).
Goal: the whole suite under 15 minutes on a 2-core machine, which takes new at least 2.1x faster than old.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBSET = [f"tests/test_{name}.py" for name in ("evaluation", "gate_loader", "run_stop", "cli", "inspection_gate",
                                               "memory_planner")]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run(files: list[str], xdist: list[str]) -> tuple[float, int, str]:
    """Wall seconds, tests passed and the summary line of one pytest over `files`."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, *files]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "CI": "1"})
    seconds = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:  # its time still printed: a test that fails under one command alone is a finding
        print("\n".join(line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))))
    passed = re.search(r"(\d+) passed", summary)
    return seconds, int(passed[1]) if passed else 0, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("files", nargs="*", default=SUBSET)
    parser.add_argument("--jobs", type=int, default=2, help="xdist workers of the new command (make's TEST_JOBS)")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    try:
        import xdist  # noqa: F401
    except ImportError:
        sys.exit("pytest-xdist is not installed in this Python: `make venv` installs the test extra from the lock")
    commands = {"old": [], "new": ["-n", str(args.jobs), "--dist", "loadfile"]}
    print(f"{len(args.files)} files, {os.cpu_count()} cores, new = -n {args.jobs} --dist loadfile")
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    counts: set[int] = set()
    for _ in range(args.repeats):
        for name, xdist in commands.items():
            before = load()
            took, passed, summary = run(args.files, xdist)
            seconds[name].append(took)
            counts.add(passed)
            print(f"{name}: {took:7.1f} s  load {before} -> {load()}  ({summary})", flush=True)
    old, new = statistics.median(seconds["old"]), statistics.median(seconds["new"])
    print(f"old {old:.1f} s, new {new:.1f} s: {old / new:.2f}x (tests passed: {sorted(counts)})")
    if len(counts) != 1:
        sys.exit("old and new passed different numbers of tests (above: what failed)")


if __name__ == "__main__":
    main()
