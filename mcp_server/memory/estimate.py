"""A run's expected seconds per optimizer step, before its first step is logged (issue 49: a CPU run showed "no step
logged yet" for 7 minutes with no figure): the planner's speed model (memory.speed) on a GPU target, on a CPU
target the same model at the rates this machine measured (memory.cpu_speed)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from statistics import median
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
    low_s: float | None = None  # on a CPU: the range the machine's readings and load averages span
    high_s: float | None = None


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


def step_estimate(spec: RunSpec, measure: bool = True, load: tuple[float, int] | cpu_speed.Load | None = None,
                  running: bool = False, readings: list[cpu_speed.CpuThroughput] | None = None,
                  keep_for: Path | None = None, calibrated: bool = True) -> StepEstimate | None:
    """Seconds per optimizer step of `spec`'s run on its target; None where the run cannot be planned. On a CPU
    target the machine's readings (`readings`; else the stored probe's when recent, else the machine measured now
    unless `measure` is False: a probe while the run trains measures the run), each slowed to the share of the cores
    the trainer's threads get at `load` (cpu_speed.as_load: a (load average, cores) pair, or a Load with the range
    of the load averages; read now when not given; `running`: the run is one of that load, its own threads not
    counted against it), as sampling's plan does (issue 49's seventh walk: a step took 3.5x the figure of a probe at
    load 15-17). The figure is the mean of the middle half of the readings' figures at the typical load, so one
    reading that caught a lull or a spike does not move it (issue 49: 4x from one emission to the next at a steady
    load 10-11); the range spans every reading from the least to the largest load average. The readings of a run
    are those its emission stood on (`keep_for`: the run emitted, whose readings are kept), so emission, launch,
    training_status and a stop's wait give one figure at one load (walk 11: 5.2 min at emission, 10.3 min in
    training_status at the same load, another tool's probe having replaced the stored readings between). The load
    moves the figure either way (cpu_speed.step_factor), and `calibrated`: the figure and its range are corrected by
    the steps other runs on this machine measured against their estimates (cpu_speed.ratios; calibrate)."""
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
    ran = spec.base_dir is not None and keep_for is None
    readings = readings or (cpu_speed.run_readings(Path(spec.base_dir), threads) if ran else []) or _readings(
        threads, measure)
    if not readings:
        return None
    if keep_for is not None:
        cpu_speed.keep_for_run(keep_for, readings)
    load_ = cpu_speed.as_load(load)

    def slowdown(cpu: cpu_speed.CpuThroughput, load_avg: float) -> float:
        return cpu_speed.step_factor(cpu, max(load_avg - threads, 0.0) if running else load_avg, load_.cores)

    steps = [(estimate_cpu_step(arch, params, settings, cpu), cpu) for cpu in readings]
    at = sorted(((step, cpu, step.step_s * slowdown(cpu, load_.typical)) for step, cpu in steps),
                key=lambda entry: entry[2])
    quarter = len(at) // 4  # the middle half's mean: neither one outlier nor a machine between two states moves it
    seconds = sum(entry[2] for entry in at[quarter:len(at) - quarter]) / (len(at) - 2 * quarter)
    step, cpu, near = min(at, key=lambda entry: abs(entry[2] - seconds))  # the reading whose basis is said
    factor = slowdown(cpu, load_.typical)
    low = min(step.step_s * slowdown(c, load_.low) for step, c in steps)
    high = max(step.step_s * slowdown(c, load_.high) for step, c in steps)
    own = Path(spec.base_dir) if spec.base_dir is not None else None
    measured = cpu_speed.ratios(params.total, but=own) if calibrated else []
    model = seconds
    if measured:  # the runs this machine measured: their median ratio moves the figure, their spread the range
        seconds, low, high = (seconds * median(measured), low * min(measured), high * max(measured))
    parts = (*split(seconds, [s for s, _ in steps]), step.basis)
    text = _cpu_text(seconds, low, high, parts, len(readings), load_, threads, factor, running)
    if measured:
        text += (f"; corrected by the steps {len(measured)} earlier run{'s' if len(measured) != 1 else ''} on this "
                 f"machine measured: {min(measured):.2f}-{max(measured):.2f}x the model's figure (median "
                 f"{median(measured):.2f}x; the model alone said {_duration(model)})")
    return StepEstimate(round(seconds, 1), text, round(low, 1), round(high, 1))


def calibrate(run: Run, measured_s: float, load: cpu_speed.Load | None = None) -> float | None:
    """Keep `run`'s measured step time (its logged steps) over its own estimate at the load now, uncorrected: what
    the next runs' estimates on this machine are corrected by (walk 12: one run 2.8x over, the next 0.5-0.7x under,
    nothing learned from the first). `load`: read now when not given. The ratio, None without a CPU estimate."""
    try:
        spec = RunSpec.of_run(run)
        load = load or cpu_speed.load_range()
        estimate = (step_estimate(spec, measure=False, running=True, calibrated=False, load=load)
                    if spec.target.cpu else None)
    except Exception:  # noqa: BLE001 - a status never fails for want of it
        return None
    if estimate is None or estimate.step_s <= 0 or measured_s <= 0:
        return None
    ratio = measured_s / estimate.step_s
    cpu_speed.keep_ratio(run.dir, ratio, load.typical, count_params(architecture_of(None, spec.fields)[1]).total)
    return ratio


def split(seconds: float, steps: list) -> tuple[float, float]:
    """(generation, training) of a step of `seconds`: its share of each over every reading at its measured speed,
    so the split depends on the readings alone, never on the load or on which reading is nearest the figure. Walk 9:
    emit-config said "generation 3.4 min, training 3.1 min" and training-status "generation 73 s, training 4.4
    min" for the same run, each the breakdown of the one reading nearest its figure at its own load."""
    rollout, total = sum(s.rollout_s for s in steps), sum(s.step_s for s in steps)
    share = rollout / total if total > 0 else 0.5
    return seconds * share, seconds * (1 - share)


