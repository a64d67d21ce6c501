"""A run's expected seconds per optimizer step, before its first step is logged (issue 49: a CPU run showed "no step
logged yet" for 7 minutes with no figure): the planner's speed model (memory.speed) on a GPU target, on a CPU
target the same model at the rates this machine measured (memory.cpu_speed)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import NamedTuple

from mcp_server.config import FIELD
from mcp_server.memory import cpu_speed
from mcp_server.memory.params import count_params
from mcp_server.memory.planner import architecture_of, plan
from mcp_server.memory.settings import resolve_settings
from mcp_server.memory.speed import estimate_cpu_step
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run


class StepEstimate(NamedTuple):
    step_s: float
    text: str  # the figure and what it stands on


def trainer_threads() -> int:
    """The threads train/train.py computes with: torch's intra-op threads, which follow OMP_NUM_THREADS where the
    launch's environment sets it (the demo does), else every core this process may use. The trainer does not narrow
    a small model to one thread as sampling and evaluation do (model_ref.small_model_threads), so neither does its
    estimate: measured (issue 49, 2 cores at load 13-17), the tiny recipe's steps took 111-337 s on 2 threads
    where the estimate for one thread said 18 s; for 2 threads it says 292 s."""
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
        if threads > 0:
            return threads
    except ValueError:
        pass
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _data_file(spec: RunSpec) -> Path | None:
    """The run's JSONL data file, as train/config.yaml's first `datasets` entry names it (emission writes local
    files so); None for anything else."""
    entries = spec.fields.get(FIELD.datasets) or []
    files = entries[0].get("data_files") if entries and isinstance(entries[0], dict) else None
    files = files[0] if isinstance(files, list) and files else files
    if not isinstance(files, str) or not files.endswith(".jsonl"):
        return None
    path = Path(files) if Path(files).is_absolute() or spec.base_dir is None else Path(spec.base_dir) / files
    return path if path.is_file() else None


def sampled_prompt_tokens(spec: RunSpec) -> int | None:
    """About how many tokens the run's prompts take, from its inspection samples, else the first rows of its JSONL
    data (issue 49: at emission, with no samples yet, the planner's 512-token bound put a CPU step at hours) (four
    characters a token, the chat template's markup counted as 16 tokens); None without either."""
    source, column = Run(spec.base_dir).samples if spec.base_dir is not None else None, "prompt"
    if source is None or not source.is_file():
        source, column = _data_file(spec), spec.prompt_column or "prompt"
    if source is None:
        return None
    sizes = []
    try:
        with source.open(encoding="utf-8") as lines:
            rows = [json.loads(line) for line in itertools.islice(lines, 256) if line.strip()]
        for row in rows:
            prompt = row.get(column)
            if prompt is not None:
                text = prompt if isinstance(prompt, str) else " ".join(
                    str(m.get("content", "")) for m in prompt if isinstance(m, dict))
                sizes.append(len(text) // 4 + (0 if isinstance(prompt, str) else 16))
    except (OSError, ValueError, AttributeError):
        return None
    return max(1, round(sum(sizes) / len(sizes))) if sizes else None


def step_estimate(spec: RunSpec, measure: bool = True, load: tuple[float, int] | None = None,
                  running: bool = False) -> StepEstimate | None:
    """Seconds per optimizer step of `spec`'s run on its target; None where the run cannot be planned. On a CPU
    target the stored probe is used when recent, else the machine is measured now unless `measure` is False (a
    probe while the run trains measures the run); the measured speed slowed to the share of the cores the trainer's
    threads get at `load` (load average, cores: cpu_speed.load_now when not given; `running`: the run is one of that
    load, its own threads not counted against it), as sampling's plan does (issue 49's seventh walk: a step took 3.5x
    the figure of a probe at load 15-17)."""
    try:
        if not spec.target.cpu:
            speed = plan(spec).speed
            return StepEstimate(speed.step_s, f"about {_duration(speed.step_s)} per step (the planner's speed model "
                                              f"for {spec.target.gpu}: {speed.verdict})")
        config = spec.fields
        _, arch = architecture_of(None, config)
        params = count_params(arch)
        settings = resolve_settings(config)
    except Exception:  # noqa: BLE001 - the figure is optional: a status never fails for want of it
        return None
    prompt = sampled_prompt_tokens(spec)
    if prompt is not None:  # the planner's prompt_length is a bound (TRL's old truncation); the samples say more
        settings = settings.updated({"prompt_length": prompt})
    threads = trainer_threads()
    cpu = cpu_speed.kept(threads)
    if cpu is None and measure:
        try:
            cpu = cpu_speed.probe(threads)
        except ImportError:  # the server's light environment has no torch: only a stored probe serves there
            cpu = None
    if cpu is None:
        return None
    step = estimate_cpu_step(arch, params, settings, cpu)
    load_avg, cores = load or cpu_speed.load_now()
    others = max(load_avg - threads, 0.0) if running else load_avg
    slowdown, busy = cpu_speed.slowdown_at_load(cpu, others, cores), cpu_speed.busy(load_avg, cores)
    at_load = "" if slowdown <= 1 else (f", {slowdown:.1f}x the measured speed's time: at load {load_avg:.0f} on "
                                        f"{cores} core{'s' if cores != 1 else ''} its {threads} thread"
                                        f"{'s' if threads != 1 else ''} get about "
                                        f"{cpu_speed.fair_share(threads, others, cores):.0%} of their time")
    seconds = round(step.step_s * slowdown, 1)
    return StepEstimate(seconds, f"about {_duration(seconds)} per step on this CPU, every completion at "
                                 f"its limit (generation {_duration(step.rollout_s * slowdown)}, training "
                                 f"{_duration(step.train_s * slowdown)}; {step.basis}{at_load})"
                        + (f"; {busy}: a busier machine takes longer, and the steps logged give the measured time"
                           if busy else ""))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"
