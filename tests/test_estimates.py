"""Waiting with a figure (issue 49): a CPU run's step time and sampling's duration estimated from the planner's
speed model at the rates this machine measures, training_status giving the step estimate before the first step,
and progress lines with counts and elapsed time whether or not stderr is a terminal. Structure only: no timing
that depends on the machine's load is asserted (bench/bench_estimates.py compares estimates with measurements)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import checkout_env
from support import emit_run

from mcp_server.generation import DecodeProgress
from mcp_server.memory import cpu_speed
from mcp_server.memory.estimate import step_estimate
from mcp_server.inspection.sampling_plan import Progress, finished_line, model_size, sampling_plan
from mcp_server.recipe.runspec import RunSpec
from mcp_server.runs import Run


def machine(flops: float, bandwidth: float = 10e9, threads: int = 1) -> cpu_speed.CpuThroughput:
    return cpu_speed.CpuThroughput(flops, bandwidth, threads, time.time())


def test_the_cpu_sampling_plan_stands_on_the_measured_machine(tiny_model):
    params, layers, hidden = model_size(tiny_model)
    slow, fast = (sampling_plan(16, 8, 128, 64, "transformers", False, 1, params, layers, hidden, cpu=machine(f),
                                load=(0.0, 2)) for f in (5e9, 50e9))
    assert 0 < fast["estimated_seconds_at_most"] < slow["estimated_seconds_at_most"]
    assert "5 GFLOP/s and 10 GB/s measured now" in slow["text"] and "about " in slow["text"]
    measured = sampling_plan(2, 8, 32, 64, "transformers", False, 1, params, layers, hidden)  # probes this machine
    assert measured["estimated_seconds_at_most"] >= 0 and "GFLOP/s" in measured["text"]


def test_the_cpu_sampling_bound_holds_at_the_load_it_states(tiny_model):
    """Issue 49, third walk: "about 2 min at most" took 474.8 s at load 7-14 on 2 cores. The bound now states the
    load it holds at, and slows the measured speed to the share of the cores a new process gets there, unless the
    probe itself got no more than that share (then it measured the load already). Constructed machines and loads."""
    params, layers, hidden = model_size(tiny_model)  # a small model: sampled on one thread

    def plan(cpu, load, *size, threads=1):
        return sampling_plan(16, 8, 128, 64, "transformers", False, threads, *(size or (params, layers, hidden)),
                             cpu=cpu, load=load)

    lull = machine(20e9)  # a probe that got all of its thread's time: it measured the machine as if idle
    quiet, busy = plan(lull, (0.0, 2)), plan(lull, (9.0, 2))
    assert "at most at load 0 on 2 cores, once the model has loaded (" in quiet["text"]
    assert "at most at load 9 on 2 cores, once the model has loaded (" in busy["text"]
    assert (busy["load"], busy["cores"]) == (9.0, 2)
    # one thread beside 9 runnable ones on 2 cores gets 2/10 of its time: five times the quiet bound
    assert busy["estimated_seconds_at_most"] == pytest.approx(5 * quiet["estimated_seconds_at_most"], rel=0.01)
    assert "get about 20% of their time, 5.0x the time at the speed the probe measured" in busy["text"], busy["text"]
    assert busy["estimated_seconds"] == busy["estimated_seconds_at_most"]  # one thread: no barrier to wait at
    # a probe that got that share already measured the load: no second slowdown
    assert plan(lull._replace(share=0.2), (9.0, 2))["estimated_seconds_at_most"] == quiet["estimated_seconds_at_most"]
    # two threads (smollm2-135m's size): about the fair share, 2/11, and at most what both scheduled at once gives,
    # (2/11)**2, when every operator's barrier waits for both
    two = machine(20e9, threads=2)
    idle2, busy2 = (plan(two, load, 134_515_008, 30, 576, threads=2) for load in ((0.0, 2), (9.0, 2)))
    assert busy2["threads"] == 2 and busy2["estimated_seconds"] == pytest.approx(
        11 / 2 * idle2["estimated_seconds_at_most"], rel=0.01)
    assert busy2["estimated_seconds_at_most"] == pytest.approx((11 / 2) ** 2 * idle2["estimated_seconds_at_most"],
                                                               rel=0.01)
    assert ", at most " in busy2["text"] and " at load 9 on 2 cores, once" in busy2["text"], busy2["text"]
    assert "scheduled apart that is 30.2x, the bound" in busy2["text"], busy2["text"]
    assert "The machine is busy: load 9 on 2 cores: the figures hold at that load" in busy2["text"], busy2["text"]
    assert busy2["busy"] == "the machine is busy: load 9 on 2 cores"
    assert "busy" not in idle2["text"] and idle2["busy"] is None


def test_sampling_revises_its_figure_from_the_first_step_and_says_when_the_plan_is_past(tiny_model):
    """Issue 49's seventh walk: "at most 14.7 s" took 33.3 s at load 15-17 (the model's loading in the 33.3 s, and
    nothing on the way revised the figure). The first step line gives the time left at that step's speed, a line past
    the plan's "at most" says so with the load planned at and now, and the last line keeps loading and decoding
    apart."""
    params, layers, hidden = model_size(tiny_model)
    plan = sampling_plan(4, 2, 8, 64, "transformers", False, 1, params, layers, hidden, cpu=machine(20e9),
                         load=(16.0, 2))
    lines = []
    progress = Progress(lambda done, total, message: lines.append(message), plan)
    progress.loaded()
    time.sleep(0.01)
    progress.step(0, 1)
    # walk 13: the first step holds the prefill, so it is never extrapolated ("about 45 min left", then 9 min)
    assert re.search(r"token 1 of up to 8 \(the prompts' prefill with it: [\d.]+ m?s\); about [\d.]+ m?s left at "
                     r"the plan's decode step, until the next steps' speed replaces it", lines[-1]), lines
    assert "first step's speed" not in lines[-1]
    unplanned = DecodeProgress(lambda done, total, message: lines.append(message), 4, 1, 8)
    unplanned.loaded()
    unplanned.step(0, 1)
    assert lines[-1].endswith("token 1 of up to 8 (the prompts' prefill with it: 0 s); the time left follows from "
                              "the next steps' speed"), lines[-1]
    progress.plan = {**plan, "estimated_seconds_at_most": 0.0}  # a plan the machine has broken
    time.sleep(0.01)
    progress.step(0, 2)
    assert re.search(r"past the plan's 0 s \(planned at load 16, load \d+ on \d+ cores? now\)", lines[-1]), lines
    done = finished_line(plan, progress, 5.0)
    assert "(0.0 s loading the model" in finished_line(plan, progress, 0.0)  # walk 13: "(-0.0 s loading"
    assert re.search(r"generated 8 completions in 5.0 s \([\d.]+ s loading the model, [\d.]+ s decoding; within "
                     r"the plan's at most [\d.]+ s for decoding at load 16\)", done), done


def test_a_cpu_run_has_a_step_estimate_from_the_machine_and_its_config(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("LLM_FINETUNING_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # torch's default: every core
    spec = RunSpec.of_run(Run(emit_run("estimate")))
    (tmp_path / "cache" / "cpu_probe.json").unlink()  # emission measured the machine for its time line
    assert step_estimate(spec, measure=False) is None  # nothing measured yet, and asked not to measure
    quiet = (0.0, len(os.sched_getaffinity(0)))  # the figures compared at one load: the machine's moves
    first = step_estimate(spec, load=quiet)
    # the threads the trainer computes with (torch's default: every core here), not sampling's one for a small model
    threads = len(os.sched_getaffinity(0))
    assert first.step_s > 0 and "per step on this CPU" in first.text
    assert f"measured on {threads} CPU thread{'s' if threads > 1 else ''}" in first.text, first.text
    assert (tmp_path / "cache" / "cpu_probe.json").is_file()
    assert step_estimate(spec, measure=False, load=quiet) == first  # the stored probe serves a run holding the cores
    bigger = RunSpec.of_run(Run(emit_run("bigger", per_device_train_batch_size=16, max_completion_length=64)))
    assert step_estimate(bigger, measure=False, load=quiet).step_s > first.step_s
    # issue 49's seventh walk: a step took 3.5x its figure at load 15-17 on 2 cores. The figure now stands on the
    # share of the cores the trainer's threads get at the load it states, and says the machine is busy. The stored
    # probe is made one that had the cores to itself (share 1): the slowdown is against the share the probe got,
    # which the machine's load at this test's probe would otherwise decide
    probe_file = tmp_path / "cache" / "cpu_probe.json"
    stored = json.loads(probe_file.read_text())
    probe_file.write_text(json.dumps({k: {**v, "share": 1.0, "readings": [{**r, "share": 1.0} for r in v["readings"]]}
                                      for k, v in stored.items() if k != cpu_speed.RUNS_KEY}))  # a probe's alone
    first = step_estimate(spec, measure=False, load=quiet)
    busy = step_estimate(spec, measure=False, load=(16.0, 2))
    assert busy.step_s > first.step_s and "the machine is busy: load 16 on 2 cores" in busy.text, busy.text
    # a running run is one of the load it reads: its own threads are not counted against it
    assert step_estimate(spec, measure=False, load=(16.0, 2), running=True).step_s < busy.step_s
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a launch environment that sets it: the trainer's torch follows it
    assert "measured on 1 CPU thread" in step_estimate(spec, load=quiet).text  # then the load's words (walk 12)


def reading(share: float, sync_s: float, op_s: float = 200e-6, flops: float = 5e9, bandwidth: float = 3e9):
    """One short probe's reading of a 2-core machine (cpu_speed._read's fields), as constructed."""
    return cpu_speed.CpuThroughput(flops, bandwidth, 2, time.time(), op_s, sync_s, share)


def test_the_cpu_step_estimate_holds_under_a_steady_load_and_its_range_covers_the_readings(workspace, monkeypatch):
    """Issue 49: the same config emitted twice at a steady load 10-11 on 2 cores got step estimates 4x apart, as the
    one probe behind each caught a lull or a spike, and a run took 1.7-4.2x its figure. Now an estimate stands on
    the median of several readings at the typical load, and states the range that every reading spans from the
    least to the largest load average. Constructed readings and loads (nothing here reads the machine)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    spec = RunSpec.of_run(Run(emit_run("steady")))
    monkeypatch.setenv("LLM_FINETUNING_CACHE", str(workspace / "cache"))  # no other runs' measured steps correct it
    # a busy 2-core machine's readings at load 10 (issue 49's figures: the small op's barrier 33 ms and more, the
    # probe's threads getting a tenth of their time) and two that a momentary reading catches
    busy = [reading(0.10, 0.090), reading(0.12, 0.080), reading(0.09, 0.100), reading(0.11, 0.085)]
    lull = reading(1.0, 35e-6, op_s=35e-6, flops=20e9, bandwidth=10e9)  # the cores free for a fraction of a second
    spike = reading(0.05, 0.400, op_s=1e-3, flops=2e9, bandwidth=1e9)
    steady = [cpu_speed.load_range((10.6, 10.2, 9.8), 2), cpu_speed.load_range((11.0, 10.4, 10.1), 2)]
    one = [step_estimate(spec, load=steady[0], readings=[r]).step_s for r in (lull, spike)]
    # what one reading each made of the same config at the same load (4x before walk 12's change: the spike's time,
    # never below its own, is now scaled by the 5% share it got, so one reading moves the figure 2x)
    assert max(one) > 2 * min(one), one
    emissions = [(steady[0], [lull, *busy]), (steady[1], [busy[2], spike, busy[0], busy[3], busy[1]])]
    first, second = (step_estimate(spec, load=load, readings=readings) for load, readings in emissions)
    assert max(first.step_s, second.step_s) <= 1.5 * min(first.step_s, second.step_s), (first, second)
    for (load, readings), estimate in zip(emissions, (first, second)):
        assert estimate.low_s <= estimate.step_s <= estimate.high_s, estimate
        # whatever state of the machine the run meets among those read, at any of the load's averages, its step is
        # inside the stated range
        for r in readings:
            for figure in (load.low, load.typical, load.high):
                at = step_estimate(spec, load=(figure, 2), readings=[r]).step_s
                assert estimate.low_s - 0.1 <= at <= estimate.high_s + 0.1, (r, figure, at, estimate)
        assert re.search(r"per step on this CPU \(\S+ \S+ to \S+ \S+ over 5 readings of this machine at load "
                         r"\d+ to \d+ on 2 cores\)", estimate.text), estimate.text
    # a load that holds still: one figure, no load range; a probe of one reading (an older stored one): no range
    still = step_estimate(spec, load=(10.0, 2), readings=busy[:1])
    assert still.low_s == still.step_s == still.high_s and " over " not in still.text, still


