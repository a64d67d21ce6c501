"""sample_completions sized for the machine (issue 31: 64 prompts x 8 completions of up to 512 tokens on 2 CPU cores
printed nothing for 11 minutes and had written nothing when stopped): a plan with tokens and time before it starts,
progress on the CLI's stderr and through `report` while it runs, each generate call's samples kept as it ends, and
fewer prompts by default on a CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, checkout_env

from mcp_server.emission.emit import emit_grpo_config
from mcp_server.inspection.models import CPU_PROMPTS, RATE_PROMPTS, SampleRequest
from mcp_server.inspection.sampling import sample_completions
from mcp_server.inspection.tools import human_samples
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.runs import Run

LIMIT = 24  # tokens per completion: the tiny task's answers take about 23


@pytest.fixture()
def cpu_run(workspace) -> Run:
    result = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="plan",
                                                overrides={"max_completion_length": LIMIT}))
    return Run(Path(result.run_dir))


def test_sampling_plans_for_this_machine_and_keeps_each_call(cpu_run):
    import torch

    seen = []
    result = sample_completions(SampleRequest(run=str(cpu_run.dir), batch_size=8),
                                report=lambda done, total, message: seen.append((done, total, message)))
    k = RATE_PROMPTS if torch.cuda.is_available() else CPU_PROMPTS  # the tiny task has 75 prompts
    assert result.num_prompts == k and result.n == 8
    assert seen[0][2].startswith(f"plan: {k} prompts x 8 = {8 * k} completions of up to {LIMIT} tokens "
                                 f"({8 * k * LIMIT:,} tokens at most) from a 0.1M-parameter model")
    assert result.plan["max_tokens"] == 8 * k * LIMIT and result.plan["estimated_seconds_at_most"] >= 0
    written = [m for _, _, m in seen if m.startswith("sampled ")]
    assert len(written) == k and "written to inspection/samples.partial.jsonl" in written[-1]  # 1 prompt a call
    assert cpu_run.samples.is_file() and not cpu_run.samples_partial.exists()


class Stopped(Exception):
    pass


def test_a_stopped_sampling_keeps_what_it_sampled(cpu_run):
    def stop_after_two(done, total, message):
        if message.startswith("sampled 2/"):
            raise Stopped

    with pytest.raises(Stopped):
        sample_completions(SampleRequest(run=str(cpu_run.dir), num_prompts=5, batch_size=8), report=stop_after_two)
    kept = [json.loads(line) for line in cpu_run.samples_partial.read_text().split("\n") if line]
    assert [s["id"] for s in kept] == list(range(16)) and [s["prompt_index"] for s in kept] == [0] * 8 + [1] * 8
    assert all(isinstance(s["completion"], list) for s in kept) and not cpu_run.samples.exists()


def _stop_at(prefix: str):
    def report(done, total, message):
        if message.startswith(prefix):
            raise Stopped

    return report


def test_a_stopped_sampling_is_continued_by_the_same_request(cpu_run):
    """Issue 49: `sample-completions RUN --num-prompts 7 --batch-size 16` stopped once a batch was kept, then the
    same command again, started from prompts 1-2 and took 653 s. The same request now continues from the kept
    batches (a torn last line dropped) and ends with the file an uninterrupted pass writes, byte for byte."""
    request = SampleRequest(run=str(cpu_run.dir), num_prompts=5, batch_size=16)  # 2 prompts a call: 3 calls
    sample_completions(request)
    whole = cpu_run.samples.read_bytes()
    with pytest.raises(Stopped):
        sample_completions(request, report=_stop_at("sampled 4/"))
    with cpu_run.samples_partial.open("a") as f:
        f.write('{"id": 32, "prompt_ind')  # the stop tore the next line
    seen = []
    result = sample_completions(request, report=lambda done, total, message: seen.append(message))
    assert "reusing 32 completions of prompts 1-4 kept from a stopped run of the same request" in seen, seen
    assert [m.split(";")[0] for m in seen if m.startswith("sampled ")] == [  # only the last call ran
        "sampled 5/5 prompts x 8, written to inspection/samples.partial.jsonl"], seen
    assert result.num_samples == 40 and cpu_run.samples.read_bytes() == whole
    # walk 12: the plan, the end line and the CLI's summary count what this process generated, the reused apart
    plan = next(m for m in seen if m.startswith("plan: "))
    assert plan.startswith("plan: prompts 5-5 of 5 to generate (32 completions of prompts 1-4 reused from a stopped "
                           f"pass of the same request): 1 prompts x 8 = 8 completions of up to {LIMIT} tokens"), plan
    assert result.plan["completions"] == 8 and result.plan["reused_completions"] == 32, result.plan
    assert any(m.startswith("generated 8 completions in ") and "(32 more reused)" in m for m in seen), seen
    assert human_samples(result).splitlines()[0].startswith(
        "Sampled 8 completions (prompts 5-5 of 5 x 8) with transformers in "), human_samples(result)
    assert "; 32 more (prompts 1-4) reused from a stopped pass: 40 in the samples file" in human_samples(result)
    assert not cpu_run.samples_partial.exists() and not (cpu_run.inspection / "samples.partial.meta.json").exists()


def _edit_kept_completion(run) -> None:
    lines = run.samples_partial.read_text().split("\n")
    first = json.loads(lines[0])
    first["completion"] = [{"role": "assistant", "content": "<answer>42</answer>"}]
    run.samples_partial.write_text("\n".join([json.dumps(first), *lines[1:]]))


def _meta_edit(change):
    def edit(run) -> None:
        meta_path = run.inspection / "samples.partial.meta.json"
        meta_path.write_text(json.dumps(change(json.loads(meta_path.read_text()))))
    return edit


# Round 12's open item: completions edited in a stopped sampling's kept lines were reused and signed with the rest
# when the pass finished. Every way the kept lines or their record can be changed by hand x the pass that follows:
# it starts over, says why, and ends with the uninterrupted pass's file.
KEPT_TAMPERING = {
    "a kept completion edited": (_edit_kept_completion, "are not the ones the sampler wrote"),
    "a kept line removed": (lambda run: run.samples_partial.write_text(
        "\n".join(run.samples_partial.read_text().split("\n")[1:])), "are not the ones the sampler wrote"),
    "the record's signature dropped": (_meta_edit(lambda m: {k: v for k, v in m.items() if k != "mac"}),
                                       "has no valid signature"),
    "the record's digest replaced": (_meta_edit(lambda m: {**m, "batches": [
        {**b, "sha256": "0" * 64} for b in m["batches"]]}), "has no valid signature"),
    "the record's lines raised": (_meta_edit(lambda m: {**m, "batches": [
        {**b, "lines": b["lines"] + 1} for b in m["batches"]]}), "has no valid signature"),
}


@pytest.mark.parametrize("tampering", list(KEPT_TAMPERING))
def test_kept_batches_changed_by_hand_are_never_reused(cpu_run, tampering):
    edit, says = KEPT_TAMPERING[tampering]
    request = SampleRequest(run=str(cpu_run.dir), num_prompts=5, batch_size=16)
    sample_completions(request)
    whole = cpu_run.samples.read_bytes()
    with pytest.raises(Stopped):
        sample_completions(request, report=_stop_at("sampled 4/"))
    edit(cpu_run)
    seen = []
    sample_completions(request, report=lambda done, total, message: seen.append(message))
    assert any(says in m and "starting over" in m for m in seen), seen
    assert len([m for m in seen if m.startswith("sampled ")]) == 3 and cpu_run.samples.read_bytes() == whole


def test_another_request_never_reuses_a_stopped_sampling(cpu_run):
    hotter = SampleRequest(run=str(cpu_run.dir), num_prompts=5, batch_size=16, temperature=0.5)
    sample_completions(hotter)
    whole = cpu_run.samples.read_bytes()
    with pytest.raises(Stopped):
        sample_completions(SampleRequest(run=str(cpu_run.dir), num_prompts=5, batch_size=16),
                           report=_stop_at("sampled 2/"))
    seen = []
    sample_completions(hotter, report=lambda done, total, message: seen.append(message))
    assert ("samples.partial.jsonl was kept from a stopped run of another request (temperature differ): starting "
            "over, nothing of it reused") in seen, seen
    assert len([m for m in seen if m.startswith("sampled ")]) == 3 and cpu_run.samples.read_bytes() == whole


def test_a_long_generate_call_reports_its_decode_steps(tiny_model):
    from mcp_server.generation import STEP_EVERY, generate_completions
    from mcp_server.model_ref import load_model

    model, tokenizer = load_model(str(tiny_model))
    steps = []
    length = 2 * STEP_EVERY + 1  # min_new_tokens: every sequence runs to the limit, whatever it samples
    generate_completions(model, tokenizer, ["1 + 1 ="], length, options={"min_new_tokens": length},
                         on_step=lambda done, step: steps.append((done, step)))
    assert steps == [(0, 1), (0, STEP_EVERY), (0, 2 * STEP_EVERY)]  # the first step: where the rate starts


@pytest.mark.slow
def test_the_cli_prints_the_plan_and_progress_on_stderr_at_a_terminal(cpu_run):
    import pty

    master, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server.cli", "sample-completions", str(cpu_run.dir),
                             "--num-prompts", "2", "--batch-size", "8"], cwd=ROOT, env=checkout_env(),
                            stdout=subprocess.PIPE, stderr=terminal)
    os.close(terminal)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out = proc.communicate(timeout=600)[0].decode()
    os.close(master)
    err = b"".join(chunks).decode()
    assert proc.returncode == 0, err[-3000:]
    assert "... plan: 2 prompts x 8 = 16 completions of up to 24 tokens" in err
    assert "... sampled 1/2 prompts x 8, written to" in err and "... sampled 2/2 prompts x 8" in err
    assert "plan:      2 prompts x 8" in out


def test_the_time_left_counts_the_steps_that_ran_and_is_never_0_while_a_call_remains(monkeypatch):
    """Issue 49: "about 0 s left" with one of two generate calls to go. A first call whose completions all ended
    at token 10 of 64 was counted as 64 decode steps, so the rate came out six times too high. Constructed clock:
    a decode step every second."""
    from mcp_server import generation
    from mcp_server.inspection import sampling_plan

    clock = iter(float(t) for t in range(1000))
    monkeypatch.setattr(generation.time, "perf_counter", lambda: next(clock))
    lines = []
    progress = sampling_plan.Progress(lambda done, total, message: lines.append(message),
                                      {"num_prompts": 2, "generate_calls": 2, "max_new_tokens": 64, "n": 4})
    for step in range(1, 11):
        progress.step(0, step)
    progress.batch(1)  # the first call's completions all ended at token 10
    assert lines[-1].endswith("; 1.1 s per decode step, about 71 s left at that rate"), lines[-1]  # was 6.3/s, 10 s
    for step in range(1, 64):
        progress.step(1, step)
    assert lines[-1].endswith("about 1 s left at that rate"), lines[-1]  # one step to go: never "0 s"
    progress.batch(2)
    assert " left" not in lines[-1], lines[-1]


def test_sampling_and_evaluation_lines_carry_the_rate_and_time_left_as_decoding_goes(cpu_run, tiny_model,
                                                                                      monkeypatch, workspace):
    """Issue 49, third walk: 64 sequences of smollm2-135m on a loaded 2-core machine took 22 s a decode step, and
    nothing was printed between the plan and the 16th step (5.8 min), that line without a rate. Now a line comes at
    the first decode step, then every 16 steps or STEP_EVERY_S seconds, whichever is first, each after the first
    with the rate and the time left, from one helper (generation.DecodeProgress) for sampling and evaluation alike.
    Constructed: STEP_EVERY_S at 0, as if every decode step took longer than it (no timing is asserted)."""
    from mcp_server import generation
    from mcp_server.evaluation.evaluate import evaluate_model
    from mcp_server.evaluation.models import EvaluateRequest
    from mcp_server.tiny import make_task, write_jsonl

    monkeypatch.setattr(generation, "STEP_EVERY_S", 0.0, raising=False)
    seen = []
    sample_completions(SampleRequest(run=str(cpu_run.dir), num_prompts=2, batch_size=16),
                       report=lambda done, total, message: seen.append(message))
    steps = [m for m in seen if m.startswith("sampling prompts 1-2 of 2: token ")]
    assert len(steps) >= 3 and steps[0].startswith("sampling prompts 1-2 of 2: token 1 of up to 24"), seen
    assert all("decode steps/s" in m for m in steps[1:]), "\n".join(steps)
    assert all(", about " in m and m.endswith(" left at that rate") for m in steps[1:] if "token 24 of" not in m), \
        steps
    assert "decode steps/s" in next(m for m in seen if m.startswith("sampled 2/2 prompts x 8"))

    goldens = write_jsonl(make_task(6, seed=5), workspace / "goldens.jsonl")
    lines = []
    evaluate_model(EvaluateRequest(model=str(tiny_model), goldens=str(goldens), max_new_tokens=12),
                   report=lambda done, total, message: lines.append(message))
    decoding = [m for m in lines if m.startswith("decoding prompts 1-6 of 6: token ")]
    assert len(decoding) >= 3 and all("decode steps/s" in m for m in decoding[1:]), lines
    assert all(" left" in m for m in decoding[1:] if "token 12 of" not in m), lines
    assert "decode steps/s" in next(m for m in lines if m.startswith("decoded 6/6 prompts"))


def test_a_sampling_too_small_to_review_says_so_before_the_model_loads(cpu_run):
    """Issue 49's sixth walk: `--num-prompts 8` with n=4 sampled 7.5 minutes, then said "Only 32 samples:
    inspect_rewards needs at least 50". The count is known first: the plan line says it, with the num_prompts that
    reaches 50, and it is the first thing reported (stopped there, nothing was loaded or sampled)."""
    seen = []

    def stop_at_plan(done, total, message):
        seen.append(message)
        raise Stopped

    with pytest.raises(Stopped):
        sample_completions(SampleRequest(run=str(cpu_run.dir), num_prompts=3, batch_size=8), report=stop_at_plan)
    (plan,) = seen
    assert plan.startswith("plan: 3 prompts x 8") and not cpu_run.samples_partial.exists(), plan
    assert "3 prompts x 8 = 24 samples, and inspect_rewards needs at least 50" in plan, plan
    assert "--num-prompts 7 reaches 50" in plan, plan


def test_a_slow_decode_rate_is_given_in_seconds_per_step(monkeypatch):
    """Issue 49's sixth walk: sampling on a loaded CPU printed "0.0 decode steps/s". Under a step a second the
    rate is the seconds a step takes. Constructed clock: a decode step every 40 s."""
    from mcp_server import generation
    from mcp_server.inspection import sampling_plan

    clock = iter(float(t) for t in range(0, 40_000, 40))
    monkeypatch.setattr(generation.time, "perf_counter", lambda: next(clock))
    lines = []
    progress = sampling_plan.Progress(lambda done, total, message: lines.append(message),
                                      {"num_prompts": 2, "generate_calls": 1, "max_new_tokens": 64, "n": 4})
    for step in range(1, 5):
        progress.step(0, step)
    assert "; 40.0 s per decode step, about 40 min left at that rate" in lines[-1], lines[-1]
    assert "decode steps/s" not in lines[-1], lines[-1]
