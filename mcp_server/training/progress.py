"""The progress callback: one JSON line per logged step in train/logs/progress.jsonl (DESIGN.md contract).

Imported by train/train.py in the training interpreter, so it may import transformers at module level.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from transformers import TrainerCallback

from mcp_server.workspace import atomic_write_json

# Contract keys -> the TRL/transformers log names they are read from (first match wins).
PROGRESS_KEYS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "train_loss"),
    "lr": ("learning_rate",),
    "reward": ("reward",),
    "reward_std": ("reward_std",),
    "frac_reward_zero_std": ("frac_reward_zero_std",),
    "kl": ("kl",),
    "entropy": ("entropy",),
    "completion_mean_length": ("completions/mean_length",),
    "clipped_ratio": ("completions/clipped_ratio",),
    "grad_norm": ("grad_norm",),
}


def progress_path(run_dir: Path) -> Path:
    return Path(run_dir) / "train" / "logs" / "progress.jsonl"


def _gpu_stats() -> tuple[float | None, float | None]:
    """Peak allocated memory (GB) and temperature (C) of the current GPU; (None, None) on CPU."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, None
        mem = torch.cuda.max_memory_allocated() / 1e9
        try:
            temp = float(torch.cuda.temperature())
        except Exception:  # needs pynvml; absent is fine
            temp = None
        return round(mem, 3), temp
    except Exception:
        return None, None


class ProgressCallback(TrainerCallback):
    """Appends a progress line on every `on_log` of the main process; a line is flushed when written,
    so nothing logged is lost when the training process dies."""

    def __init__(self, run_dir: str | Path):
        self.path = progress_path(Path(run_dir))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._last_time: float | None = None
        self._last_step = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last_time = time.time()
        self._last_step = state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        now = time.time()
        steps = max(state.global_step - self._last_step, 1)
        step_time = (now - self._last_time) / steps if self._last_time else None
        self._last_time, self._last_step = now, state.global_step
        mem_gb, temp_c = _gpu_stats()
        line = {"step": state.global_step, "epoch": state.epoch, "time": round(now, 3)}
        for key, sources in PROGRESS_KEYS.items():
            line[key] = next((logs[s] for s in sources if s in logs), None)
        line.update(mem_gb=mem_gb, temp_c=temp_c, step_time=round(step_time, 4) if step_time else None)
        for key, value in logs.items():  # every other metric under its TRL name
            line.setdefault(key, value)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, default=float) + "\n")
            handle.flush()


def write_outcome(run_dir: str | Path, state: str, **info) -> Path:
    """Record how training ended (train/logs/outcome.json), written atomically."""
    return atomic_write_json(Path(run_dir) / "train" / "logs" / "outcome.json", {"state": state, "time": time.time(), **info})
