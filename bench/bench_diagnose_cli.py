"""`llm-finetuning diagnose-run` on a 200 MB progress.jsonl, patches validated, against `wc -l` on the same file.

The run directory's train/logs/progress.jsonl is written as bench_progress_log.py writes it (a NaN burst mid-run,
so the diagnosis has findings with patches to validate). Each figure is a whole CLI process, timed from start to
exit, with its own peak RSS (os.wait4):
- `wc -l` on the log: the baseline (reading the file at C speed);
- diagnose-run as shipped now: patches validated by the per-user warm worker (started by a first call, not
  timed: a person's second call finds it running);
- diagnose-run with LLM_FINETUNING_CLI_WORKER=0: the patches validated in the CLI's own process (before: it
  imports TRL);
- diagnose-run --no-validate.
Goals: within 30x `wc -l` and under 150 MB, with the patches validated (the output says so).

    .venv/bin/python bench/bench_diagnose_cli.py [--mb 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_log(path: Path, megabytes: float) -> int:
    spec = importlib.util.spec_from_file_location("bench_progress_log", ROOT / "bench" / "bench_progress_log.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_log(path, megabytes)


def peak_of(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, stdout) of one process, timed by a fresh parent that reports its child's peak
    RSS (RUSAGE_CHILDREN is a maximum over every child reaped, so each measurement needs a parent of its own)."""
    code = ("import json, os, resource, subprocess, sys, time\n"
            "t0 = time.perf_counter()\n"
            "p = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True)\n"
            "t = time.perf_counter() - t0\n"
            "print(json.dumps([t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, p.returncode, "
            "p.stdout, p.stderr[-3000:]]))\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(cmd)], env=env, capture_output=True, text=True)
    seconds, rss, code_, out, err = json.loads(proc.stdout)
    if code_ not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({code_}):\n{err}")
    return seconds, rss, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-diagnose-") as name:
        tmp = Path(name)
        run_dir = tmp / "runs" / "2026-01-01-long"
        log = run_dir / "train" / "logs" / "progress.jsonl"
        lines = write_log(log, args.mb)
        (tmp / "runtime").mkdir(mode=0o700)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LLM_FINETUNING_WORKSPACE": str(tmp),
               "XDG_RUNTIME_DIR": str(tmp / "runtime"), "LLM_FINETUNING_WORKER_IDLE_S": "120"}
        env.pop("LLM_FINETUNING_PYTHON", None)
        cli = [sys.executable, "-m", "mcp_server.cli", "diagnose-run", str(run_dir), "--json"]
        arms = {
            "wc -l (baseline)": (["wc", "-l", str(log)], env),
            "diagnose-run (warm worker validates)": (cli, env),
            "diagnose-run, LLM_FINETUNING_CLI_WORKER=0 (before)": (cli, {**env, "LLM_FINETUNING_CLI_WORKER": "0"}),
            "diagnose-run --no-validate": (cli + ["--no-validate"], env),
        }
        first = peak_of(cli, env)  # starts the warm worker
        results: dict[str, list] = {k: [] for k in arms}
        for _ in range(args.repeats):
            for label, (cmd, arm_env) in arms.items():
                results[label].append(peak_of(cmd, arm_env))
        print(f"progress.jsonl: {log.stat().st_size / 1e6:.0f} MB, {lines} lines; median of {args.repeats}")
        print(f"  first diagnose-run (starts the warm worker): {first[0]:.2f} s, {first[1]:.0f} MB")
        base = statistics.median(r[0] for r in results["wc -l (baseline)"])
        ok = True
        for label, runs in results.items():
            seconds, rss = statistics.median(r[0] for r in runs), max(r[1] for r in runs)
            line = f"  {label:52} {seconds:6.2f} s  {seconds / base:6.1f}x wc -l  peak {rss:5.0f} MB"
            if label.startswith("diagnose-run (warm"):
                diagnosis = json.loads(runs[-1][2])
                checked = [f["patch_valid"] for f in diagnosis["findings"] if f.get("patch")]
                validated = bool(checked) and all(v is not None for v in checked)
                good = seconds <= 30 * base and rss < 150 and validated
                ok = ok and good
                line += (f"  patches validated: {sum(v is True for v in checked)}/{len(checked)}"
                         f"   goal <= 30x and < 150 MB: {'PASS' if good else 'FAIL'}")
            print(line)
        from bench_warm_worker import stop_daemons

        stop_daemons(tmp / "runtime")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
