"""Benchmark: the CPU estimates of issue 49 beside what this machine measures.

Sampling: sample_completions on a CPU run (the tiny model, and smollm2-135m when its wheel is installed), every
completion held to the limit (min_new_tokens), so the plan's "at most" is the case measured; the plan's
estimated_seconds_at_most against the seconds its own report measured. Training: a tiny CPU run launched, its
step estimate (training_status before the first step) against the seconds between logged steps. Prints a JSON line per
case with its estimate, measurement and ratio (estimate / measured); the machine's load is printed beside them
(the probe measures the machine at the time, so a load that changes mid-case moves the ratio). Each sampling case
runs twice: as the machine is, and loaded by one busy loop per core made here (the plan then reads that load). The
sampling figures are decoding's (the plan's scope); the model's loading is printed apart. First, the same config's step
estimate three times from fresh probes (emission's figure: how far it moves at one load), and the training case
also prints emission's range and whether the measured step is inside it.

    .venv/bin/python bench/bench_estimates.py [--skip-sampling] [--skip-training] [--skip-smollm2]
    .venv/bin/python bench/bench_estimates.py --smollm2-parts    (smollm2_step_parts only)
    .venv/bin/python bench/bench_estimates.py --walk12    (walk 12's runs before and after only: walk12_case)
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def sampling_case(model: str, prompts: int, limit: int) -> dict:
    from support import emit_run

    from mcp_server.inspection.models import SampleRequest
    from mcp_server.inspection.sampling import sample_completions

    run = emit_run(f"sample-{model}", model=model, max_completion_length=limit,
                   generation_kwargs={"min_new_tokens": limit})
    seen = []
    result = sample_completions(SampleRequest(run=str(run), num_prompts=prompts),
                                report=lambda done, total, message: seen.append(message))
    said = re.search(r"generated \d+ completions in ([\d.]+) s \((-?[\d.]+) s loading the model, ([\d.]+) s "
                     r"decoding", seen[-1])
    assert said, seen[-1]
    total, loading, decoding = (float(v) for v in said.groups())
    estimate = result.plan["estimated_seconds_at_most"]  # decoding's, once the model has loaded
    return {"case": f"sampling {model}: {prompts} prompts x {result.n}, {limit} tokens each",
            "plan": result.plan["text"], "estimate_s": estimate, "measured_s": decoding, "loading_s": loading,
            "total_s": total, "ratio": round(estimate / decoding, 2), "load": os.getloadavg()[0],
            "first_step_line": next((m for m in seen if "first step's speed" in m), None)}


def loaded(case, *args) -> dict:
    """`case` under a load made here: one busy loop per core beside it (os.sched_getaffinity), so the plan reads
    the load it creates (the 1-minute average lags: the loops run 20 s first)."""
    import multiprocessing

    cores = len(os.sched_getaffinity(0))
    loops = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(cores)]
    for loop in loops:
        loop.start()
    try:
        time.sleep(20)
        result = case(*args)
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()
    return {**result, "case": f"{result['case']}, loaded ({cores} busy loops beside it)"}


def _spin() -> None:
    while True:
        pass


def training_case(model: str = "tiny", max_steps: int = 6, tokens: int = 12, finetune: str = "full",
                  deadline_s: float = 600, **overrides) -> dict:
    from support import ANY_TEXT_REWARDS, TINY_OVERRIDES, emit_config, pass_inspection

    from mcp_server.training.launch import launch_training
    from mcp_server.training.models import LaunchRequest, StatusRequest
    from mcp_server.training.runstate import read_progress
    from mcp_server.training.status import training_status
    from mcp_server.runs import Run

    emitted = emit_config(model=model, gpu="cpu", run_name=f"train-{model}-{finetune}", rewards=ANY_TEXT_REWARDS,
                          finetune=finetune, overrides={**TINY_OVERRIDES, "max_steps": max_steps,
                                                        "max_completion_length": tokens,
                                                        "generation_kwargs": {"min_new_tokens": tokens}, **overrides})
    assert emitted.validation.valid, emitted.validation
    said = re.search(r"about (\S+ \S+) per step", emitted.cpu_time or "")  # emission's own words, before sampling
    run = Path(emitted.run_dir)
    pass_inspection(run)
    from mcp_server.memory.estimate import step_estimate
    from mcp_server.recipe.runspec import RunSpec

    emitted = step_estimate(RunSpec.of_run(Run(run)))  # what emission says (a range where the model gives one)
    low, high = getattr(emitted, "low_s", None), getattr(emitted, "high_s", None)
    parts = _parts(RunSpec.of_run(Run(run)))
    launched = launch_training(LaunchRequest(run=str(run)))
    assert launched.launched, launched.message
    load_then = [round(v, 2) for v in os.getloadavg()]  # what the estimate below reads
    first = training_status(StatusRequest(run=str(run)))
    at_launch = re.search(r"first step expected about (\S+ \S+) per step", launched.message)
    deadline = time.time() + deadline_s
    loads = []  # the 1-minute load average while it trains: what the measured steps ran at
    while time.time() < deadline:
        loads.append(os.getloadavg()[0])
        status = training_status(StatusRequest(run=str(run)))
        if status.state not in ("starting", "running"):
            break
        time.sleep(2)
    times = [line.get("time") for line in read_progress(Run(run))[0] if line.get("step") is not None]
    stamps = [t if isinstance(t, (int, float)) else time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S"))
              for t in times if t]
    steps = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    measured = sum(steps) / len(steps) if steps else None
    return {"case": f"training {model} ({finetune}) on the CPU ({tokens} tokens a completion): seconds per step after "
                    "the first",
            "estimate": first.step_estimate, "steps_s": [round(s, 2) for s in steps],
            "emission_said": said[1] if said else None, "launch_said": at_launch[1] if at_launch else None,
            "estimate_s": first.step_estimate_s, "measured_s": measured, "state": status.state,
            "ratio": round(first.step_estimate_s / measured, 2) if measured and first.step_estimate_s else None,
            "emitted_s": emitted.step_s if emitted else None, "emitted_range_s": [low, high] if low else None,
            "emitted_ratio": round(emitted.step_s / measured, 2) if measured and emitted else None,
            "inside_range": low <= measured <= high if measured and low else None, "load": os.getloadavg()[0],
            "load_at_estimate": load_then,
            "load_while_training": [round(min(loads), 1), round(sum(loads) / len(loads), 1), round(max(loads), 1)],
            **parts, "implied_trainer_host_ops": round((measured / parts["slowdown"] - parts["model_s"])
                                                       / parts["op_s"]) if measured else None}


def smollm2_step_parts(repeats: int = 3) -> list[dict]:
    """The walk's smollm2-135m LoRA step (1 prompt x 8 completions of 16 tokens, LoRA r16 on all linear layers,
    activation checkpointing, beta 0.01) in its two parts, each timed on 2 threads: generation (transformers
    generate, every completion at its limit) and the trainer's passes (the reference forward with the adapter off,
    then forward and backward); each beside the probe's typical reading taken just before and the load averages at
    its start and end. What tests/test_estimates.py's smollm2 case records; without TRL's own per-step host work."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mcp_server.memory import cpu_speed
    from mcp_server.smollm2 import ensure_smollm2_model
    from mcp_server.tiny import make_task

    torch.set_num_threads(2)
    path = ensure_smollm2_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    model.base_model.model.activation_checkpointing_enable()
    prompt = tokenizer.apply_chat_template(make_task(1, seed=1)[0]["prompt"], tokenize=False,
                                           add_generation_prompt=True)
    ids = tokenizer([prompt] * 8, return_tensors="pt")
    cases = []
    for _ in range(repeats):
        reading, before = cpu_speed.typical(cpu_speed.probe_readings(2)), os.getloadavg()
        model.eval()
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=16, min_new_tokens=16, do_sample=True)
        generation = time.perf_counter() - started
        model.train()
        started = time.perf_counter()
        with torch.no_grad(), model.disable_adapter():
            model(out)
        model(out).logits.log_softmax(-1).mean().backward()
        training = time.perf_counter() - started
        model.zero_grad()
        cases.append({"case": "smollm2-135m LoRA step parts (8 x 16 tokens)", "generation_s": round(generation, 1),
                      "train_s": round(training, 1), "prompt_tokens": ids.input_ids.shape[1],
                      "load_start": [round(v, 1) for v in before], "load_end": [round(v, 1) for v in os.getloadavg()],
                      "reading": {k: getattr(reading, k) for k in ("flops", "bandwidth", "op_s", "sync_s", "share")}})
        show(cases[-1])
    return cases


