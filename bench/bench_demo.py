"""The full demo as a benchmark: does GRPO improve the tiny model, and how long does the lifecycle take?

Runs `llm-finetuning demo` (all seven phases) in a temporary workspace and prints the figures side by side:
base model, after the SFT warm-start (the baseline GRPO must beat), after GRPO, and the wall time.
Goals: GRPO's pass rate above the warm-start's 95% interval (a PROMOTE), in under 10 minutes on 2 CPU cores.

    .venv/bin/python bench/bench_demo.py
"""

from __future__ import annotations

import os
import sys
import tempfile


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        os.chdir(ws)
        from mcp_server.demo import run_demo

        summary = run_demo()
    print("\nbench_demo")
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
    print(f"  wall time         {summary.seconds:.0f} s   (goal < 600 s on 2 CPU cores)")
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