def test_a_probe_adds_its_readings_to_those_of_the_last_minutes(workspace, monkeypatch):
    """A probe's readings are taken within a second or two, in one state of the machine; the next probe at a steady
    load (another emission, sampling) pools its readings with those of the last POOL_S seconds (at most POOL_MAX),
    so the figure stands on both states, between the two one-probe figures. Constructed readings."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    spec = RunSpec.of_run(Run(emit_run("pooled")))
    now = time.time()
    lull = [reading(1.0, 35e-6, op_s=35e-6, flops=20e9, bandwidth=10e9)._replace(measured_at=now - 60)] * 5
    busy = [reading(0.1, 0.09)._replace(measured_at=now)] * 5
    assert cpu_speed.pooled(lull, busy, now) == lull + busy
    assert cpu_speed.pooled(lull, busy, now + cpu_speed.POOL_S) == busy  # the lull's readings are too old by then
    assert len(cpu_speed.pooled(lull * 3, busy, now)) == cpu_speed.POOL_MAX
    load = cpu_speed.load_range((10.6, 10.2, 9.8), 2)
    alone = sorted(step_estimate(spec, load=load, readings=r).step_s for r in (lull, busy))
    both = step_estimate(spec, load=load, readings=cpu_speed.pooled(lull, busy, now))
    assert alone[0] <= both.step_s <= alone[1] and both.low_s <= alone[0] and both.high_s >= alone[1], (alone, both)


@pytest.mark.slow
def test_evaluate_model_prints_progress_with_elapsed_time_on_a_pipe(workspace, tiny_model):
    from mcp_server.tiny import make_task, write_jsonl

    goldens = write_jsonl(make_task(12, seed=5), workspace / "goldens.jsonl")
    proc = subprocess.run([sys.executable, "-m", "mcp_server.cli", "evaluate-model", "tiny", "--goldens",
                           str(goldens)], cwd=workspace, env=checkout_env({"LLM_FINETUNING_WORKSPACE": str(workspace)}),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("  ... ")]
    assert lines[0].startswith("  ... evaluating tiny on 12 goldens") and "elapsed]" in lines[0]
    assert any("decoding prompts 1-12 of 12: token " in line for line in lines), lines
    assert lines[-1].startswith("  ... decoded 12/12 prompts") and "elapsed]" in lines[-1], lines


def test_evaluate_model_plans_up_front_and_decodes_a_baseline_at_the_runs_budget(workspace, tiny_model):
    """Issue 49: the README's baseline on smollm2-135m decoded 256 tokens a golden (the default) with no plan up
    front, for a run that trains with 24, and ran 10 minutes past its "at most". Now the first line is the plan
    (completions, tokens at most, the estimate and its basis), and with the run the limit is its
    max_completion_length, what promote_checkpoint decodes with when it measures a baseline itself."""
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest
    from mcp_server.tiny import make_task, write_jsonl

    goldens = write_jsonl(make_task(6, seed=5), workspace / "goldens.jsonl")
    run = Run(emit_run("budget", max_completion_length=12))
    lines = []
    result = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), run=str(run.dir),
                                            baseline="never"), report=lambda d, t, message: lines.append(message))
    assert result.max_new_tokens == 12 and result.max_new_tokens_from == f"{run.name}'s max_completion_length"
    assert lines[0].startswith(f"evaluating {tiny_model} on 6 goldens, max_new_tokens 12 ({run.name}'s "
                               "max_completion_length); plan: 6 goldens, greedy: 6 completions of up to 12 tokens "
                               "(72 tokens at most) from a 0.1M-parameter model with transformers on "), lines[0]
    # an estimate is made (a quiet machine's at-most for 72 tiny tokens rounds to 0.0 s: never assert it above 0)
    assert result.plan["max_tokens"] == 72 and result.plan["estimated_seconds_at_most"] >= 0
    # the figure said is the typical one, or under load only the "at most" one (a GPU: one figure)
    said = {generation_duration(v) for v in (result.plan["estimated_seconds"], result.plan["estimated_seconds_at_most"])
            if v is not None}
    assert any(f": decoding about {text}" in lines[0] for text in said), (said, lines[0])
    alone = evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), limit=1, baseline="never"))
    assert alone.max_new_tokens == 256 and alone.max_new_tokens_from.startswith("the default; --run RUN")


def generation_duration(seconds: float) -> str:
    from mcp_server.generation import duration

    return duration(seconds)


def test_a_long_cpu_emission_says_its_time_and_a_rehearsal_that_finishes(workspace):
    """Issue 49: `emit-config --gpu cpu` gave smollm2-135m a full fine-tune of 30 steps of 32 completions (hours on
    a CPU) and said nothing of the time. On a CPU target emit now prints the planner's step estimate times
    max_steps, and past 30 minutes the rehearsal that fits (LoRA, one micro-batch a step, the steps that fit),
    whose own emission then fits. Constructed: the tiny model with max_steps 100000."""
    import re

    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    def emit(name: str, finetune: str = "full", **overrides):
        return emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name=name,
                                                  finetune=finetune, overrides=overrides))

    long = emit("long", max_steps=100_000).cpu_time
    assert "per step on this CPU" in long and "; 100000 steps: about " in long, long
    advice = re.search(r"Long for a CPU: a rehearsal that finishes, LoRA with one micro-batch a step, about .+ a "
                       r"step, (\d+) steps? in about .+: emit again with --finetune lora (.*)--override "
                       r"max_steps=(\d+) \(", long)
    assert advice and advice[1] == advice[3], long
    changes = {"gradient_accumulation_steps": 1} if advice[2] else {}
    rehearsal = emit("rehearsal", "lora", max_steps=int(advice[3]), **changes).cpu_time
    assert f"; {advice[3]} steps: about " in rehearsal and "Long for a CPU" not in rehearsal, rehearsal
    gpu = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="H100", run_name="gpu"))
    assert gpu.cpu_time is None


def test_the_step_split_is_the_same_at_emission_and_while_running_at_any_load(workspace, monkeypatch):
    """Walk 9: emit-config said "generation 3.4 min, training 3.1 min" and training-status "generation 73 s, training
    4.4 min" for the same run: each gave the breakdown of the one reading nearest its figure, at its own load (the
    emission's, the running run's less its own threads). The split now depends on the readings alone. Constructed
    readings of unlike machines (a decode barrier that dominates, one that does not) and loads."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    spec = RunSpec.of_run(Run(emit_run("split")))
    readings = [reading(0.10, 0.090), reading(1.0, 35e-6, op_s=35e-6, flops=20e9, bandwidth=10e9),
                reading(0.05, 0.400, op_s=1e-3, flops=2e9, bandwidth=1e9), reading(0.5, 0.01, flops=8e9)]
    shares = {(running, load): _split_bounds(step_estimate(spec, load=(load, 2), running=running,
                                                            readings=readings).text)
              for running in (False, True) for load in (0.5, 3.0, 10.0, 16.0)}
    # one share inside every estimate's, as far as its rounded words ("generation 1 s, training 12 s") can say
    assert max(low for low, _ in shares.values()) <= min(high for _, high in shares.values()) + 0.02, shares


