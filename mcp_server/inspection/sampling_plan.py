"""sample_completions' plan, sized for the machine it samples on: before the model loads, how many completions and
tokens it may generate and about how long that takes (from the model's size and the host: CPU threads or a GPU);
while it runs, progress lines with the measured rate and the time left; and the default number of prompts, smaller
on a CPU so that a rehearsal there finishes in minutes.

Issue 31: 64 prompts x 8 completions of up to 512 tokens from a 135M model on 2 CPU cores printed nothing for 11
minutes. The estimate below puts that at about an hour (8 generate calls of 64 sequences, 512 decode steps each).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from mcp_server.errors import UserInputError
from mcp_server.generation import DecodeProgress, duration, plan_step_s
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


def model_size(model, base=None) -> tuple[int | None, int | None, int]:
    """(parameters, layers, hidden size) from the model's config, offline (a local directory, 'tiny', the catalog);
    a LoRA adapter (a trainer's checkpoint: adapter_config.json, no config.json) has its base model's, named there,
    else `base`'s (the run's base model; walk 9: a checkpoint was "a model of unknown size" with no time estimate);
    (None, None, 0) when unknown."""
    for name in (model, _adapter_base(model), base):
        if name is None:
            continue
        try:
            _, arch = architecture_of(str(name))
        except UserInputError:
            continue
        return count_params(arch).total, arch.num_hidden_layers, arch.hidden_size
    return None, None, 0


def _adapter_base(model) -> str | None:
    """The base model a LoRA adapter directory names (adapter_config.json's base_model_name_or_path), else None."""
    try:
        with open(Path(str(model)) / "adapter_config.json", encoding="utf-8") as handle:
            base = json.load(handle).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    return base if isinstance(base, str) and base else None


def sampling_plan(num_prompts: int, n: int, max_new_tokens: int, batch_size: int, engine: str, on_gpu: bool,
                  threads: int, params: int | None, layers: int | None, hidden: int = 0,
                  cpu: cpu_speed.CpuThroughput | None = None, load: tuple[float, int] | None = None,
                  goldens: bool = False) -> dict:
    """What sampling will generate and an upper estimate of its time (every completion running to the limit); on
    a CPU from `cpu` (cpu_speed.probe: this machine measured with the threads sampling uses) at `load` (load
    average, cores: cpu_speed.load_now), both measured here when not given. The bound holds at the load it states:
    the measured speed slowed to the share of the cores a new process gets there (cpu_speed.slowdown_at_load).
    `goldens`: evaluate_model's plan (one greedy completion per golden; issue 49: a baseline of 256 tokens a golden
    ran for 10 minutes past its running estimate with no plan up front)."""
    per_call = max(1, batch_size // n)
    calls = math.ceil(num_prompts / per_call)
    sequences = min(per_call, num_prompts) * n
    completions = num_prompts * n
    if params is not None and params < SMALL_MODEL_PARAMS and not on_gpu:
        threads = 1  # model_ref.small_model_threads: a small model generates on one thread
    host = "a GPU" if on_gpu else f"{threads} CPU thread{'s' if threads != 1 else ''}"
    seconds, typical, at_load, shared, busy = None, None, "", "", ""
    if params is not None and on_gpu:
        step = 2 * params * sequences / GPU_FLOPS + (layers or 0) * STEP_OVERHEAD_PER_LAYER_S + STEP_OVERHEAD_S
        seconds = calls * max_new_tokens * step
    elif params is not None:
        cpu = cpu or cpu_speed.probe(threads)
        load_avg, cores = load or cpu_speed.load_now()
        slowdown = cpu_speed.slowdown_at_load(cpu, load_avg, cores)
        bound = cpu_speed.slowdown_at_load(cpu, load_avg, cores, apart=True)
        step = cpu_speed.decode_step_s(params, layers or 0, sequences, cpu, hidden, context=max_new_tokens / 2)
        typical, seconds = (calls * max_new_tokens * step * factor for factor in (slowdown, bound))
        host += f" ({cpu.flops / 1e9:.0f} GFLOP/s and {cpu.bandwidth / 1e9:.0f} GB/s measured now)"
        at_load = f" at load {load_avg:.0f} on {cores} core{'s' if cores != 1 else ''}"
        busy = cpu_speed.busy(load_avg, cores)
        plural = "s" if threads != 1 else ""
        shared = "" if bound <= 1 else (
            f"; at that load a new process's {threads} thread{plural} get about "
            f"{cpu_speed.fair_share(threads, load_avg, cores):.0%} of their time, {slowdown:.1f}x the time at the "
            "speed the probe measured" + (
                "" if bound <= slowdown else f"; threads that meet at a barrier in every operator go on only while "
                f"{'both' if threads == 2 else f'all {threads}'} run, and scheduled apart that is {bound:.1f}x, the "
                "bound"))
    size = f"a {params / 1e6:,.1f}M-parameter model" if params is not None else "a model of unknown size"
    text = (f"{num_prompts} goldens, greedy: {completions} completions" if goldens else
            f"{num_prompts} prompts x {n} = {completions} completions") + (
        f" of up to {max_new_tokens} tokens ({completions * max_new_tokens:,} tokens at most) from {size} with "
        f"{engine} on {host}")
    if seconds is not None:
        about = duration(typical if typical is not None else seconds)
        text += (f": decoding about {about}" + (f", at most {duration(seconds)}" if about != duration(seconds) else
                                                 " at most")
                 + f"{at_load}, once the model has loaded ({calls} generate call{'s' if calls != 1 else ''} of "
                 f"{sequences} sequences, {max_new_tokens} decode steps each, at this machine's present speed"
                 f"{shared}; the progress lines give the measured rate and revise the time left from the first "
                 "step on)" + (f". {busy[0].upper()}{busy[1:]}: the figures hold at that load, a busier machine "
                               "takes longer" if busy else ""))
    if goldens and not on_gpu and (typical or seconds or 0) > 600:
        text += (". Long for a CPU: max_new_tokens shrinks it; evaluating for a run, give it (CLI: --run RUN) and "
                 "the limit is the run's max_completion_length, what it trains and is promoted with")
    elif not on_gpu and completions > MIN_REVIEW_SAMPLES and (typical or seconds or 0) > 600:
        text += (f". Long for a CPU: fewer prompts (num_prompts {max(1, -(-MIN_REVIEW_SAMPLES // n))} gives the "
                 "review's 50 samples) or a shorter max_completion_length in the config shrink it")
    return {"num_prompts": num_prompts, "n": n, "completions": completions, "max_new_tokens": max_new_tokens,
            "max_tokens": completions * max_new_tokens, "engine": engine, "device": "cuda" if on_gpu else "cpu",
            "threads": threads, "params": params, "generate_calls": calls, "load": None if not at_load else
            round(load_avg, 1), "cores": None if not at_load else cores, "busy": busy or None, "estimated_seconds":
            None if typical is None else round(typical, 1), "estimated_seconds_at_most":
            None if seconds is None else round(seconds, 1), "text": text}


def plan_left(total: int, reused: int, n: int, max_new_tokens: int, batch_size: int, *args) -> dict:
    """The plan of what this process generates: sampling_plan (`args`: its engine, on_gpu, threads, params ...)
    for the `total` prompts less the `reused` ones a stopped pass of the same request kept (whole calls), with those
    counted apart (walk 12: after "reusing 64 completions" the plan said 128 to decode, and the end "Sampled 128
    completions ... in 322.5s" of a process that generated 64). `total_prompts` and `total_calls`: the whole
    pass's, which the progress lines count in."""
    per_call = max(1, batch_size // n)
    whole = {"total_prompts": total, "total_calls": math.ceil(total / per_call), "reused_prompts": reused,
             "reused_completions": reused * n}
    if not reused:
        return {**sampling_plan(total, n, max_new_tokens, batch_size, *args), **whole}
    kept = f"{reused * n} completions of prompts 1-{reused} reused from a stopped pass of the same request"
    if reused >= total:
        return {"num_prompts": 0, "n": n, "completions": 0, "generate_calls": 0, "estimated_seconds": None,
                "estimated_seconds_at_most": None, "load": None, "max_new_tokens": max_new_tokens, **whole,
                "text": f"{kept}; nothing left to generate"}
    plan = sampling_plan(total - reused, n, max_new_tokens, batch_size, *args)
    return {**plan, **whole, "text": f"prompts {reused + 1}-{total} of {total} to generate ({kept}): "
            + plan["text"]}


def finished_line(plan: dict, progress: Progress, seconds: float) -> str:
    """The line sampling ends with: the time it took, loading and decoding apart where the model was loaded here (the
    plan's figures are decoding's; issue 49's seventh walk compared "at most 14.7 s" with a 33.3 s that held the
    model's loading), against the plan."""
    text = f"generated {plan['completions']} completions in {seconds:.1f} s" + (
        f" ({plan['reused_completions']} more reused)" if plan.get("reused_completions") else "")
    bound = plan["estimated_seconds_at_most"]
    if progress.loaded_at is None:
        return text + ("" if bound is None else f" (planned at most {bound} s)")
    decoding = time.perf_counter() - progress.loaded_at
    text += f" ({max(seconds - decoding, 0.0):.1f} s loading the model, {decoding:.1f} s decoding"  # never -0.0
    if bound is None:
        return text + ")"
    held = "within" if decoding <= bound else "past"
    return text + f"; {held} the plan's at most {bound} s for decoding" + (
        f" at load {plan['load']:.0f}" if plan.get("load") is not None else "") + ")"


class Progress(DecodeProgress):
    """Progress lines for one sampling pass: generation.DecodeProgress (the helper evaluation's lines use too),
    its batch lines saying where each finished call's samples went."""

    def __init__(self, report: Report, plan: dict, partial: str = "inspection/samples.partial.jsonl"):
        """`partial`: the file each finished call is appended to, as the run names it (a launched run's
        exploration writes inspection/explore-<n>/samples.partial.jsonl)."""
        super().__init__(report, plan.get("total_prompts", plan["num_prompts"]),  # the whole pass's (plan_left)
                         plan.get("total_calls", plan["generate_calls"]), plan["max_new_tokens"], "sampling",
                         f"sampled {{done}}/{{total}} prompts x {plan['n']}, written to "
                         + partial.replace("{", "{{").replace("}", "}}"))  # a template: the path's braces kept
        self.plan, self.partial = plan, partial
        self.planned_step_s = plan_step_s(plan)

    def past_plan(self, decoding_s: float) -> str:
        """Once decoding has run past the plan's "at most": say so, with the load it was planned at and the load now
        (issue 49's seventh walk: "at most 14.7 s" took 33.3 s at load 15-17, and nothing said the figure was gone)."""
        bound = self.plan.get("estimated_seconds_at_most")
        if bound is None or decoding_s <= bound or self.plan.get("load") is None:
            return ""
        load, cores = cpu_speed.load_now()
        return (f"; past the plan's {duration(bound)} (planned at load {self.plan['load']:.0f}, load {load:.0f} on "
                f"{cores} core{'s' if cores != 1 else ''} now): the time left above is from the measured speed")
