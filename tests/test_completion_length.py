"""max_completion_length is never left at TRL's default silently (issue 31: `emit-config --gpu cpu` left it unset, so
TRL's 512 applied to a "reply with the number only" task): emission writes it saying where it came from, validation
names an unset one, sampling offers its measured value loudly, and emitting again into the run applies it. Length
advice rounds to 64 and says nothing once over 1% of the completions are cut (issue 33's mutation audit)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from mcp_server.emission.emit import emit_grpo_config
from mcp_server.emission.lengths import CPU_COMPLETION_LENGTH
from mcp_server.inspection.lengths import for_config, length_advice
from mcp_server.recipe.models import GRPORecipeRequest
from mcp_server.recipe.validate import validate_values
from mcp_server.recipe.variants import BASE_RECIPE
from mcp_server.runs import Run


def _reason(text: str, key: str) -> str:
    """The comment block right above `key:` in an emitted config.yaml."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    above = []
    for line in reversed(lines[:at]):
        if not line.startswith("#") or line.startswith("# ---"):
            break
        above.insert(0, line.lstrip("# "))
    return " ".join(above)


def test_emission_writes_max_completion_length_with_its_source(workspace):
    from mcp_server.recipe.trl_fields import trl_defaults

    cpu = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", finetune="lora", run_name="c"))
    text = Path(cpu.config_path).read_text()
    assert yaml.safe_load(text)["max_completion_length"] == CPU_COMPLETION_LENGTH
    assert _reason(text, "max_completion_length").startswith(f"CPU target: {CPU_COMPLETION_LENGTH} tokens")
    assert "not yet measured" in _reason(text, "max_completion_length")

    gpu = emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen2.5-0.5B-Instruct", dataset="tiny", run_name="g"))
    text = Path(gpu.config_path).read_text()
    default = trl_defaults()["max_completion_length"]
    assert yaml.safe_load(text)["max_completion_length"] == default
    assert _reason(text, "max_completion_length").startswith(f"{default} tokens, TRL's default, not yet measured")

    given = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="o",
                                               overrides={"max_completion_length": 40}, override_reason="short"))
    text = Path(given.config_path).read_text()
    assert yaml.safe_load(text)["max_completion_length"] == 40 and _reason(text, "max_completion_length") == \
        "override: short"


def test_validation_names_an_unset_max_completion_length():
    values = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
                  reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])
    found = {f.code: f for f in validate_values(values, "H100", 1).findings}
    assert found["max_completion_length_implicit"].field == "max_completion_length"
    assert "suggested_max_completion_length" in found["max_completion_length_implicit"].fix
    explicit = validate_values({**values, "max_completion_length": 64}, "H100", 1)
    assert "max_completion_length_implicit" not in {f.code for f in explicit.findings}


def _advice() -> dict:
    """Length advice as sample_completions computes it: 128 completions of 10-40 tokens, none cut off."""
    lengths = [10 + i % 31 for i in range(128)]
    return length_advice(lengths, [False] * 128, CPU_COMPLETION_LENGTH, [30] * 75)


def test_the_measured_length_is_offered_loudly_for_the_config():
    advice = for_config(_advice(), {"max_completion_length": CPU_COMPLETION_LENGTH, "use_cpu": True})
    assert advice["suggested_max_completion_length"] == 64
    assert advice["offer"].startswith(f"LENGTH: train/config.yaml's max_completion_length is {CPU_COMPLETION_LENGTH}; "
                                      "these 128 completions suggest 64")
    # a CPU config samples with transformers: no vLLM length is suggested for it
    assert advice["suggested_vllm_max_model_length"] is None and "vllm_max_model_length" not in advice["config_patch"]
    unset = for_config(_advice(), {"use_vllm": True})
    assert "(unset: TRL's default)" in unset["offer"] and unset["config_patch"]["vllm_max_model_length"] == 128
    assert for_config(_advice(), {"max_completion_length": 64})["offer"] is None  # already the measured value


def _sampled(run: Run, meta: dict) -> None:
    """The run's inspection/samples.jsonl and its samples.meta.json `meta`, signed as the sampler signs them."""
    from mcp_server.inspection.sample_files import write_samples_meta
    from mcp_server.userfiles import sha256_file

    run.samples.parent.mkdir(parents=True, exist_ok=True)
    run.samples.write_text('{"completion": "1"}\n')
    write_samples_meta(run, run.samples_meta, sha256_file(run.samples), meta)


def test_emitting_again_into_the_run_applies_the_measured_length(workspace, tiny_model):
    first = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="m"))
    run = Run(Path(first.run_dir))
    _sampled(run, {"model": str(tiny_model), "lengths": for_config(_advice(), {})})
    again = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_dir=str(run.dir)))
    text = Path(again.config_path).read_text()
    assert yaml.safe_load(text)["max_completion_length"] == 64
    assert _reason(text, "max_completion_length").startswith(
        "measured: sample_completions' suggestion from 128 sampled completions (inspection/samples.meta.json: 99th "
        "percentile 40 tokens")
    _sampled(run, {"model": "some/other-model", "lengths": for_config(_advice(), {})})
    third = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_dir=str(run.dir)))
    assert third.config["max_completion_length"] == CPU_COMPLETION_LENGTH  # another model's samples measure nothing


def test_a_length_written_into_the_samples_record_by_hand_is_not_emitted_as_measured(workspace, tiny_model):
    """Only the record the sampler signed is read (evidence.signed_samples_meta): a suggestion edited into it, the
    signature kept, or a record written by hand, emits the unmeasured placeholder and says why."""
    first = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_name="f"))
    run = Run(Path(first.run_dir))
    _sampled(run, {"model": str(tiny_model), "lengths": for_config(_advice(), {})})
    signed = json.loads(run.samples_meta.read_text())
    edited = {**signed, "lengths": {**signed["lengths"], "suggested_max_completion_length": 8}}
    unsigned = {k: v for k, v in edited.items() if k != "mac"}
    assert len(edited) == len(unsigned) + 1  # the record carries its signature as "mac"
    for forged in (edited, unsigned):
        run.samples_meta.write_text(json.dumps(forged))
        again = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", run_dir=str(run.dir)))
        text = Path(again.config_path).read_text()
        assert yaml.safe_load(text)["max_completion_length"] == CPU_COMPLETION_LENGTH, forged
        reason = _reason(text, "max_completion_length")
        assert "inspection/samples.meta.json not read: not recorded by llm-finetuning" in reason, reason


def test_length_advice_rounds_to_64_and_says_nothing_when_over_1_percent_is_cut():
    from mcp_server.inspection.lengths import length_advice

    lengths = [40] * 98 + [70, 80]
    advice = length_advice(lengths, [False] * 100, 512, [30])
    assert advice["suggested_max_completion_length"] == 128 and advice["suggested_vllm_max_model_length"] == 192
    one = length_advice([40] * 99 + [512], [False] * 99 + [True], 512, [30])  # 1% cut off: still measured
    assert one["suggested_max_completion_length"] is not None
    two = length_advice([40] * 98 + [512, 512], [False] * 98 + [True, True], 512, [30])  # 2%: censored
    assert two["suggested_max_completion_length"] is None and "hit max_new_tokens=512" in two["advice"]
