"""What the progress callback and the live guard add to each training step, against a 50 ms step (goal: < 2%).

The callback's hooks (on_step_end, on_log) are called as the Trainer calls them, with TRL's logs of a GRPO step,
`--steps` times after the guard's window is full (its most expensive state): once with the guard off (the
callback alone: the progress line, the stop-request check) and once with it on ("warn": every hard rule runs on
every logged step). Beside them, as the baseline measured in the same run, the median step of a real TRL
GRPOTrainer run on the embedded tiny model (one thread, logging every step; what bench_guard.py times).
Ratios: the hooks' time per step / 50 ms (the goal's step) and / the measured step.

    .venv/bin/python bench/bench_step_overhead.py [--steps 300] [--train-steps 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LOGS = {  # one GRPO step's logs as TRL 1.x writes them (the keys the guard and the progress line read, and more)
    "loss": 0.01, "grad_norm": 0.5, "learning_rate": 5e-7, "num_tokens": 1000.0, "completions/mean_length": 12.0,
    "completions/min_length": 3.0, "completions/max_length": 16.0, "completions/clipped_ratio": 0.1,
    "completions/mean_terminated_length": 10.0, "completions/min_terminated_length": 3.0,
    "completions/max_terminated_length": 15.0, "rewards/reward_len/mean": 0.3, "rewards/reward_len/std": 0.1,
    "reward": 0.3, "reward_std": 0.1, "frac_reward_zero_std": 0.0, "kl": 0.001, "entropy": 0.8,
    "clip_ratio/low_mean": 0.0, "clip_ratio/low_min": 0.0, "clip_ratio/high_mean": 0.0, "clip_ratio/high_max": 0.0,
    "clip_ratio/region_mean": 0.0, "sampling/sampling_logp_difference/mean": 0.001,
    "sampling/importance_sampling_ratio/min": 0.98, "epoch": 0.1,
}


def hooks_per_step(guard: str, steps: int, workdir: Path) -> tuple[float, float]:
    """(median seconds the callback's hooks take per step with the guard's window full, seconds of its
    on_train_begin: once per run, reading the run's config and request)."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from mcp_server.training.trainer.guard import WINDOW
    from mcp_server.training.trainer.progress import ProgressCallback

    args = TrainingArguments(output_dir=str(workdir / "out"), report_to=[], use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.max_steps, state.is_world_process_zero = 10**6, True
    callback = ProgressCallback(workdir / guard, guard=guard)
    t0 = time.perf_counter()
    callback.on_train_begin(args, state, control)
    begin = time.perf_counter() - t0
    times = []
    for i in range(WINDOW + steps):
        state.global_step, state.epoch = i + 1, (i + 1) / 1000
        logs = {**LOGS, "kl": 0.001 + 1e-6 * i, "entropy": 0.8 - 1e-5 * i}
        t0 = time.perf_counter()
        callback.on_step_end(args, state, control)
        callback.on_log(args, state, control, logs=logs)
        if i >= WINDOW:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), begin


def measured_step(steps: int, workdir: Path) -> float:
    import torch
    from datasets import Dataset
    from step_timing import reward_len, step_timer, tiny_grpo_config
    from transformers import PrinterCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOTrainer

    from mcp_server.tiny import ensure_tiny_model, make_task

    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()

    timer = step_timer()
    trainer = GRPOTrainer(model=str(ensure_tiny_model()), reward_funcs=[reward_len],
                          args=tiny_grpo_config(workdir / "grpo", steps),
                          train_dataset=Dataset.from_list(make_task(64)), callbacks=[timer])
    trainer.remove_callback(PrinterCallback)  # no dict per logged step
    trainer.train()
    return statistics.median(timer.times[1:] or timer.times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--train-steps", type=int, default=12)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-step-overhead-") as name:
        workdir = Path(name)
        step = measured_step(opts.train_steps, workdir)
        alone = hooks_per_step("off", opts.steps, workdir)
        guarded = hooks_per_step("warn", opts.steps, workdir)
    print(f"real GRPO step on the tiny model (median of {opts.train_steps}): {step * 1e3:.1f} ms")
    for label, (seconds, begin) in (("callback alone (guard off)", alone),
                                    ("callback + guard (warn, full window)", guarded)):
        print(f"  {label:38} {seconds * 1e3:6.3f} ms per step   {seconds / 0.05:6.2%} of a 50 ms step   "
              f"{seconds / step:6.2%} of the measured step   goal < 2%: {'PASS' if seconds < 0.001 else 'FAIL'}"
              f"   (once per run, on_train_begin: {begin * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
