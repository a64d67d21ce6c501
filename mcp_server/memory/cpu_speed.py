"""How fast this CPU decodes and trains (issue 49): the planner's speed model (memory.speed) on a CPU target,
calibrated by what this machine measures, not by a constant for one box.

A probe times a float32 matmul (FLOP/s), a large tensor copy (bytes/s) and a small operator on one thread and on
the threads the work will use (host speed, and the cost of a barrier when a busy machine deschedules a thread:
35 us against 33 ms measured on 2 threads at load 10), a fraction of a second each, under the present load.
Decode and training are those figures times efficiencies measured with transformers on smollm2-135m and the tiny
model (bench/bench_estimates.py prints the estimate beside the measured figure):

- a decode step reads every float32 weight once (memory-bound at small batches) and does 2 x params FLOPs per
  sequence at DECODE_EFFICIENCY of the probe's matmul rate (smollm2-135m, 8 to 64 sequences: 0.45 to 0.48), plus
  host time in units of the small operator's (HOST_OPS_*) and, on several threads, the barriers (SYNC_OPS_*);
- a training micro-step runs forward and backward at TRAIN_EFFICIENCY of the matmul rate (smollm2-135m, 4 to 8
  sequences of 128 tokens: 0.43 to 0.74).

The probe's result is kept in the cache (`cpu_probe.json`) with its time, so training_status can give the estimate
while the run itself holds the cores (a probe then would measure the run, not the machine).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import NamedTuple

DECODE_EFFICIENCY = 0.45
TRAIN_EFFICIENCY = 0.45
# Host work in units of this machine's small-op time (one thread): a decode step's per-layer Python and dispatch,
# and generate's own per-step work (logits processors, sampling, the stopping check). The tiny model (2 layers,
# 8 sequences): 7.2 ms a step where a small op took 35 us.
HOST_OPS_PER_LAYER = 28
HOST_OPS_PER_STEP = 150
# Operators per layer that wait on every thread (OpenMP's barrier): with several threads on a busy machine each
# costs what a descheduled thread takes to return. smollm2-135m on 2 threads at load 8-10: 7.6 s a decode step of
# 8 sequences where a small op took 33 ms (7.7 per layer), 3.4 s of 4 where it took 38 ms (3.0); on 1 thread, 0.5 s.
# Between the two (the barrier's cost changes from second to second on such a machine: bench_estimates.py).
SYNC_OPS_PER_LAYER = 5
# What a barrier costs grows with the operator's own work (a descheduled thread holds up the rest of its share of the
# op): 2 threads at load 9.9 on 2 cores, silu(x @ w) took 290 us more than on one thread for 4 x 64 x 64, 534 us for
# the probe's 8 x 256 x 256, 4.4 ms for 8 x 576 x 1536. A model's operators smaller than the probe's pay that share of
# the probe's barrier (sync_share): the tiny model's 4 x 64 x 64 decode ops 3% (issue 49: its CPU step estimate was
# 5 to 10x the measured step, the probe's barrier charged in full to every op), smollm2-135m's all of it.
PROBE_OP_MACS = 8 * 256 * 256
# A GRPO optimizer step's own host work beyond the model (rewards, logging, the optimizer, a checkpoint): the tiny
# model's run (save_steps 1), measured step less the model's part, over the small op's time (bench_estimates.py's
# implied_trainer_host_ops): about 36000 at load 3 (1.06 s a step), 16000 at load 9 (3.58 s); the 100000 used before
# was fitted as if the whole of a loaded step (4.2 s at load 8.6) were this work at an idle machine's small-op time.
TRAINER_HOST_OPS_PER_STEP = 25_000
PROBE_SECONDS = 0.05  # per measurement; six measurements per reading
PROBE_ROUNDS = 5  # readings per probe: their median is the typical one (probe_readings)
POOL_S, POOL_MAX = 300, 15  # a probe's readings pooled with those of the last 5 minutes, at most 15 (pooled)
PROBE_KEPT_S = 24 * 3600  # a stored probe older than this is not used by training_status
RUNS_KEY, RUNS_KEPT = "runs", 64  # the readings each run's estimate stands on (keep_for_run), the latest 64 runs


class CpuThroughput(NamedTuple):
    flops: float  # float32 matmul FLOP/s with `threads` threads
    bandwidth: float  # bytes/s of a large copy (read + write)
    threads: int
    measured_at: float  # time.time()
    op_s: float = 35e-6  # seconds per small operator (an 8 x 256 matmul and its activation) on one thread
    sync_s: float = 0.0  # what the same operator takes on `threads` threads beyond that: their barrier
    share: float = 1.0  # the share of its threads' time the probe's matmuls got (CPU time / wall time / threads)

    def describe(self) -> str:
        return (f"{self.flops / 1e9:.0f} GFLOP/s and {self.bandwidth / 1e9:.0f} GB/s measured on {self.threads} CPU "
                f"thread{'s' if self.threads != 1 else ''}")


def _probe_file() -> Path:
    return Path(os.environ.get("LLM_FINETUNING_CACHE", Path.home() / ".cache" / "llm-finetuning")) / "cpu_probe.json"


def probe(threads: int, rounds: int = PROBE_ROUNDS) -> CpuThroughput:
    """Measure this machine now, with `threads` torch threads (restored after), and keep the result: the typical
    (median) of `rounds` short readings (probe_readings), kept with the readings themselves."""
    return typical(probe_readings(threads, rounds))


def probe_readings(threads: int, rounds: int = PROBE_ROUNDS) -> list[CpuThroughput]:
    """`rounds` short readings of this machine, one after the other, kept (with their median, `typical`). On a busy
    machine one reading catches a lull or a spike (issue 49: the emit step estimate moved 4x from one probe to the
    next at a steady load 10-11, and a run took 1.7-4.2x the figure): their median is what an estimate stands on,
    their spread what its range covers."""
    readings = pooled(kept_readings(threads)[1:], [_read(threads) for _ in range(max(rounds, 1))], time.time())
    _keep(typical(readings), readings)
    return readings


def pooled(earlier: list[CpuThroughput], new: list[CpuThroughput], now: float) -> list[CpuThroughput]:
    """`new` readings with the `earlier` ones taken within POOL_S before `now`, the latest POOL_MAX: a probe's
    readings are taken within a second or two, in one state of the machine; a steady load's next probe (another
    emission, sampling) adds to them rather than replacing them, so one probe that caught a lull or a spike moves
    the median only by its share."""
    return [r for r in earlier if now - r.measured_at <= POOL_S][-(POOL_MAX - len(new)):] + new \
        if len(new) < POOL_MAX else new[-POOL_MAX:]


def _read(threads: int) -> CpuThroughput:
    """One short reading: the matmul rate, the copy bandwidth and the small operator, on `threads` threads."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(threads, 1))
    try:
        n = 256 if threads <= 1 else 512
        a, b = torch.randn(n, n), torch.randn(n, n)
        cpu, wall = time.process_time(), time.perf_counter()
        flops = _rate(lambda: a @ b, 2 * n ** 3)
        share = min(1.0, (time.process_time() - cpu) / max(time.perf_counter() - wall, 1e-9) / max(threads, 1))
        x = torch.empty(8 * 2 ** 20)  # 32 MiB: larger than any last-level cache here
        y = torch.empty_like(x)
        bandwidth = _rate(lambda: y.copy_(x), 2 * x.numel() * 4)
        small, weight = torch.randn(8, 256), torch.randn(256, 256)
        # the larger of two: a process's first parallel region finds its threads awake (0.7 ms against 38 ms on
        # the next, 2 threads at load 7)
        threaded = max(1 / _rate(lambda: torch.nn.functional.silu(small @ weight), 1) for _ in range(2))
        torch.set_num_threads(1)
        single = 1 / _rate(lambda: torch.nn.functional.silu(small @ weight), 1)
    finally:
        torch.set_num_threads(before)
    return CpuThroughput(flops, bandwidth, threads, time.time(), single, max(threaded - single, 0.0), share)


