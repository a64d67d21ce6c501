"""Benchmark: training_status and diagnose_run on a 200 MB progress.jsonl (goal: under 300 MB and a few seconds).

A run directory whose train/logs/progress.jsonl holds `--mb` megabytes of progress lines as the callback writes
them (one JSON object of ~40 metrics per step, a NaN burst in the middle). Each measurement runs in a fresh
Python process, which prints its own peak RSS and the wall time of the work (imports excluded: the server has
them loaded):
- baseline: every line parsed into a list, as the readers did before (json.loads per line, all kept);
- read_progress_records: the streaming reader alone;
- diagnose_run and training_status: the whole tool (core API), which read the log through it.
The ratios are against the baseline measured in the same run, on the same file.

    .venv/bin/python bench/bench_progress_log.py [--mb 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (imports, not timed: the server has them loaded already; the timed work, which sets N)
MEASURE = {
    "baseline": ("import json", "rows = [json.loads(l) for l in open(PATH, encoding='utf-8') if l.strip()]\n"
                                "N = len(rows)"),
    "read_progress_records": ("from mcp_server.diagnosis.metrics import read_progress_records",
                              "N = len(read_progress_records(PATH).records)"),
    "diagnose_run": ("from mcp_server.diagnosis.diagnose import diagnose_run\n"
                     "from mcp_server.diagnosis.models import DiagnoseRequest",
                     "d = diagnose_run(DiagnoseRequest(source=RUN, validate_patches=False))\n"
                     "N = d.steps_logged; assert 'nan_loss' in {f.code for f in d.findings}, d.summary"),
    "training_status": ("from mcp_server.training.status import training_status\n"
                        "from mcp_server.training.models import StatusRequest",
                        "s = training_status(StatusRequest(run=RUN))\nN = s.step"),
}

CHILD = """
import resource, sys, time
PATH, RUN = sys.argv[1], sys.argv[2]
{setup}
t0 = time.perf_counter()
{code}
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, N)
"""


def write_log(path: Path, megabytes: float) -> int:
    """Progress lines like the callback's, until the file holds `megabytes` MB; returns the line count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    target, step, t, burst = megabytes * 1e6, 0, 1.7e9, 10
    with open(path, "w", encoding="utf-8") as handle:
        while handle.tell() < target:
            step += 1
            t += 2.0
            bad = burst > 0 and handle.tell() >= target / 2  # a NaN burst mid-run: diagnose must still see it
            burst -= bad
            line = {
                "step": step,
                "epoch": step / 1000,
                "time": t,
                "loss": math.nan if bad else 0.01 * math.sin(step),
                "lr": 5e-7,
                "reward": 0.5 + 0.1 * math.sin(step / 50),
                "reward_std": 0.3,
                "frac_reward_zero_std": 0.1,
                "kl": 0.001,
                "entropy": 0.8,
                "completion_mean_length": 120.0,
                "clipped_ratio": 0.01,
                "grad_norm": 0.5,
                "step_time": 2.0,
                "mem_gb": None,
                "temp_c": None,
                **{f"rewards/reward_{i}/mean": 0.5 for i in range(8)},
                **{f"rewards/reward_{i}/std": 0.2 for i in range(8)},
                **{
                    f"completions/{k}": 100.0
                    for k in (
                        "min_length",
                        "max_length",
                        "mean_terminated_length",
                        "min_terminated_length",
                        "max_terminated_length",
                    )
                },
            }
            handle.write(json.dumps(line) + "\n")
    return step


def measure(name: str, path: Path, run: Path, workspace: Path) -> tuple[float, float, object]:
    env = {**os.environ, "LLM_FINETUNING_WORKSPACE": str(workspace), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.format(setup=MEASURE[name][0], code=MEASURE[name][1]), str(path), str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode:
        raise SystemExit(f"{name} failed:\n{proc.stderr[-3000:]}")
    seconds, rss_mb, n = proc.stdout.split()
    return float(seconds), float(rss_mb), n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="Size of the progress log in MB.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        run = workspace / "runs" / "2026-01-01-long"
        log = run / "train" / "logs" / "progress.jsonl"
        t0 = time.perf_counter()
        lines = write_log(log, args.mb)
        print(f"progress.jsonl: {log.stat().st_size / 1e6:.0f} MB, {lines} lines (written in "
              f"{time.perf_counter() - t0:.0f} s)")
        results = {name: measure(name, log, run, workspace) for name in MEASURE}
        base_s, base_mb, _ = results["baseline"]
        print(f"{'':24} {'seconds':>8} {'peak MB':>8}  {'time/base':>9} {'mem/base':>8}  result")
        for name, (seconds, rss_mb, n) in results.items():
            print(f"{name:24} {seconds:8.1f} {rss_mb:8.0f}  {seconds / base_s:9.2f} {rss_mb / base_mb:8.2f}  {n}")
        print(json.dumps({name: {"seconds": round(s, 2), "peak_mb": round(m)} for name, (s, m, _) in results.items()}))


if __name__ == "__main__":
    main()
