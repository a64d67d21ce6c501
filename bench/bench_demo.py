"""The full demo as a benchmark: does GRPO improve the tiny model, how long does the lifecycle take, and how much
does its GRPO phase gain from the cores it has?

Runs `llm-finetuning demo` (all seven phases) in a temporary workspace and prints the figures side by side:
base model, after the SFT warm-start (the baseline GRPO must beat), after GRPO, the paired lift, and the wall
time. Then, as the baseline measured in the same run, the demo again with its GRPO training process on one
thread (LLM_FINETUNING_DEMO_THREADS=1, as before): the GRPO phase's time ratio and both lifts.
Goals: GRPO's pass rate above the warm-start's 95% interval (a PROMOTE), in under 10 minutes on 2 CPU cores;
the GRPO phase at most 0.75x the one-thread run's, with the same lift.

    .venv/bin/python bench/bench_demo.py [--once]    (--once: the demo as shipped only, no one-thread baseline)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile


def run(threads: str | None):
    """The demo's summary, with its GRPO training on `threads` threads (None: all the cores it has, at most 4)."""
    from mcp_server.demo import run_demo, training_threads

    if threads is None:
        os.environ["LLM_FINETUNING_DEMO_THREADS"] = "cores"
    else:
        os.environ["LLM_FINETUNING_DEMO_THREADS"] = threads
    used = training_threads()
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        os.chdir(ws)
        summary = run_demo()
        os.chdir("/")
    return summary, used


def grpo_seconds(summary) -> float:
    return next(p.seconds for p in summary.phases if p.name.startswith("4 "))


def report(summary, threads: int) -> None:
    print(f"\nbench_demo (GRPO training on {threads} thread(s))")
    print(f"  base model        {summary.baseline_pass_rate:6.1%}")
    print(f"  after SFT         {summary.sft_pass_rate:6.1%}   95% CI {summary.sft_ci[0]:.1%}-{summary.sft_ci[1]:.1%}")
    if summary.grpo_pass_rate is not None:
        ratio = summary.grpo_pass_rate / summary.sft_pass_rate if summary.sft_pass_rate else float("inf")
        print(f"  after GRPO        {summary.grpo_pass_rate:6.1%}   95% CI "
              f"{summary.grpo_ci[0]:.1%}-{summary.grpo_ci[1]:.1%}"
              f"   ({ratio:.2f}x the warm-start)")
    print(f"  improvement       {summary.improvement_points:+.1f} points, 95% CI {summary.improvement_ci[0]:+.1f} to "
          f"{summary.improvement_ci[1]:+.1f} (paired)"
          f"; above the warm-start interval: {summary.above_sft_interval}")
    print(f"  verdict           {summary.verdict}")
    print(f"  GRPO phase        {grpo_seconds(summary):.0f} s")
    print(f"  wall time         {summary.seconds:.0f} s   (goal < 600 s on 2 CPU cores)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="Skip the one-thread baseline run.")
    once = parser.parse_args().once
    summary, threads = run(None)
    report(summary, threads)
    if once:
        return 0 if summary.ok else 1
    baseline, _ = run("1")
    report(baseline, 1)
    ratio = grpo_seconds(summary) / grpo_seconds(baseline)
    same_lift = summary.verdict == baseline.verdict == "PROMOTE"
    print(f"\nGRPO phase on {threads} thread(s) / on 1 thread: {ratio:.2f}x   goal <= 0.75x: "
          f"{'PASS' if ratio <= 0.75 else 'FAIL'}")
    print(f"  lift {summary.improvement_points:+.1f} vs {baseline.improvement_points:+.1f} points (paired); both "
          f"PROMOTE: {same_lift}")
    return 0 if summary.ok and baseline.ok and same_lift else 1


if __name__ == "__main__":
    sys.exit(main())
