"""sample_completions' plan, sized for the machine it samples on: before the model loads, how many completions and
tokens it may generate and about how long that takes (from the model's size and the host: CPU threads or a GPU);
while it runs, progress lines with the measured rate and the time left; and the default number of prompts, smaller
on a CPU so that a rehearsal there finishes in minutes.

Issue 31: 64 prompts x 8 completions of up to 512 tokens from a 135M model on 2 CPU cores printed nothing for 11
minutes. The estimate below puts that at about an hour (8 generate calls of 64 sequences, 512 decode steps each).
"""

from __future__ import annotations

import math
import time

from mcp_server.errors import UserInputError
from mcp_server.inspection.models import CPU_PROMPTS, MIN_REVIEW_SAMPLES, RATE_PROMPTS
from mcp_server.memory import cpu_speed
from mcp_server.memory.params import count_params
from mcp_server.memory.planner import architecture_of
from mcp_server.model_ref import SMALL_MODEL_PARAMS
from mcp_server.reporting import Report

GPU_FLOPS = 50e12  # transformers generate's bf16 matmuls on a data-centre GPU, far under peak (small batches)
STEP_OVERHEAD_PER_LAYER_S = 2e-4  # Python and kernel launches per layer per decode step (memory.speed's figure)
STEP_OVERHEAD_S = 0.01  # generate's own work per decode step on a GPU (logits processors, sampling, stopping)
# On a CPU the decode step is memory.cpu_speed's, at the rates this machine measures when sampling starts (issue 49:
# a fixed 10 GFLOP/s per thread planned "about 56 s at most" for a sampling that took 370 s).


def default_num_prompts(on_gpu: bool) -> int:
    return RATE_PROMPTS if on_gpu else CPU_PROMPTS


def model_size(model) -> tuple[int | None, int | None, int]:
    """(parameters, layers, hidden size) from the model's config, offline (a local directory, 'tiny', the catalog);
    (None, None, 0) when unknown."""
    try:
        _, arch = architecture_of(str(model))
    except UserInputError:
        return None, None, 0
    return count_params(arch).total, arch.num_hidden_layers, arch.hidden_size


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"