def _split_bounds(text: str) -> tuple[float, float]:
    """The least and largest generation share the words "generation X, training Y" allow, each figure rounded to
    its last digit ("N s": to the second; "N.N min": to the tenth)."""
    found = re.search(r"generation ([\d.]+) (s|min|h), training ([\d.]+) (s|min|h)", text)
    assert found, text
    unit = {"s": 1, "min": 60, "h": 3600}

    def bounds(figure: str, name: str) -> tuple[float, float]:
        step = (0.1 if "." in figure else 1) * unit[name] / 2
        return max(float(figure) * unit[name] - step, 0.0), float(figure) * unit[name] + step

    (g_low, g_high), (t_low, t_high) = bounds(found[1], found[2]), bounds(found[3], found[4])
    return g_low / (g_low + t_high), g_high / (g_high + t_low)


# bench/bench_estimates.py's tiny training case (6 steps, 4 completions of 12 tokens, save_steps 1, 2 threads) at
# load 9.8 on 2 cores: the stored probe's typical reading then, and the seconds between the steps it logged
TINY_AT_LOAD_10 = {"reading": {"flops": 3e9, "bandwidth": 2e9, "op_s": 86.7e-6, "sync_s": 63.9e-3, "share": 0.12},
                   "load": 9.8, "steps_s": [3.46, 1.21, 4.43, 6.59, 2.19]}