def typical(readings: list[CpuThroughput]) -> CpuThroughput:
    """The median of each figure over `readings` (one thread count), timed at the latest."""
    return CpuThroughput(*(statistics.median(r[i] for r in readings) for i in range(len(CpuThroughput._fields))))\
        ._replace(threads=readings[0].threads, measured_at=max(r.measured_at for r in readings))


def _rate(work, amount: float) -> float:
    work()  # warm: allocations, the kernel chosen
    count, start = 0, time.perf_counter()
    while True:
        work()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= PROBE_SECONDS:
            return amount * count / elapsed


def _stored() -> dict:
    path = _probe_file()
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return kept if isinstance(kept, dict) else {}


def _keep(measured: CpuThroughput, readings: list[CpuThroughput] | None = None) -> None:
    kept = _stored()
    kept[str(measured.threads)] = {**measured._asdict(), "readings": [r._asdict() for r in readings or []]}
    _write(kept)


def keep_for_run(run_dir: Path, readings: list[CpuThroughput]) -> None:
    """Keep `readings` as the ones `run_dir`'s step estimate stands on (its emission's), the latest RUNS_KEPT runs:
    every later estimate of the run (launch, training_status, a stop's wait) reads them, not whichever probe came
    last. Walk 11: emit-config said 5.2 min a step and training_status 10.3 min at the same load, sampling's probe
    in between having replaced the stored readings."""
    if not readings:
        return
    kept = _stored()
    runs = kept.get(RUNS_KEY) if isinstance(kept.get(RUNS_KEY), dict) else {}
    runs.pop(str(Path(run_dir).resolve()), None)
    runs[str(Path(run_dir).resolve())] = [r._asdict() for r in readings]
    kept[RUNS_KEY] = dict(list(runs.items())[-RUNS_KEPT:])
    _write(kept)