def _parts(spec) -> dict:
    """The estimate's pieces at the stored probe's typical reading, before the load's slowdown: generation and
    training at the measured speed, the trainer's fixed host time (cpu_speed.TRAINER_HOST_OPS_PER_STEP small
    operators), the small operator's time and the slowdown at the load now. `implied_trainer_host_ops`: how many
    small operators the measured step leaves for the trainer's own host work once the model's part is taken out."""
    from mcp_server.memory import cpu_speed
    from mcp_server.memory.estimate import trainer_threads
    from mcp_server.memory.params import count_params
    from mcp_server.memory.planner import architecture_of
    from mcp_server.memory.settings import resolve_settings
    from mcp_server.memory.speed import estimate_cpu_step

    threads = trainer_threads()
    readings = cpu_speed.kept_readings(threads)
    cpu = cpu_speed.typical(readings[1:] or readings)
    _, arch = architecture_of(None, spec.fields)
    step = estimate_cpu_step(arch, count_params(arch), resolve_settings(spec.fields), cpu)
    host = cpu_speed.TRAINER_HOST_OPS_PER_STEP * cpu.op_s
    load = cpu_speed.load_range()
    return {"reading": {"flops": cpu.flops, "bandwidth": cpu.bandwidth, "op_s": cpu.op_s, "sync_s": cpu.sync_s,
                        "share": cpu.share, "threads": cpu.threads},
            "op_s": cpu.op_s, "sync_s": cpu.sync_s, "share": round(cpu.share, 2),
            "slowdown": round(cpu_speed.slowdown_at_load(cpu, load.typical, load.cores), 2),
            "generation_s": step.rollout_s, "training_s": step.train_s, "trainer_host_s": round(host, 2),
            "model_s": round(step.step_s - host, 2)}