def sampling_plan(num_prompts: int, n: int, max_new_tokens: int, batch_size: int, engine: str, on_gpu: bool,
                  threads: int, params: int | None, layers: int | None, hidden: int = 0,
                  cpu: cpu_speed.CpuThroughput | None = None) -> dict:
    """What sampling will generate and an upper estimate of its time (every completion running to the limit); on
    a CPU from `cpu` (cpu_speed.probe: this machine measured with the threads sampling uses), measured here when
    not given."""
    per_call = max(1, batch_size // n)
    calls = math.ceil(num_prompts / per_call)
    sequences = min(per_call, num_prompts) * n
    completions = num_prompts * n
    if params is not None and params < SMALL_MODEL_PARAMS and not on_gpu:
        threads = 1  # model_ref.small_model_threads: a small model generates on one thread
    host = "a GPU" if on_gpu else f"{threads} CPU thread{'s' if threads != 1 else ''}"
    seconds = None
    if params is not None and on_gpu:
        step = 2 * params * sequences / GPU_FLOPS + (layers or 0) * STEP_OVERHEAD_PER_LAYER_S + STEP_OVERHEAD_S
        seconds = calls * max_new_tokens * step
    elif params is not None:
        cpu = cpu or cpu_speed.probe(threads)
        step = cpu_speed.decode_step_s(params, layers or 0, sequences, cpu, hidden, context=max_new_tokens / 2)
        seconds = calls * max_new_tokens * step
        host += f" ({cpu.flops / 1e9:.0f} GFLOP/s and {cpu.bandwidth / 1e9:.0f} GB/s measured now)"
    size = f"a {params / 1e6:,.1f}M-parameter model" if params is not None else "a model of unknown size"
    text = (f"{num_prompts} prompts x {n} = {completions} completions of up to {max_new_tokens} tokens "
            f"({completions * max_new_tokens:,} tokens at most) from {size} with {engine} on {host}")
    if seconds is not None:
        text += (f": about {_duration(seconds)} at most ({calls} generate call{'s' if calls != 1 else ''} of "
                 f"{sequences} sequences, {max_new_tokens} decode steps each, at this machine's present speed; "
                 "the progress lines give the measured rate)")
    if not on_gpu and completions > MIN_REVIEW_SAMPLES and (seconds or 0) > 600:
        text += (f". Long for a CPU: fewer prompts (num_prompts {max(1, -(-MIN_REVIEW_SAMPLES // n))} gives the "
                 "review's 50 samples) or a shorter max_completion_length in the config shrink it")
    return {"num_prompts": num_prompts, "n": n, "completions": completions, "max_new_tokens": max_new_tokens,
            "max_tokens": completions * max_new_tokens, "engine": engine, "device": "cuda" if on_gpu else "cpu",
            "threads": threads, "params": params, "generate_calls": calls, "estimated_seconds_at_most":
            None if seconds is None else round(seconds, 1), "text": text}


class Progress:
    """Progress lines for one sampling pass: prompts done (fractional within a generate call), the measured
    decode rate and the time left at that rate. The rate counts the decode steps that ran (a call whose
    completions all end early runs fewer than max_new_tokens); the time left is for the steps that may still run
    (max_new_tokens for each call to come), so it is never 0 while a call remains (issue 49: "about 0 s left" with
    one of two calls to go, the rate inflated by counting a finished call as max_new_tokens steps)."""

    def __init__(self, report: Report, plan: dict, partial: str = "inspection/samples.partial.jsonl"):
        """`partial`: the file each finished call is appended to, as the run names it (a launched run's
        exploration writes inspection/explore-<n>/samples.partial.jsonl)."""
        self.report, self.plan, self.partial = report, plan, partial
        self.first: tuple[float, float] | None = None  # (time, decode steps run) at the first report: the rate
        # is measured from there, after the model has loaded
        self.total = plan["num_prompts"]
        self.per_call = max(1, min(self.total, -(-self.total // plan["generate_calls"])))
        self.ran = 0  # decode steps of the calls finished
        self.current = 0  # decode steps of the call under way

    def _left(self, calls_done: int) -> str:
        now, ran = time.perf_counter(), self.ran + self.current
        if self.first is None:
            self.first = (now, ran)
            return ""
        elapsed, steps = now - self.first[0], ran - self.first[1]
        if steps <= 0 or elapsed <= 0:
            return ""
        to_run = max(self.plan["generate_calls"] - calls_done, 0) * self.plan["max_new_tokens"] - self.current
        left = max(to_run, 0) * elapsed / steps
        if left <= 0:
            return f"; {steps / elapsed:.1f} decode steps/s"
        return f"; {steps / elapsed:.1f} decode steps/s, at most about " + (
            "1 s" if left < 1 else _duration(left)) + " left"

    def step(self, done_before: int, step: int) -> None:
        """Within a generate call: `step` decode steps of the call that starts at prompt `done_before`."""
        self.current = step
        fraction = min(step, self.plan["max_new_tokens"] - 1) / self.plan["max_new_tokens"]  # the batch's own
        # report says "done": MCP progress only grows, so a step never reaches it
        chunk = min(self.per_call, self.total - done_before)
        self.report(done_before + fraction * chunk, self.total,
                    f"sampling prompts {done_before + 1}-{done_before + chunk} of {self.total}: token {step} of up to "
                    f"{self.plan['max_new_tokens']}" + self._left(done_before // self.per_call))

    def batch(self, done: int) -> None:
        calls_done = -(-done // self.per_call)
        self.ran, self.current = self.ran + self.current, 0
        self.report(done, self.total, f"sampled {done}/{self.total} prompts x {self.plan['n']}, written to "
                    f"{self.partial}" + self._left(calls_done))