def run_readings(run_dir: Path, threads: int) -> list[CpuThroughput]:
    """The readings keep_for_run kept for `run_dir` when they were taken with `threads` threads, else []."""
    runs = _stored().get(RUNS_KEY)
    entries = runs.get(str(Path(run_dir).resolve())) if isinstance(runs, dict) else None
    try:
        readings = [CpuThroughput(**e) for e in entries or []]
    except TypeError:
        return []
    return readings if readings and all(r.threads == threads for r in readings) else []


def _write(kept: dict) -> None:
    path = _probe_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(kept, indent=1), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only cache: the probe still answers this call


def kept(threads: int) -> CpuThroughput | None:
    """The last probe with `threads` threads (its typical reading), when it is recent (PROBE_KEPT_S)."""
    readings = kept_readings(threads)
    return readings[0] if readings else None


def kept_readings(threads: int) -> list[CpuThroughput]:
    """The last probe with `threads` threads when it is recent (PROBE_KEPT_S): its typical reading first, then the
    readings it was the median of (none for a probe kept before they were); [] when there is none."""
    try:
        entry = json.loads(_probe_file().read_text(encoding="utf-8")).get(str(threads))
        entries = [{k: v for k, v in entry.items() if k != "readings"}, *(entry.get("readings") or [])]
        # not an older probe's fields (one kept before `share` serves)
        readings = [CpuThroughput(**e) for e in entries
                    if set(CpuThroughput._fields) - set(e) <= {"share"} and set(e) <= set(CpuThroughput._fields)]
    except (OSError, ValueError, TypeError, AttributeError):
        return []
    if len(readings) != len(entries):  # one not readable: none trusted
        return []
    return readings if time.time() - readings[0].measured_at < PROBE_KEPT_S else []


def load_now() -> tuple[float, int]:
    """(load average, cores): the larger of the last 1 and 5 minutes' load averages (a busy machine's load swings:
    7 to 14 within a walk's sampling), and the cores this process may run on."""
    load = load_range()
    return load.typical, load.cores


class Load(NamedTuple):
    """The machine's load as an estimate reads it: the figure it stands on and the range it covers."""

    typical: float  # the larger of the last 1 and 5 minutes' load averages
    low: float  # the least of the 1, 5 and 15 minutes' averages
    high: float  # the largest of them
    cores: int


def load_range(figures: tuple[float, ...] | None = None, cores: int | None = None) -> Load:
    """The load from `figures` (os.getloadavg()'s 1, 5 and 15 minutes when not given) on `cores` (the cores this
    process may run on when not given): one momentary figure moves an estimate, three averages bound it."""
    if figures is None:
        try:
            figures = tuple(os.getloadavg())
        except OSError:  # no load average on this system
            figures = (0.0,)
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    return Load(max(figures[:2]), min(figures), max(figures), cores)


def as_load(load: tuple[float, int] | Load | None) -> Load:
    """A Load from what a caller passes: None (read now), (load average, cores) (one figure: no range) or a Load."""
    if load is None:
        return load_range()
    if isinstance(load, Load):
        return load
    return Load(float(load[0]), float(load[0]), float(load[0]), int(load[1]))


def busy(load: float, cores: int) -> str:
    """'the machine is busy: load 16 on 2 cores' where more is runnable than the cores run (an estimate then stands
    on the share a new process gets: fair_share), else ''."""
    if round(load) <= cores:
        return ""
    return f"the machine is busy: load {load:.0f} on {cores} core{'s' if cores != 1 else ''}"


def fair_share(threads: int, load: float, cores: int) -> float:
    """The share of its threads' time a new process with `threads` threads gets beside `load` runnable ones on
    `cores`: cores / (load + threads), all of it when the cores suffice."""
    return min(1.0, cores / max(load + threads, 1e-9))