def emission_case(times: int = 3) -> dict:
    """The same config's step estimate `times` times in a row, each from a fresh probe (the stored one removed), as
    `times` emissions a minute apart would give it at the machine's load: the largest over the smallest."""
    from support import emit_run

    from mcp_server.memory import cpu_speed
    from mcp_server.memory.estimate import step_estimate
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run

    spec = RunSpec.of_run(Run(emit_run("emit-twice", max_steps=4, generation_kwargs={"min_new_tokens": 12})))
    figures, ranges, loads = [], [], []
    before = os.environ.get("LLM_FINETUNING_CACHE")
    with tempfile.TemporaryDirectory(prefix="bench-probe-") as cache:
        os.environ["LLM_FINETUNING_CACHE"] = cache  # the probes stored here, removed before each: never the user's
        try:
            for _ in range(times):
                cpu_speed._probe_file().unlink(missing_ok=True)
                estimate = step_estimate(spec)
                figures.append(estimate.step_s)
                ranges.append([getattr(estimate, "low_s", None), getattr(estimate, "high_s", None)])
                loads.append(round(os.getloadavg()[0], 1))
        finally:
            os.environ.pop("LLM_FINETUNING_CACHE", None) if before is None else \
                os.environ.__setitem__("LLM_FINETUNING_CACHE", before)
    return {"case": f"the same tiny config's CPU step estimate, {times} fresh probes in a row", "estimates_s": figures,
            "ranges_s": ranges, "spread": round(max(figures) / min(figures), 2), "loads": loads}


# Walk 12's two smollm2-135m LoRA runs (8 completions of 16 tokens a step, 2 threads on 2 cores): their workspace,
# the load they trained at (the walk's notes: the trainer logs no load) and the seconds of the steps they logged.
WALK12 = os.environ.get("WALK12", "/tmp/walk12")
WALK12_RUNS = (("ws/runs/2026-12-07-wc", (2.0, 6.0), [146.0]),
               ("ws2/runs/2026-12-07-plural", (14.0, 14.0), [663.0, 532.0, 472.0]))