def _readings(threads: int, measure: bool) -> list[cpu_speed.CpuThroughput]:
    """The stored probe's readings when recent, else this machine's now (unless not `measure`); [] for none."""
    kept = cpu_speed.kept_readings(threads)
    if kept or not measure:
        return kept[1:] or kept  # the readings themselves, or an older probe's one figure
    try:
        return cpu_speed.probe_readings(threads)
    except ImportError:  # the server's light environment has no torch: only a stored probe serves there
        return []


def _cpu_text(seconds: float, low: float, high: float, parts: tuple, count: int, load: cpu_speed.Load, threads: int,
              slowdown: float, running: bool) -> str:
    cores = f"{load.cores} core{'s' if load.cores != 1 else ''}"
    others = max(load.typical - threads, 0.0) if running else load.typical
    at_load = "" if round(slowdown, 1) == 1 else (
        f", {slowdown:.1f}x the measured speed's time: at load {load.typical:.0f} on {cores} its {threads} "
        f"thread{'s' if threads != 1 else ''} get about {cpu_speed.fair_share(threads, others, load.cores):.0%} of "
        "their time" + (", more than the probe got" if slowdown < 1 else ""))
    loads = (f"load {load.low:.0f} to {load.high:.0f}" if round(load.low) != round(load.high) else
             f"load {load.typical:.0f}")
    readings = f"{count} reading{'s' if count != 1 else ''}"
    spread = (f" ({_duration(low)} to {_duration(high)} over {readings} of this machine at {loads} on {cores})"
              if _duration(low) != _duration(high) else "")
    busy = cpu_speed.busy(load.typical, load.cores)
    generation, training, basis = parts
    return (f"about {_duration(seconds)} per step on this CPU{spread}, every completion at its limit (generation "
            f"{_duration(generation)}, training {_duration(training)}; {basis}"
            f"{at_load})" + (f"; {busy}: a busier machine takes longer, and the steps logged give the measured time"
                             if busy else ""))


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"
