"""Configs TRL accepts that crash when the trainer starts, run out of memory, or train without effect: each caught
through validate_grpo_config's doors (the core API, the CLI's validate-config), for targets this CPU box lacks;
with the survivors of issue 33's mutation audit: delta against 1 + epsilon_high (not epsilon), a data set of exactly
one generation batch (accepted), dtype auto on a full fine-tune (refused)."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli
from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])


def validate(overrides=None, gpu="H100", num_gpus=1, **request):
    """validate_grpo_config's verdict on GOOD with `overrides`. A config whose data set is on this machine is not
    rehearsed here (`rehearse` False unless given): these are the rules' tests; the rehearsal trains a step
    (tests/test_rehearsal.py, the slow lane)."""
    if any(key in (overrides or {}) for key in ("datasets", "dataset_name")):
        request.setdefault("rehearse", False)
    return validate_config(ValidateRequest(config={**GOOD, **(overrides or {})}, gpu=gpu, num_gpus=num_gpus,
                                           **request))


def codes(result):
    return {f.code: f for f in result.findings}


def test_the_seed_recipe_stays_valid_with_its_memory_verdict():
    result = validate()
    assert result.valid and "memory_fits" in codes(result), result.findings


def test_colocated_vllm_that_overfills_the_gpu_is_not_valid_through_the_cli(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**GOOD, "model_name_or_path": "Qwen/Qwen2.5-7B-Instruct", "use_peft": True,
                                      "dtype": "bfloat16", "learning_rate": 1e-5,
                                      "vllm_gpu_memory_utilization": 0.95}))
    proc = run_cli("validate-config", str(config), "--gpu", "H100")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "VALID BUT WILL NOT FIT for 1x H100" in proc.stdout and "memory_does_not_fit" in proc.stdout
    assert "ERROR  memory_does_not_fit" in proc.stdout and "right_size_vllm_memory" in proc.stdout  # and the fix


@pytest.mark.parametrize("overrides,code", [
    ({"sync_ref_model": True, "use_peft": True, "learning_rate": 1e-5}, "sync_ref_model_with_peft"),
    ({"sync_ref_model": True, "beta": 0.0}, "sync_ref_model_without_beta"),
    ({"model_name_or_path": "Qwen/Qwen2.5-Math-7B", "use_peft": True, "learning_rate": 1e-5, "dtype": "bfloat16",
      "max_completion_length": 8192}, "completion_beyond_context"),
    ({"vllm_max_model_length": 1024, "max_completion_length": 1024}, "completion_beyond_vllm_context"),
    ({"soft_overlong": 512, "max_completion_length": 1024}, "overlong_punishment_mismatch"),
])
def test_configs_that_crash_or_mistrain_are_errors(overrides, code, tmp_path):
    overrides = dict(overrides)
    specs = None
    if "soft_overlong" in overrides:  # DAPO's length shaping written for another L_max than the config's
        limit = overrides.pop("soft_overlong")
        specs = [{"name": "format_reward"}, {"name": "soft_overlong_punishment",
                                             "params": {"max_completion_len": limit, "soft_punish_cache": 100}}]
    if specs is None:
        result = validate(overrides)
    else:  # the rewards sit beside the config, as emission writes them
        (tmp_path / "config.yaml").write_text(yaml.safe_dump({**GOOD, **overrides}))
        (tmp_path / "rewards.json").write_text(json.dumps(specs))
        result = validate_config(ValidateRequest(config_path=str(tmp_path / "config.yaml")))
    found = codes(result)
    assert code in found and found[code].severity == "error" and not result.valid, result.findings


@pytest.mark.parametrize("overrides,code", [
    ({"epsilon_high": 0.28}, "clip_on_policy"),  # one generation batch per optimizer step: ratio exactly 1
    ({"epsilon": 0.9, "num_iterations": 2}, "epsilon_too_loose"),
    ({"epsilon_high": 0.28, "delta": 1.2, "steps_per_generation": 16}, "delta_below_clip"),
    ({"importance_sampling_level": "sequence", "loss_type": "dapo"}, "sequence_ratio_with_token_loss"),
    ({"loss_type": "luspo"}, "luspo_token_level"),
    ({"temperature": 0.2}, "temperature_too_low"),
    ({"max_completion_length": 32, "mask_truncated_completions": True}, "masked_short_budget"),
    ({"model_name_or_path": "Qwen/Qwen3-1.7B", "max_completion_length": 512}, "thinking_budget_too_short"),
    ({"vllm_mode": "server", "vllm_gpu_memory_utilization": 0.5}, "vllm_memory_ignored_in_server_mode"),
])
def test_configs_that_silently_waste_a_run_are_warned(overrides, code):
    num_gpus = 2 if overrides.get("vllm_mode") == "server" else 1
    found = codes(validate(overrides, num_gpus=num_gpus))
    assert code in found and found[code].severity == "warning", found


@pytest.mark.parametrize("overrides,code", [
    ({"epsilon_high": 0.28, "steps_per_generation": 16}, "clip_on_policy"),  # 4 mini-batches per rollout: acts
    ({"epsilon_high": 0.28, "num_iterations": 2}, "clip_on_policy"),
    ({"model_name_or_path": "Qwen/Qwen3-1.7B", "max_completion_length": 1024,
      "chat_template_kwargs": {"enable_thinking": False}}, "thinking_budget_too_short"),
    ({"vllm_max_model_length": 2048, "max_completion_length": 1024}, "completion_beyond_vllm_context"),
    ({"temperature": 0.7}, "temperature_too_low"),
])
def test_the_same_settings_done_right_pass(overrides, code):
    assert code not in codes(validate(overrides))


def test_a_data_set_smaller_than_one_generation_batch_trains_zero_steps(tmp_path):
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {**GOOD, "datasets": [{"path": "json", "data_files": "data.jsonl", "split": "train"}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    # 8 per device x 4 accumulation steps = 32 completions = 4 prompts per generation batch; 3 prompts: 0 steps
    # (the rule's verdict: not rehearsed, as validate() above)
    result = validate_config(ValidateRequest(config_path=str(tmp_path / "config.yaml"), rehearse=False))
    f = codes(result)["dataset_smaller_than_generation_batch"]
    assert not result.valid and "3 prompts" in f.message and "4 prompts" in f.message
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows * 2))
    assert "dataset_smaller_than_generation_batch" not in codes(
        validate_config(ValidateRequest(config_path=str(tmp_path / "config.yaml"), rehearse=False)))


def test_a_colocated_vllm_whose_cache_cannot_hold_one_context_would_not_start():
    # TRL passes vllm_max_model_length (None: the model's 131072-token context) to vLLM, which starts only when
    # its KV cache holds one sequence of it: 16 GiB for Llama-3.1-8B, far more than 0.4 of an A10G leaves
    qlora = {"model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct", "use_peft": True, "load_in_4bit": True,
             "dtype": "bfloat16", "learning_rate": 1e-5, "vllm_gpu_memory_utilization": 0.4,
             "vllm_enable_sleep_mode": True}
    result = validate(qlora, gpu="A10G")
    f = codes(result)["memory_does_not_fit"]
    assert not result.valid and "131072" in f.message and "refuses to start" in f.message
    assert "vllm_max_model_length" in f.fix
    assert validate({**qlora, "vllm_max_model_length": 1024}, gpu="A10G").valid


# ---------------------------------------------------------------- survivors of issue 33's mutation audit
@pytest.mark.parametrize("delta, warned", [(1.25, True), (1.28, True), (1.3, False)])
def test_delta_is_compared_with_one_plus_epsilon_high(delta, warned):
    # epsilon 0.2, epsilon_high 0.28: a delta of 1.25 lies above 1 + epsilon but not above 1 + epsilon_high.
    found = codes(validate({"epsilon": 0.2, "epsilon_high": 0.28, "delta": delta, "steps_per_generation": 8}))
    assert ("delta_below_clip" in found) is warned, found.keys()


@pytest.mark.parametrize("prompts, refused", [(3, True), (4, False), (5, False)])
def test_a_data_set_of_exactly_one_generation_batch_trains(tmp_path, prompts, refused):
    # The seed recipe: 8 per device x 1 GPU x 4 steps per generation = 32 completions, 8 each: 4 prompts a batch.
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": "1"}) + "\n" for i in range(prompts)))
    found = codes(validate({"datasets": [{"path": "json", "data_files": str(data), "split": "train"}]}))
    assert ("dataset_smaller_than_generation_batch" in found) is refused, found.keys()


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
def test_a_full_fine_tune_in_the_checkpoints_half_precision_is_refused(dtype):
    found = codes(validate({"dtype": dtype, "use_peft": False, "learning_rate": 1e-6}))
    assert found["full_finetune_low_precision_weights"].severity == "error"
    assert "full_finetune_low_precision_weights" not in codes(validate({"dtype": "float32", "use_peft": False,
                                                                         "learning_rate": 1e-6}))


@pytest.mark.parametrize("layer, master", [
    ({"deepspeed": {"zero_optimization": {"stage": 2}}}, True),  # ZeRO's float32 master partitions
    ({"fsdp": "full_shard auto_wrap"}, True),  # accelerate upcasts trainable weights to fp32 under bf16 autocast
    ({"fsdp": "full_shard auto_wrap", "bf16": False}, False),  # no mixed precision: no upcast, pure bf16 steps
    ({}, False),
])
def test_bf16_weights_on_a_full_fine_tune_are_judged_with_the_distributed_layer(layer, master):
    found = codes(validate({"dtype": "bfloat16", "use_peft": False, "learning_rate": 1e-6, **layer}, num_gpus=8))
    assert ("full_finetune_low_precision_weights" not in found) is master, found.keys()


@pytest.mark.parametrize("strategy, master", [("zero2", True), ("zero3", True), ("fsdp", True), ("ddp", False)])
def test_bf16_weights_are_judged_with_the_launchs_strategy(strategy, master):
    # launch_training validates the run as its plan lays it out (RunSpec.launched_with): a ZeRO launch of a
    # config without a `deepspeed` field keeps float32 master weights all the same
    from mcp_server.config.target import Target
    from mcp_server.memory.verdict import validate as validate_spec
    from mcp_server.recipe.runspec import RunSpec

    values = {**GOOD, "dtype": "bfloat16", "use_peft": False, "learning_rate": 1e-6}
    spec = RunSpec(values=values, target=Target("H100", 8)).launched_with(strategy)
    found = {f.code for f in validate_spec(spec, memory=False).findings}
    assert ("full_finetune_low_precision_weights" not in found) is master, found


@pytest.mark.parametrize("template,prompt,warned", [
    ("{{ messages }}", "3+4=", True),  # a chat model given plain text: rendered without its template
    ("{{ messages }}", [{"role": "user", "content": "3+4="}], False),  # chat messages: TRL applies the template
    (None, "3+4=", False),  # a base model without a chat template: plain text is what it reads
])
def test_plain_prompts_for_a_chat_model_are_warned_at_validation(tmp_path, template, prompt, warned):
    # issue 49: only sampling said so; a user who validated and launched trained a chat model on unrendered text
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": template} if template else {}))
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"prompt": prompt, "answer": "7"}) + "\n"
                                                 for _ in range(64)))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**GOOD, "model_name_or_path": str(model), "datasets": [
        {"path": "json", "data_files": str(tmp_path / "data.jsonl"), "split": "train"}]}))
    found = codes(validate_config(ValidateRequest(config_path=str(config))))
    assert ("plain_prompts_for_chat_model" in found) is warned, found
    if warned:
        f = found["plain_prompts_for_chat_model"]
        assert f.severity == "warning" and f.field == "datasets" and "chat template" in f.message