def walk12_case() -> list[dict]:
    """Walk 12's step estimates before and after issue 49's load-both-ways and calibration change, each run on the
    readings its emission kept (cpu_probe.json's runs) at the loads it trained at: "before" never below the probe's
    own time (cpu_speed.slowdown_at_load) and uncorrected; "after" the load either way (cpu_speed.step_factor), and
    the second run's estimate corrected by the first run's measured step (estimate.calibrate at the first's middle
    load), as a machine that ran the first would have it. Ratio: estimate / measured step. The readings are
    bench/walk12_readings.json's (the machine's store keeps the latest 64 runs'); the runs' configs are read from
    their directories (WALK12)."""
    from mcp_server.memory import cpu_speed
    from mcp_server.memory.estimate import calibrate, step_estimate
    from mcp_server.recipe.runspec import RunSpec
    from mcp_server.runs import Run

    runs = [(Run(Path(WALK12) / path), loads, steps) for path, loads, steps in WALK12_RUNS]
    if not all(run.dir.is_dir() for run, _, _ in runs):
        return [{"case": "walk 12's runs", "skipped": f"its run directories are not under {WALK12}"}]
    kept = json.loads((Path(__file__).parent / "walk12_readings.json").read_text(encoding="utf-8"))
    readings = {run.name: [cpu_speed.CpuThroughput(**r, measured_at=time.time()) for r in kept[path]]
                for (run, _, _), (path, _, _) in zip(runs, WALK12_RUNS)}
    factor, out = cpu_speed.step_factor, []
    before = os.environ.get("LLM_FINETUNING_CACHE")
    with tempfile.TemporaryDirectory(prefix="bench-walk12-") as cache:
        os.environ["LLM_FINETUNING_CACHE"] = cache  # the calibration kept here, never the user's
        try:
            for label in ("before", "after"):
                cpu_speed.step_factor = factor if label == "after" else cpu_speed.slowdown_at_load
                for i, (run, loads, steps) in enumerate(runs):
                    spec = RunSpec.of_run(run)
                    for load in sorted(set(loads)):
                        figure = step_estimate(spec, load=(load, 2), running=True, readings=readings[run.name],
                                               calibrated=label == "after")
                        out.append({"case": f"walk 12 {run.name} at load {load:.0f}, {label}", "estimate_s":
                                    figure.step_s, "range_s": [figure.low_s, figure.high_s], "measured_s": steps,
                                    "ratio": [round(figure.step_s / s, 2) for s in steps],
                                    "inside_range": [figure.low_s <= s <= figure.high_s for s in steps]})
                    if label == "after" and i == 0:  # the first run's step, measured at its middle load, kept
                        middle = cpu_speed.Load(*(sum(loads) / 2,) * 3, 2)
                        cpu_speed.keep_for_run(run.dir, readings[run.name])
                        calibrate(run, statistics.median(steps), middle)
        finally:
            cpu_speed.step_factor = factor
            os.environ.pop("LLM_FINETUNING_CACHE", None) if before is None else \
                os.environ.__setitem__("LLM_FINETUNING_CACHE", before)
    return out


def main() -> None:
    from mcp_server.smollm2 import ensure_smollm2_model

    if "--smollm2-parts" in sys.argv:
        smollm2_step_parts()
        return
    with tempfile.TemporaryDirectory(prefix="bench-estimates-") as ws:
        os.environ["LLM_FINETUNING_WORKSPACE"] = ws
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
        for case in walk12_case():
            show(case)
        if "--walk12" in sys.argv:
            return
        show(emission_case())
        if "--skip-sampling" not in sys.argv:
            show(sampling_case("tiny", 8, 64))  # each case as it ends: a slow machine still gets the first figures
            show(loaded(sampling_case, "tiny", 8, 64))  # estimate / measured, quiet and loaded
        if "--skip-training" not in sys.argv:
            show(training_case())
        if "--skip-smollm2" not in sys.argv:
            try:
                ensure_smollm2_model()
            except Exception as exc:  # noqa: BLE001 - no wheel here: say so, measure the rest
                show({"case": "sampling smollm2-135m", "skipped": str(exc)[:200]})
            else:
                if "--skip-sampling" not in sys.argv:
                    show(sampling_case("smollm2-135m", 1, 32))
                    show(loaded(sampling_case, "smollm2-135m", 1, 32))
                if "--skip-training" not in sys.argv:
                    show(training_case("smollm2-135m", 3, 16))


def show(case: dict) -> None:
    print(json.dumps(case), flush=True)


if __name__ == "__main__":
    main()
