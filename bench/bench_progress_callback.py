"""Benchmark: what ProgressCallback adds to GRPO step time (goal: under 2%).

Real TRL GRPOTrainer on the embedded tiny model, logging every step (the callback's worst case). Runs with
and without the callback alternate, so drift in a shared machine's load hits both sides alike. Two figures:
- side by side: median step time with the callback / without it (noisy on a shared CPU, so also:)
- direct: time spent inside the callback's own hooks / total step time, in the same runs.

    .venv/bin/python bench/bench_progress_callback.py [--steps 20] [--pairs 2]
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


def _timed(callback):
    """Wrap the callback's hooks to add up the time spent inside them."""
    callback.spent = 0.0
    for name in ("on_train_begin", "on_step_end", "on_log"):
        original = getattr(callback, name)

        def wrapper(*args, _original=original, **kwargs):
            t0 = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                callback.spent += time.perf_counter() - t0

        setattr(callback, name, wrapper)
    return callback


def run_once(with_callback: bool, steps: int, workdir: Path) -> dict:
    from datasets import Dataset
    from step_timing import reward_len, step_timer
    from trl import GRPOConfig, GRPOTrainer

    from mcp_server.tiny import ensure_tiny_model, make_task
    from mcp_server.training.trainer.progress import ProgressCallback

    run_dir = Path(tempfile.mkdtemp(dir=workdir))
    args = GRPOConfig(
        output_dir=str(run_dir / "checkpoints"),
        max_steps=steps,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=16,
        learning_rate=1e-5,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    timer = step_timer()
    callbacks = [timer]
    progress = None
    if with_callback:
        progress = _timed(ProgressCallback(run_dir))
        callbacks.append(progress)
    model = str(ensure_tiny_model())
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_len, args=args,
        train_dataset=Dataset.from_list(make_task(64)), callbacks=callbacks,
    )
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # printing every log line would dominate a tiny step
    trainer.train()
    step_times = timer.times[3:]  # the first steps warm caches up
    return {
        "median_step_s": statistics.median(step_times),
        "total_step_s": sum(timer.times),
        "callback_s": progress.spent if progress else 0.0,
        "lines": sum(1 for _ in open(progress.path)) if progress else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=2)
    opts = parser.parse_args()

    import transformers

    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        base, withcb = [], []
        for pair in range(opts.pairs):
            order = (False, True) if pair % 2 == 0 else (True, False)
            for flag in order:
                (withcb if flag else base).append(run_once(flag, opts.steps, Path(tmp)))

    base_med = statistics.median(r["median_step_s"] for r in base)
    cb_med = statistics.median(r["median_step_s"] for r in withcb)
    direct = sum(r["callback_s"] for r in withcb) / sum(r["total_step_s"] for r in withcb)
    per_call_ms = 1000 * sum(r["callback_s"] for r in withcb) / sum(r["lines"] for r in withcb)
    print(f"GRPO tiny model, {opts.steps} steps logged every step, {opts.pairs} pairs of runs")
    print(f"  median step without callback: {base_med * 1000:8.2f} ms")
    print(f"  median step with callback:    {cb_med * 1000:8.2f} ms")
    print(f"  side-by-side ratio:           {cb_med / base_med:8.4f}  ({(cb_med / base_med - 1) * 100:+.2f}%, noise "
          "included)")
    print(f"  time inside the callback:     {per_call_ms:8.3f} ms per logged step")
    print(f"  direct overhead:              {direct * 100:8.3f}% of step time (goal < 2%)")
    print("PASS" if direct < 0.02 else "FAIL", "- callback overhead under 2% of step time")


if __name__ == "__main__":
    main()
