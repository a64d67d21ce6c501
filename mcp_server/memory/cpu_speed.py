"""How fast this CPU decodes and trains (issue 49): the planner's speed model (memory.speed) on a CPU target,
calibrated by what this machine measures, not by a constant for one box.

A probe times a float32 matmul (FLOP/s) and a large tensor copy (bytes/s) with the threads the work will use, a
fraction of a second each, under whatever load the machine has then. Decode and training are those figures times
efficiencies measured with transformers on smollm2-135m and the tiny model (bench/bench_estimates.py prints the
estimate beside the measured figure):

- a decode step reads every float32 weight once (memory-bound at small batches) and does 2 x params FLOPs per
  sequence at DECODE_EFFICIENCY of the probe's matmul rate (smollm2-135m, 8 to 64 sequences: 0.45 to 0.48), plus
  per-layer and per-step host time (the tiny model: 2 to 3 ms a step, whatever the batch);
- a training micro-step runs forward and backward at TRAIN_EFFICIENCY of the matmul rate (smollm2-135m, 4 to 8
  sequences of 128 tokens: 0.43 to 0.74).

The probe's result is kept in the cache (`cpu_probe.json`) with its time, so training_status can give the estimate
while the run itself holds the cores (a probe then would measure the run, not the machine).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

DECODE_EFFICIENCY = 0.45
TRAIN_EFFICIENCY = 0.45
STEP_OVERHEAD_PER_LAYER_S = 2e-4  # Python and kernel launches per layer per decode step
STEP_OVERHEAD_S = 0.003  # generate's own work per decode step (logits processors, sampling, stopping check)
PROBE_SECONDS = 0.15  # per measurement; two measurements per probe
PROBE_KEPT_S = 24 * 3600  # a stored probe older than this is not used by training_status


class CpuThroughput(NamedTuple):
    flops: float  # float32 matmul FLOP/s with `threads` threads
    bandwidth: float  # bytes/s of a large copy (read + write)
    threads: int
    measured_at: float  # time.time()

    def describe(self) -> str:
        return (f"{self.flops / 1e9:.0f} GFLOP/s and {self.bandwidth / 1e9:.0f} GB/s measured on {self.threads} CPU "
                f"thread{'s' if self.threads != 1 else ''}")


def _probe_file() -> Path:
    return Path(os.environ.get("LLM_FINETUNING_CACHE", Path.home() / ".cache" / "llm-finetuning")) / "cpu_probe.json"


def probe(threads: int) -> CpuThroughput:
    """Measure this machine now, with `threads` torch threads (restored after), and keep the result."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(threads, 1))
    try:
        n = 256 if threads <= 1 else 512
        a, b = torch.randn(n, n), torch.randn(n, n)
        flops = _rate(lambda: a @ b, 2 * n ** 3)
        x = torch.empty(8 * 2 ** 20)  # 32 MiB: larger than any last-level cache here
        y = torch.empty_like(x)
        bandwidth = _rate(lambda: y.copy_(x), 2 * x.numel() * 4)
    finally:
        torch.set_num_threads(before)
    measured = CpuThroughput(flops, bandwidth, threads, time.time())
    _keep(measured)
    return measured


def _rate(work, amount: float) -> float:
    work()  # warm: allocations, the kernel chosen
    count, start = 0, time.perf_counter()
    while True:
        work()
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= PROBE_SECONDS:
            return amount * count / elapsed


def _keep(measured: CpuThroughput) -> None:
    path = _probe_file()
    try:
        kept = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    kept[str(measured.threads)] = measured._asdict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(kept, indent=1), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only cache: the probe still answers this call


def kept(threads: int) -> CpuThroughput | None:
    """The last probe with `threads` threads, when it is recent (PROBE_KEPT_S)."""
    try:
        entry = json.loads(_probe_file().read_text(encoding="utf-8")).get(str(threads))
        measured = CpuThroughput(**entry)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return measured if time.time() - measured.measured_at < PROBE_KEPT_S else None


def decode_step_s(params: float, layers: int, sequences: int, cpu: CpuThroughput, hidden: int = 0,
                  context: float = 0.0) -> float:
    """Seconds per decode step of transformers generate on this CPU: the float32 weights read once, the matmuls
    (and attention over `context` tokens) for every sequence, and the host's per-layer and per-step time."""
    weights = 4 * params / cpu.bandwidth
    matmuls = 2 * (params + 2 * layers * hidden * context) * sequences / (cpu.flops * DECODE_EFFICIENCY)
    return weights + matmuls + layers * STEP_OVERHEAD_PER_LAYER_S + STEP_OVERHEAD_S


def train_s(flops_per_token: float, tokens: float, layers: int, micro_steps: int, cpu: CpuThroughput) -> float:
    """Seconds of forward and backward for `tokens` tokens in `micro_steps` micro-batches on this CPU."""
    return tokens * flops_per_token / (cpu.flops * TRAIN_EFFICIENCY) + micro_steps * layers * 20 * \
        STEP_OVERHEAD_PER_LAYER_S
