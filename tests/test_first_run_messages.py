"""Issue 49, the fifth new user's walk ("which number is larger", smollm2-135m on the CPU): the messages it met.

- A data file moved after emission: sample-completions said `unexpected FileNotFoundError` (exit 2); the doors
  that read the run's rows (sampling, and the loader refilter and sample_trajectories share) and the launch gates
  now name the config field, the path and the way on, and the verdict's pin says the file is not there rather
  than that its content changed.
- emit-config NOT VALID said "the config above is what it would have been" when no config was printed: it now
  says where that config is (the result's `config`, --json) and that nothing was written.
- The CPU rehearsal trained one prompt a step and nothing said so: emit-config (its summary and the MCP result)
  says what each step trains on, read from the GRPOConfig TRL builds, and when it is one prompt, why and what to
  change.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import call_mcp, run_cli, run_cli_json
from support import append_signed, emit_run, pass_inspection
from mcp_server.runs import Run


def _data(workspace: Path, name: str = "data.jsonl") -> Path:
    data = workspace / name
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"Which is larger, {i} or {i + 3}?"}],
                                        "answer": str(i + 3)}) + "\n" for i in range(13)))
    return data


def test_a_data_file_moved_after_emission_is_named_by_every_door_that_reads_it(workspace, tiny_model, tmp_path):
    data = _data(workspace)
    run = Run(emit_run("moved", dataset=str(data)))
    data.rename(tmp_path / "elsewhere.jsonl")
    proc = run_cli("sample-completions", str(run.dir), "--num-prompts", "1")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"error: datasets[0].data_files: {data} (in {run.config}) is not there: moved or "
                                  "deleted since the run was emitted. Put the file back at that path, or emit a "
                                  "new run"), proc.stderr
    assert not run.samples.exists() and not (run.inspection / "samples.partial.jsonl").exists()
    _, validated = run_cli_json("validate-config", str(run.config), here=True)  # its rehearsal says why it skips
    skipped = next(f for f in validated["findings"] if f["code"] == "rehearsal_skipped")
    assert f"datasets[0].data_files names {data}, which is not there" in skipped["message"], skipped


def test_a_data_file_moved_after_the_verdict_is_not_called_changed_content(workspace, tiny_model, tmp_path):
    data = _data(workspace)
    run = Run(emit_run("moved-after", dataset=str(data)))
    pass_inspection(run.dir)
    data.rename(tmp_path / "elsewhere.jsonl")
    proc, launched = run_cli_json("launch-training", str(run.dir), here=True)
    assert not launched["launched"], launched
    by_gate = {r["gate"]: r for r in launched["refusals"]}
    assert by_gate["config"]["message"].startswith(f"datasets[0].data_files: {data} (in {run.config}) is not there")
    assert f"{data}: not there (moved or deleted)" in by_gate["inspection"]["message"], by_gate["inspection"]
    assert "content changed" not in by_gate["inspection"]["message"]
    assert not run.run_json.exists()


def test_a_refused_emission_says_only_what_it_printed(workspace):
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "refused",
                   "--rewards", json.dumps([{"name": "no_such_module_here.larger_reward"}]), cwd=workspace)
    assert proc.returncode == 1 and "reward_unresolvable" in proc.stdout, (proc.stdout, proc.stderr)
    assert "model_name_or_path" not in proc.stdout  # no config is printed ...
    assert "above" not in proc.stdout, proc.stdout  # ... so none is pointed at
    kept = proc.stdout.splitlines()[-1]
    assert kept.startswith("NOT VALID: nothing was written (no run directory was created"), kept
    assert "the result's `config` (--json)" in kept, kept
    _, result = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name",
                             "refused", "--rewards", json.dumps([{"name": "no_such_module_here.larger_reward"}]),
                             cwd=workspace)
    assert result["config"]["reward_funcs"] == ["no_such_module_here.larger_reward"], result["config"]
    assert not (workspace / "runs").exists() or not any((workspace / "runs").iterdir())


def test_sampling_and_the_review_name_a_converted_model_not_its_cache_path(workspace, tiny_model, tmp_path):
    """A directory as mcp_server/smollm2.py converts it (its smollm2.json names the model), from the tiny model's
    weights so nothing is converted here."""
    from mcp_server import smollm2

    converted = tmp_path / "cache" / "smollm2-135m-q4_1-0123456789abcdef-v1"
    shutil.copytree(tiny_model, converted)
    (converted / "smollm2.json").write_text(json.dumps({"name": smollm2.NAME, "weights_of": smollm2.HUB_ID}))
    data = workspace / "plain.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Which is larger, {i} or {i + 3}?", "answer": str(i + 3)}) + "\n"
                            for i in range(13)))
    run = Run(emit_run("named", model=str(converted), dataset=str(data)))
    proc = run_cli("sample-completions", str(run.dir), "--num-prompts", "13")
    assert proc.returncode == 0, proc.stderr
    model_line = next(line for line in proc.stdout.splitlines() if line.startswith("  model:"))
    assert model_line == f"  model:     smollm2-135m (loaded from {converted})", model_line
    warning = "the prompts are plain text and smollm2-135m's tokenizer has a chat template"
    assert warning in proc.stdout and f"{converted}'s tokenizer" not in proc.stdout + proc.stderr, proc.stdout
    assert "loading smollm2-135m (13 prompts" in proc.stderr, proc.stderr
    assert run_cli("inspect-rewards", str(run.dir), "--max-samples", "52").returncode == 0
    summary = run.review_md.read_text().split("## Summary")[1].split("\n## ")[0]
    assert "model `smollm2-135m`" in summary and str(converted) not in summary, summary
    assert warning in summary


@pytest.mark.slow
def test_a_config_edited_before_resume_is_named_field_by_field_with_the_patch_that_resumes(workspace, tiny_model):
    from test_run_tampering import stop_any_trainer, stopped_run

    template = emit_run("template")
    pass_inspection(template)
    proc, launched = run_cli_json("launch-training", str(template), here=True)  # what a launch records
    stop_any_trainer(template)
    assert launched["launched"], launched
    assert json.loads((template / "run.json").read_text())["launched_config"] == Run(template).read_config()

    run_dir = stopped_run((workspace, template), "edited")
    record = json.loads((run_dir / "run.json").read_text())
    config = run_dir / "train" / "config.yaml"
    values = yaml.safe_load(config.read_text())
    record.update(launched_config=values, config_sha256=hashlib.sha256(config.read_bytes()).hexdigest())
    (run_dir / "run.json").write_text(json.dumps(record))
    launched_text, old = config.read_text(), values["learning_rate"]
    new = old * 2
    edited = yaml.safe_dump({"learning_rate": new}).strip()
    config.write_text(re.sub(r"(?m)^learning_rate: .*$", edited, launched_text))
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), here=True)
    finally:
        stop_any_trainer(run_dir)
    assert not out["launched"], out
    refusal = next(r for r in out["refusals"] if r["gate"] == "config_hash")
    assert refusal["message"].endswith(f"learning_rate: {old} at launch, {new} now (the verdict does not pin it)")
    assert f"put the launched values back in train/config.yaml (learning_rate: {old}), then resume with the change " \
           "as a patch" in refusal["how_to_clear"], refusal
    assert f"""--patch '{{"learning_rate": {new}}}'""" in refusal["how_to_clear"], refusal
    # the advice works: the launched value back, the change as a patch, and it resumes
    config.write_text(launched_text)
    try:
        proc, out = run_cli_json("resume-training", str(run_dir), "--patch", json.dumps({"learning_rate": new}),
                                 here=True)
    finally:
        stop_any_trainer(run_dir)
    assert out["launched"] and out["patched"] == {"learning_rate": {"old": old, "new": new}}, out["refusals"]

    # a field the verdict pins: said, and no patch offered
    pinned = stopped_run((workspace, template), "edited-pinned")
    record["config_sha256"] = hashlib.sha256((pinned / "train" / "config.yaml").read_bytes()).hexdigest()
    (pinned / "run.json").write_text(json.dumps({**record, "cwd": str(pinned)}))
    text = (pinned / "train" / "config.yaml").read_text()
    (pinned / "train" / "config.yaml").write_text(text + "temperature: 0.5\n")
    try:
        proc, out = run_cli_json("resume-training", str(pinned), here=True)
    finally:
        stop_any_trainer(pinned)
    refusal = next(r for r in out["refusals"] if r["gate"] == "config_hash")
    assert "temperature: null at launch, 0.5 now (the inspection verdict pins it)" in refusal["message"], refusal
    assert "--patch" not in refusal["how_to_clear"] and "emit a new run directory" in refusal["how_to_clear"]


def test_inspecting_a_launched_run_never_rewrites_the_review_it_was_launched_under(workspace, tiny_model):
    from mcp_server.inspection.gate import check_inspection_gate

    run = Run(emit_run("launched-review"))
    pass_inspection(run.dir)
    checkpoint = run.checkpoints / "checkpoint-4"  # what training leaves behind (launched_evidence)
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}")
    evidence = [run.samples, run.samples_meta, run.review_md, run.review, run.review_jsonl, run.verdict]
    before = {path: path.read_bytes() for path in evidence}
    for extra in ([], ["--max-samples", "52"]):
        proc = run_cli("inspect-rewards", str(run.dir), *extra)
        assert proc.returncode == 2, (extra, proc.stdout, proc.stderr)
        assert proc.stderr.startswith(f"error: run: {run.name} was launched (it holds checkpoints): its review "
                                      "(inspection/review.md, review.json, review.jsonl) is what the launch's "
                                      "verdict vouches for, so inspect_rewards never rewrites it."), proc.stderr
        assert "emit_grpo_config (without run_dir) for a new run" in proc.stderr
    assert {path: path.read_bytes() for path in evidence} == before
    assert check_inspection_gate(run.dir).passed


# the walk's completions/clipped_ratio, steps 1-4 (8 completions a step, max_completion_length 24)
WALK_CLIPPED = [0.625, 0.375, 0.625, 0.125]


def test_truncation_is_too_early_to_judge_until_four_steps_and_status_and_diagnosis_agree(workspace):
    run = Run(emit_run("cut"))
    run.inspection.mkdir()
    run.review.write_text(json.dumps({"result": {"truncated": 25, "num_samples": 56}, "reviewed_ids": list(range(56))}))
    run.logs.mkdir(parents=True)
    said = []
    for step, cut in enumerate(WALK_CLIPPED, start=1):
        append_signed(run.progress, {"step": step, "loss": 0.01, "reward": 0.3, "reward_std": 0.3, "kl": 0.001,
                                     "completions/clipped_ratio": cut, "completions/mean_length": 18.0,
                                     "completions/mean_terminated_length": 10.0})
        _, diagnosis = run_cli_json("diagnose-run", str(run.dir), here=True)
        _, status = run_cli_json("training-status", str(run.dir), here=True)
        flags = [(f["code"], f["severity"]) for f in status["health"] if f["severity"] != "info"]
        problems = [(f["code"], f["severity"]) for f in diagnosis["findings"] if f["severity"] != "info"]
        assert problems == flags, (step, diagnosis, status)
        said.append((flags, diagnosis["summary"], status["health_note"]))
    for step, (flags, summary, note) in enumerate(said[:3], start=1):
        share = sum(WALK_CLIPPED[:step]) / step
        assert flags == [] and summary.startswith(f"too early to judge ({step} logged steps, to step {step}): "
                                                  "completions_truncated judges from 4 logged steps; so far "
                                                  f"{share:.0%} of completions hit max_completion_length"), summary
        assert summary.endswith("; the review measured 45% (25 of 56) before training") and "healthy" not in summary
        assert note.endswith(f": {summary}"), note  # training-status says it too
    flags, summary, _ = said[3]
    assert flags == [("completions_truncated", "warning")], said[3]
    _, diagnosis = run_cli_json("diagnose-run", str(run.dir), here=True)
    assert "(healthy is under 10%; the review measured 45% (25 of 56) before training)" in \
        diagnosis["findings"][0]["explanation"]


def test_emit_config_says_the_cpu_rehearsal_trains_one_prompt_a_step_and_why(workspace, tiny_model):
    """The README's CPU rehearsal (one micro-batch a step): one prompt's group per step, said with why and how to
    get more; with the CPU recipe's own accumulation, that many prompts."""
    proc = run_cli("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name", "one",
                   "--override", "gradient_accumulation_steps=1")
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(Path(re.search(r"config:\s+(\S+)", proc.stdout)[1]).read_text())
    group = config["num_generations"]
    assert config["per_device_train_batch_size"] == group, config  # one group a micro-batch: one prompt a step
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("  per step:")]
    assert f"each step trains on 1 prompt x {group} completions" in line, line
    assert "One prompt a step, what keeps a step short on a CPU" in line, line
    assert "--override gradient_accumulation_steps=4: 4 prompts a step" in line, line

    proc, result = run_cli_json("emit-config", "--model", "tiny", "--dataset", "tiny", "--gpu", "cpu", "--run-name",
                                "recipe")
    config = result["config"]
    prompts = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] // config[
        "num_generations"]
    assert prompts > 1 and result["per_step"].startswith(
        f"each step trains on {prompts} prompts x {config['num_generations']} completions"), result["per_step"]
    assert "One prompt" not in result["per_step"]


@pytest.mark.slow
def test_the_mcp_emission_says_what_a_step_trains_on_for_a_gpu_target(workspace, tiny_model):
    """Every target: four H100s (one serving vLLM when the recipe starts its own server), each step's prompts from
    the GRPOConfig TRL builds for the training processes."""

    async def calls(client):
        return await client.call_tool("emit_grpo_config", {"model": "tiny", "dataset": "tiny", "gpu": "H100",
                                                           "num_gpus": 4, "run_name": "gpus",
                                                           "overrides": {"max_completion_length": 64}})

    result = asyncio.run(call_mcp(calls, env={"LLM_FINETUNING_WORKSPACE": str(workspace)}))
    assert not result.is_error, result
    data = result.structured_content
    assert data["validation"]["valid"], data["validation"]  # the tiny model's 256-token context: 64 tokens
    config = data["config"]
    world = 3 if config.get("vllm_mode") == "server" else 4  # the local vLLM server holds one of the four GPUs
    completions = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"] * world
    prompts = completions // config["num_generations"]
    assert data["per_step"].startswith(f"each step trains on {prompts} prompts x {config['num_generations']} "
                                       f"completions ({completions} completions: "), data["per_step"]
    assert f"x {world} training processes" in data["per_step"], data["per_step"]