def slowdown_at_load(cpu: CpuThroughput, load: float, cores: int, apart: bool = False) -> float:
    """How many times longer work takes at `load` on `cores` than at the speed `cpu` measured, against the share the
    probe itself got (cpu.share; a short probe can catch a lull and measure the machine as if idle): at the fair
    share s (fair_share) of its threads' time; `apart`: threads that meet at a barrier in every operator, scheduled
    apart, go on only while all of them run, s ** threads of the time, the bound. Measured (issue 49): smollm2-135m,
    4 sequences of 24 tokens on 2 threads took 222 s at load 19 on 2 cores (bound 3092 s) and 121.5 s at load 14
    (about 392 s, bound 2616 s); the walk's "about 2 min at most" took 474.8 s at load 7-14. Never below 1: the
    measured speed is the most the estimate assumes."""
    return max(1.0, cpu.share / fair_share(cpu.threads, load, cores) ** (max(cpu.threads, 1) if apart else 1))


def step_factor(cpu: CpuThroughput, load: float, cores: int) -> float:
    """How many times the time at the speed `cpu` measured a trainer's step takes at `load` on `cores`: the share
    the probe got (cpu.share) over the fair share the trainer's threads get at that load, either way. Walk 12: a
    probe taken at a busy moment (17% of its threads' time) and a run at load 2-6 took 146 s a step where the
    estimate, never below the measured speed's time (slowdown_at_load), said 412 s (2.8x over)."""
    return cpu.share / fair_share(cpu.threads, load, cores)


CALIBRATION_KEY, CALIBRATION_KEPT = "calibration", 16  # runs' measured step over the estimate, the latest 16


def keep_ratio(run_dir: Path, ratio: float, load: float, params: float) -> None:
    """Keep `run_dir`'s measured step time over its estimate at the load it ran at (training_status, once a step is
    logged), with its model's parameters: what later estimates on this machine are corrected by (ratios)."""
    kept = _stored()
    ratios = kept.get(CALIBRATION_KEY) if isinstance(kept.get(CALIBRATION_KEY), dict) else {}
    ratios.pop(str(Path(run_dir).resolve()), None)
    ratios[str(Path(run_dir).resolve())] = {"ratio": ratio, "load": load, "time": time.time(), "params": params}
    kept[CALIBRATION_KEY] = dict(list(ratios.items())[-CALIBRATION_KEPT:])
    _write(kept)


SIMILAR_PARAMS = 4.0  # a ratio corrects models within this factor of its own size (the host's share differs)


def ratios(params: float, but: Path | None = None) -> list[float]:
    """The measured-over-estimate ratios of the runs on this machine within PROBE_KEPT_S whose models are within
    SIMILAR_PARAMS of `params` (the tiny model's step is host overhead, a 135M model's compute), `but`'s left out."""
    stored = _stored().get(CALIBRATION_KEY)
    own = str(Path(but).resolve()) if but is not None else None
    try:
        return [float(e["ratio"]) for key, e in (stored or {}).items() if key != own and e["ratio"] > 0
                and time.time() - float(e["time"]) < PROBE_KEPT_S
                and 1 / SIMILAR_PARAMS <= float(e["params"]) / params <= SIMILAR_PARAMS]
    except (AttributeError, KeyError, TypeError, ValueError):
        return []


def decode_step_s(params: float, layers: int, sequences: int, cpu: CpuThroughput, hidden: int = 0,
                  context: float = 0.0) -> float:
    """Seconds per decode step of transformers generate on this CPU: the float32 weights read once, the matmuls
    (and attention over `context` tokens) for every sequence, and the host's per-layer and per-step time."""
    weights = 4 * params / cpu.bandwidth
    matmuls = 2 * (params + 2 * layers * hidden * context) * sequences / (cpu.flops * DECODE_EFFICIENCY)
    host = (layers * HOST_OPS_PER_LAYER + HOST_OPS_PER_STEP) * cpu.op_s
    return weights + matmuls + host + layers * SYNC_OPS_PER_LAYER * cpu.sync_s * sync_share(sequences, hidden)


def sync_share(rows: float, hidden: int) -> float:
    """The share of the probe's barrier cost an operator of `rows` x `hidden` x `hidden` pays (PROBE_OP_MACS);
    all of it where the hidden size is not known."""
    return 1.0 if hidden <= 0 else min(1.0, rows * hidden * hidden / PROBE_OP_MACS)


def train_s(flops_per_token: float, tokens: float, layers: int, micro_steps: int, cpu: CpuThroughput,
            hidden: int = 0) -> float:
    """Seconds of forward and backward for `tokens` tokens in `micro_steps` micro-batches on this CPU."""
    sync = cpu.sync_s * sync_share(tokens / max(micro_steps, 1), hidden)
    per_micro_step = layers * (3 * HOST_OPS_PER_LAYER * cpu.op_s + 3 * SYNC_OPS_PER_LAYER * sync)
    return (tokens * flops_per_token / (cpu.flops * TRAIN_EFFICIENCY) + micro_steps * per_micro_step
            + TRAINER_HOST_OPS_PER_STEP * cpu.op_s)
