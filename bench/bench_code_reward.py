"""Benchmark: the code-execution reward's throughput, graded outside the solution's process (now) vs in it (before).

Both run in this process on the same completions: "old" is `mcp_server/rewards/sandbox.py` as it was at
BASELINE_REV (one process ran the solution, the tests and printed the pass token), loaded from git into a
temporary module; "new" is the current one (a tester process grades a solution process it forks, values
crossing as JSON). Rounds alternate old/new so load on the machine hits both alike. Prints completions/s for
each, the ratio new/old (goal: >= 0.5, i.e. within 2x), whether the verdicts agree on honest work, and how
many of the reward hacks in tests/reward_hacks.py each one lets pass (goal: 0 now).

    .venv/bin/python bench/bench_code_reward.py [--completions 48] [--rounds 3] [--workers N]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from reward_hacks import CONTROLS, HACKS  # noqa: E402

from mcp_server.rewards import sandbox as new  # noqa: E402

BASELINE_REV = "5281b00"  # the last commit whose sandbox ran the tests inside the solution's process

# (tests, right solution, wrong solutions...), the workload of bench_sandbox.py plus a call-heavy one.
PROBLEMS = [
    ("def test_small():\n    assert add(2, 3) == 5\n\ndef test_negative():\n    assert add(-1, 1) == 0\n",
     "def add(a, b):\n    return a + b\n",
     ["def add(a, b):\n    return a - b\n", "def add(a, b)\n    return a + b\n"]),
    ("def test_primes():\n    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]\n",
     "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n",
     ["def is_prime(n):\n    return n % 2 == 1\n", "def is_prime(n):\n    return n / 0\n"]),
    ("class TestFizz:\n    def test_values(self):\n        assert [fizz(i) for i in (3, 5, 15, 7)] == ['Fizz', 'Buzz', "
     "'FizzBuzz', '7']\n",
     "def fizz(i):\n    return 'Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0) or str(i)\n",
     ["def fizz(i):\n    return str(i)\n", "import sys\nsys.exit(3)\n"]),
    ("assert rev('abc') == 'cba'\nassert rev('') == ''\nassert rev([1, 2]) == [2, 1]\n",
     "def rev(s):\n    return s[::-1]\n",
     ["def rev(s):\n    return ''.join(sorted(s, reverse=True))\n", "def rev(s):\n    raise NotImplementedError\n"]),
    ("def test_many():\n    for n in range(200):\n        assert square(n) == n * n\n",
     "def square(n):\n    return n * n\n",
     ["def square(n):\n    return n + n\n", "square = None\n"]),
]


def load_old(rev: str):
    """sandbox.py at `rev`, as a module of its own (it needs nothing but the standard library)."""
    proc = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:mcp_server/rewards/sandbox.py"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cannot read the baseline sandbox at {rev} from git (a clone with history is needed): "
                 f"{proc.stderr.strip()}")
    source = proc.stdout
    path = Path(tempfile.mkdtemp(prefix="bench-old-sandbox-")) / "old_sandbox.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_sandbox", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_sandbox"] = module  # dataclasses looks its module up
    spec.loader.exec_module(module)
    return module


def workload(n: int) -> list[tuple[str, str]]:
    jobs = []
    for i in range(n):
        tests, right, wrongs = PROBLEMS[i % len(PROBLEMS)]
        variants = [right] + wrongs
        jobs.append((variants[(i // len(PROBLEMS)) % len(variants)], tests))
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="Parallel sandboxes (default: the reward's own).")
    parser.add_argument("--baseline-rev", default=BASELINE_REV)
    args = parser.parse_args()

    old = load_old(args.baseline_rev)
    print(f"sandbox: {new.check_sandbox()}  cpus: {os.cpu_count()}  completions: {args.completions}  "
          f"baseline: {args.baseline_rev}")
    jobs = workload(args.completions)
    impls = {"old": old, "new": new}
    for impl in impls.values():  # warm the page cache and the sandbox check
        impl.run_many(jobs[:4], impl.Limits(), args.workers)

    seconds = {name: [] for name in impls}
    verdicts = {}
    for _ in range(args.rounds):
        for name, impl in impls.items():
            t0 = time.perf_counter()
            results = impl.run_many(jobs, impl.Limits(), args.workers)
            seconds[name].append(time.perf_counter() - t0)
            verdicts[name] = [r.passed for r in results]
    rate = {name: args.completions / statistics.median(s) for name, s in seconds.items()}
    print(f"{'':6}{'completions/s':>15}{'median s':>10}{'passed':>8}")
    for name in impls:
        print(f"{name:6}{rate[name]:15.1f}{statistics.median(seconds[name]):10.2f}{sum(verdicts[name]):8d}")
    ratio = rate["new"] / rate["old"]
    print(f"throughput ratio new/old: {ratio:.2f} (goal >= 0.5: {'met' if ratio >= 0.5 else 'MISSED'})")
    same = verdicts["old"] == verdicts["new"]
    print(f"verdicts on honest work identical: {same}")

    cases = list(HACKS.values()) + list(CONTROLS.values())
    ok = same
    for name, impl in impls.items():
        results = impl.run_many(cases, impl.Limits(), args.workers)
        hacks = [h for h, r in zip(HACKS, results) if r.passed]
        controls = sum(r.passed for r in results[len(HACKS):])
        print(f"{name}: reward hacks passed {len(hacks)}/{len(HACKS)}, honest controls passed "
              f"{controls}/{len(CONTROLS)}"
              + (f"  ({', '.join(hacks)})" if hacks else ""))
        if name == "new":
            ok = ok and not hacks and controls == len(CONTROLS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
