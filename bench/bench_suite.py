"""The suite's wall time now against before, on the same test files in one run; and where a run's time went.

old: the test files of --before (a git ref, default `main`; its tree copied out of git into a temporary folder) under
     `pytest -q FILES` in one process, as `make test` ran the suite before pytest-xdist;
new: this checkout's test files under `pytest -q -n JOBS --dist loadfile FILES` (`make test`: JOBS workers, each
     file's tests in one worker, the longest files first, one torch thread per worker: tests/conftest.py).
So the figure holds both what the tests themselves stopped paying for (shared set-ups, constructed inputs) and the
workers. Each command runs REPEATS times, old and new alternating (old first), so a load that drifts during the
bench weighs on both; the figure is the old median over the new median. Both must pass the same number of tests
(what fails is printed, and the bench exits non-zero). The load averages before and after each run are printed
beside it (a shared machine's figures move with them).

    .venv/bin/python bench/bench_suite.py [--before main] [--jobs 2] [--repeats 1] [FILES ...]
    .venv/bin/python bench/bench_suite.py --times RUN.xml [--top 30]   # pytest --junitxml=RUN.xml: per file, test

Without FILES: SUBSET, files whose tests train, start servers and workers or only compute.
Goal: the whole suite under 15 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBSET = [f"tests/test_{name}.py" for name in ("evaluation", "gate_loader", "run_stop", "cli", "inspection_gate",
                                               "memory_planner", "no_signal_said", "launch_baseline")]


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run(root: Path, files: list[str], xdist: list[str]) -> tuple[float, int, str]:
    """Wall seconds, tests passed and the summary line of one pytest over `files` of the tree `root`."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *xdist, *files]
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env = {**os.environ, "CI": "1", "PYTHONPATH": os.pathsep.join([str(root), *paths])}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0:  # its time still printed: a test that fails under one command alone is a finding
        print("\n".join(line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))))
    passed = re.search(r"(\d+) passed", summary)
    return seconds, int(passed[1]) if passed else 0, summary


def tree_of(ref: str, into: Path) -> Path:
    """`ref`'s files (git archive), with this checkout's venvs linked in, so its tests import its own code."""
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    for venv in (".venv", ".venv-trackers", ".venv-vllm"):
        if (ROOT / venv).exists():
            (into / "tree" / venv).symlink_to((ROOT / venv).resolve())
    return into / "tree"


def times(xml: Path, top: int) -> None:
    """Seconds per test file (setup, call and teardown of its tests) and the slowest tests of a junit XML run."""
    per_file: collections.Counter = collections.Counter()
    per_test = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        seconds = float(case.get("time", 0))
        name = case.get("classname", "").split(".")[-1] + ".py"
        per_file[name] += seconds
        per_test.append((seconds, f"{name}::{case.get('name')}"))
    total = sum(per_file.values())
    print(f"{len(per_test)} tests, {total:.0f} s in tests ({len(per_file)} files); slowest files:")
    for name, seconds in per_file.most_common(top):
        print(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {name}")
    print("slowest tests:")
    for seconds, name in sorted(per_test, reverse=True)[:top]:
        print(f"{seconds:8.1f} s  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("files", nargs="*", default=SUBSET)
    parser.add_argument("--before", default="main", help="the git ref whose tests, in one process, are `old`")
    parser.add_argument("--jobs", type=int, default=2, help="xdist workers of the new command (make's TEST_JOBS)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--times", type=Path, help="print where a --junitxml run's time went, and run nothing")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.times:
        return times(args.times, args.top)
    try:
        import xdist  # noqa: F401
    except ImportError:
        sys.exit("pytest-xdist is not installed in this Python: `make venv` installs the test extra from the lock")
    with tempfile.TemporaryDirectory(prefix="bench-suite-") as folder:
        before = tree_of(args.before, Path(folder))
        commands = {"old": (before, []), "new": (ROOT, ["-n", str(args.jobs), "--dist", "loadfile"])}
        print(f"{len(args.files)} files, {os.cpu_count()} cores; old = {args.before} in one process, "
              f"new = this checkout, -n {args.jobs} --dist loadfile")
        seconds: dict[str, list[float]] = {"old": [], "new": []}
        counts: set[int] = set()
        for _ in range(args.repeats):
            for name, (root, xdist) in commands.items():
                was = load()
                took, passed, summary = run(root, args.files, xdist)
                seconds[name].append(took)
                counts.add(passed)
                print(f"{name}: {took:7.1f} s  load {was} -> {load()}  ({summary})", flush=True)
    old, new = statistics.median(seconds["old"]), statistics.median(seconds["new"])
    print(f"old {old:.1f} s, new {new:.1f} s: {old / new:.2f}x (tests passed: {sorted(counts)})")
    if len(counts) != 1:
        sys.exit("old and new passed different numbers of tests (above: what failed)")


if __name__ == "__main__":
    main()