def test_the_tiny_models_cpu_step_estimate_is_near_its_measured_step(workspace, monkeypatch):
    """Issue 49: on the tiny model the CPU step estimate was 4.9x the measured step at load 11-19 (5.1x for the
    measurement kept here, 18.2 s against 3.58 s): every small operator was charged the probe's full barrier (an
    8 x 256 x 256 matmul's, 64 ms at that load), and the trainer's fixed host work was counted as a loaded step
    taken for an idle machine's. The reading and the step measured then (a constructed load: nothing here reads
    the machine): the estimate is within 2x of the measured mean, and says "1 reading", not "1 readings"."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    spec = RunSpec.of_run(Run(emit_run("tiny-measured", max_steps=6, max_completion_length=12,
                                       generation_kwargs={"min_new_tokens": 12})))
    monkeypatch.setenv("LLM_FINETUNING_CACHE", str(workspace / "cache"))  # no other runs' measured steps correct it
    case = TINY_AT_LOAD_10
    reading = cpu_speed.CpuThroughput(threads=2, measured_at=time.time(), **case["reading"])
    measured = sum(case["steps_s"]) / len(case["steps_s"])
    estimate = step_estimate(spec, load=(case["load"], 2), running=True, readings=[reading])
    assert 0.5 <= estimate.step_s / measured <= 2, (estimate.step_s, measured, estimate.text)
    alone = reading._replace(share=1.0)  # a reading that had the cores to itself: the load's range moves the figure
    ranged = step_estimate(spec, load=cpu_speed.load_range((4.0, 9.8, 14.0), 2), readings=[alone])
    assert " over 1 reading of this machine" in ranged.text and "1 readings" not in ranged.text, ranged.text


# Walk 10 said smollm2-135m's CPU step estimate was 1.5-1.9x the measured step (the tiny model's 1.01x). Measured
# here the same way as TINY_AT_LOAD_10 (2 cores, AMD EPYC, 2026-12-07): the probe's typical reading, the load the
# steps ran at, and the seconds measured. FULL: bench_estimates.py's smollm2 training case (4 prompts x 4
# completions of 16 tokens, full fine-tune), its second step (the first includes the start). LORA: the walk's own
# config (1 prompt x 8 completions of 16 tokens, LoRA r16, activation checkpointing, beta 0.01), its generation and
# its passes timed apart (bench_estimates.py --smollm2-parts): generation 330.8 s, the passes 299.0 s.
SMOLLM2_CASES = {
    "full": {"reading": {"flops": 4.977e9, "bandwidth": 2.173e9, "op_s": 135.7e-6, "sync_s": 62.4e-3,
                         "share": 0.144},
             "load": 15.5, "steps_s": [457.8], "finetune": "full", "overrides": {}},
    "lora": {"reading": {"flops": 4.090e9, "bandwidth": 2.411e9, "op_s": 113.1e-6, "sync_s": 67.8e-3,
                         "share": 0.131},
             "load": 14.3, "steps_s": [330.8 + 299.0], "finetune": "lora",
             "overrides": {"per_device_train_batch_size": 8, "num_generations": 8}},
}


@pytest.mark.parametrize("name", sorted(SMOLLM2_CASES))
def test_smollm2s_cpu_step_estimate_is_near_its_measured_step(workspace, monkeypatch, name):
    """The estimate for smollm2-135m's architecture (the catalog's SmolLM2-135M-Instruct, what 'smollm2-135m'
    converts) at each recorded reading and load is within 1.5x of the step measured then either way: 0.91x (full)
    and 0.92x (LoRA) with the speed model's constants as they are, so none changed (the walk's 1.5-1.9x was not
    met at load 14-17; sampling's decoding alone was 1.9x over once, 0.75x in the LoRA step)."""
    from support import ANY_TEXT_REWARDS, TINY_OVERRIDES, emit_config

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    case = SMOLLM2_CASES[name]
    result = emit_config(model="tiny", gpu="cpu", finetune=case["finetune"], run_name=f"smollm2-{name}",
                         rewards=ANY_TEXT_REWARDS, overrides={**TINY_OVERRIDES, "max_completion_length": 16,
                                                              "generation_kwargs": {"min_new_tokens": 16},
                                                              **case["overrides"]})
    assert result.validation.valid, result.validation
    spec = RunSpec.of_run(Run(Path(result.run_dir)))
    spec = spec.with_values({**spec.values, "model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"})
    reading = cpu_speed.CpuThroughput(threads=2, measured_at=time.time(), **case["reading"])
    measured = sum(case["steps_s"]) / len(case["steps_s"])
    estimate = step_estimate(spec, load=(case["load"], 2), running=True, readings=[reading])
    assert "4 completions" in estimate.text or "8 completions" in estimate.text, estimate.text
    assert 1 / 1.5 <= estimate.step_s / measured <= 1.5, (estimate.step_s, measured, estimate.text)


