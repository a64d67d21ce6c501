"""Benchmark: what the live guard (training/trainer/guard.py) adds to GRPO step time (goal: under 2%).

A real TRL GRPOTrainer run on the embedded tiny model, logging every step (the guard's worst case: it checks
every log), with the guard on ("warn": every check runs, nothing stops). Step times on this CPU model are far
shorter than on any real model, so the ratio is an upper bound. The guard's cost grows with its window (at most
guard.WINDOW rows), so the check is also timed on a full window, replaying the run's own lines.

Prints JSON: median step time, the guard's time per check in the run and on a full window, and their ratios.

    .venv/bin/python bench/bench_guard.py [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    steps = parser.parse_args().steps

    import torch
    from datasets import Dataset
    from step_timing import reward_len, step_timer, tiny_grpo_config
    from trl import GRPOTrainer

    from mcp_server.tiny import ensure_tiny_model, make_task
    from mcp_server.training.trainer.guard import WINDOW, LiveGuard
    from mcp_server.training.trainer.progress import ProgressCallback

    torch.set_num_threads(1)

    run_dir = Path(tempfile.mkdtemp(prefix="bench-guard-"))
    args = tiny_grpo_config(run_dir / "checkpoints", steps)
    progress, timer = ProgressCallback(run_dir, guard="warn"), step_timer()
    trainer = GRPOTrainer(model=str(ensure_tiny_model()), reward_funcs=[reward_len], args=args,
                          train_dataset=Dataset.from_list(make_task(64)), callbacks=[timer, progress])
    spent: list[float] = []
    check = None

    def timed_check(line, write, _spent=spent):
        t0 = time.perf_counter()
        try:
            return check(line, write)
        finally:
            _spent.append(time.perf_counter() - t0)

    original_begin = progress.on_train_begin

    def on_train_begin(*a, **k):
        nonlocal check
        result = original_begin(*a, **k)
        check = progress.guard.check
        progress.guard.check = timed_check
        return result

    progress.on_train_begin = on_train_begin
    trainer.train()

    step = statistics.median(timer.times[1:] or timer.times)  # the first step pays for warm-up
    lines = [json.loads(line) for line in (run_dir / "train" / "logs" / "progress.jsonl").read_text().splitlines()]
    full = LiveGuard(progress.run, "warn", progress.guard.config, {})
    for i in range(WINDOW):  # fill the window with the run's own lines
        full.observe({**lines[i % len(lines)], "step": i + 1})
    t0, repeats = time.perf_counter(), 50
    for i in range(repeats):
        full.check({**lines[i % len(lines)], "step": WINDOW + i + 1}, write=False)
    per_full = (time.perf_counter() - t0) / repeats
    print(json.dumps({
        "steps": steps, "median_step_s": round(step, 4),
        "guard_check_s_in_run": round(statistics.median(spent), 6),
        "guard_check_s_full_window": round(per_full, 6), "window_rows": WINDOW,
        "ratio_in_run": round(statistics.median(spent) / step, 5),
        "ratio_full_window": round(per_full / step, 5), "goal": "< 0.02",
    }, indent=1))


if __name__ == "__main__":
    main()
