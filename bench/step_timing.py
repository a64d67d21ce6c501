"""What the GRPO step benchmarks (bench_guard.py, bench_step_overhead.py, bench_progress_callback.py) share: a
step timer, the length reward they train on and the tiny GRPO run's settings. Not a benchmark itself (`make bench`
runs bench_*.py); the scripts import it as a sibling (`python bench/bench_x.py` puts bench/ on sys.path)."""

from __future__ import annotations

import time
from pathlib import Path


def step_timer():
    """A TrainerCallback whose `times` are the wall time of each whole step (one step begin to the next, so
    logging and every callback are inside it); the first holds the warm-up."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._t0 = None

        def on_step_begin(self, args, state, control, **kwargs):
            now = time.perf_counter()
            if self._t0 is not None:
                self.times.append(now - self._t0)
            self._t0 = now

    return StepTimer()


def reward_len(completions, **kwargs):
    """Longer is better: a reward with a signal on any model, the tiny one included."""
    return [float(len(str(c))) / 100.0 for c in completions]


def tiny_grpo_config(output_dir: Path, steps: int):
    """GRPO on the tiny model on CPU: `steps` steps of 4 prompts x 4 completions of 16 tokens, logging every step."""
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=16, learning_rate=1e-5, logging_steps=1, beta=0.04, save_strategy="no",
                      report_to="none", use_cpu=True, disable_tqdm=True, bf16=False, seed=0)