def test_the_load_moves_a_step_estimate_both_ways_from_the_probes_share(workspace, monkeypatch):
    """Walk 12: a probe taken at a busy moment (17% of its threads' time) and a run at load 2-6 took 146 s a step
    where the estimate said 412 s: the estimate was never below the probe's own time. The load now moves it either
    way: a run that gets more of the cores than the probe got is estimated faster than the probe's time, one that
    gets less slower, in proportion (constructed readings, one machine state each)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    spec = RunSpec.of_run(Run(emit_run("both-ways")))
    busy_probe = [reading(0.17, 0.04)]  # a probe that got 17% of its threads' time
    figures = {load: step_estimate(spec, load=(load, 2), readings=busy_probe, calibrated=False).step_s
               for load in (0.0, 2.0, 12.0)}
    at_share = step_estimate(spec, load=(8.0, 2), readings=busy_probe, calibrated=False)  # 2 / (8 + 2) = 20%
    assert figures[0.0] < at_share.step_s * 0.3, (figures, at_share.step_s)  # all of the cores: 0.17x the time
    assert figures[0.0] < figures[2.0] < at_share.step_s < figures[12.0], figures
    assert figures[12.0] == pytest.approx(at_share.step_s * (12 + 2) / (8 + 2), rel=0.02), figures
    quiet = step_estimate(spec, load=(0.0, 2), readings=busy_probe, calibrated=False).text
    assert "0.2x the measured speed's time" in quiet and "more than the probe got" in quiet, quiet


def test_a_runs_measured_steps_correct_the_next_runs_estimate_and_say_the_band(workspace, monkeypatch):
    """Walk 12: one run's steps took 0.35x its estimate, the next run's 1.5-2.2x, and nothing the first measured
    reached the second's figure. A run's measured step over its own estimate (training_status, once a step is
    logged: estimate.calibrate) is kept; the next runs' estimates on this machine are that figure times the median
    of those ratios, their range times the least and largest, and the words say so, with the model's own figure."""
    from mcp_server.memory.estimate import calibrate

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("LLM_FINETUNING_CACHE", str(workspace / "cache"))  # its own calibration store
    readings = [reading(0.5, 0.01), reading(0.4, 0.02), reading(0.6, 0.01)]
    first, second, third = (Run(emit_run(name)) for name in ("measured-a", "measured-b", "next"))
    for run in (first, second, third):
        cpu_speed.keep_for_run(run.dir, readings)
    load = cpu_speed.load_range()
    model = {run.name: step_estimate(RunSpec.of_run(run), measure=False, running=True, load=load)
             for run in (first, second, third)}
    assert all("corrected by" not in e.text for e in model.values())
    ratios = [calibrate(first, model[first.name].step_s * 2.0, load),
              calibrate(second, model[second.name].step_s * 3.0, load)]
    assert ratios == [pytest.approx(2.0), pytest.approx(3.0)]
    corrected = step_estimate(RunSpec.of_run(third), measure=False, running=True, load=load)
    middle = 2.5
    assert corrected.step_s == pytest.approx(model[third.name].step_s * middle, rel=0.02), corrected
    assert corrected.low_s == pytest.approx(model[third.name].low_s * min(ratios), rel=0.02), corrected
    assert corrected.high_s == pytest.approx(model[third.name].high_s * max(ratios), rel=0.02), corrected
    assert "corrected by the steps 2 earlier runs on this machine measured: " in corrected.text, corrected.text
    assert f"{min(ratios):.2f}-{max(ratios):.2f}x the model's figure" in corrected.text, corrected.text
    own = step_estimate(RunSpec.of_run(first), measure=False, running=True, load=load)  # never its own ratio
    assert "corrected by the steps 1 earlier run on" in own.text, own.text
