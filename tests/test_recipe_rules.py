"""Every validation rule through the core API (validate_values / validate_config), for targets this CPU box lacks."""

from __future__ import annotations

import json

import pytest

from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.validate import validate_config, validate_values
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])


def codes(result):
    return {f.code: f for f in result.findings}


def check(overrides=None, drop=(), gpu="H100", num_gpus=1, **kw):
    values = {k: v for k, v in {**GOOD, **(overrides or {})}.items() if k not in drop}
    return validate_values(values, gpu, num_gpus, **kw)


def test_seed_recipe_is_valid_for_8x_h100_on_a_cpu_box():
    result = check(num_gpus=8)
    assert result.valid and result.target == "8x H100", result.findings
    assert not [f for f in result.findings if f.severity != "info"]


def test_unknown_key_gets_did_you_mean():
    f = codes(check({"learnin_rate": 1e-6}))["unknown_field"]
    assert f.severity == "error" and f.field == "learnin_rate" and "learning_rate" in f.fix


def test_removed_key_says_what_to_use_instead():
    result = check({"max_prompt_length": 512})
    f = codes(result)["removed_field"]
    assert not result.valid and "0.28" in f.message and "data set" in f.fix


def test_renamed_key_names_the_new_field():
    f = codes(check({"vllm_guided_decoding_regex": "x"}))["renamed_field"]
    assert "vllm_structured_outputs_regex" in f.fix


@pytest.mark.parametrize("field,value", [("loss_type", "foo"), ("vllm_mode", "remote"),
                                         ("importance_sampling_level", "token_level"), ("scale_rewards", "std"),
                                         ("multi_objective_aggregation", "sum")])
def test_enumerated_fields_reject_values_trl_would_accept_at_config_time(field, value):
    result = check({field: value})
    f = codes(result)["invalid_choice"]
    assert not result.valid and f.field == field


def test_scale_rewards_booleans_are_trl_aliases():
    assert "invalid_choice" not in codes(check({"scale_rewards": False}))


def test_wrong_type_is_named():
    f = codes(check({"learning_rate": "fast"}))["wrong_type"]
    assert f.field == "learning_rate"


def test_generation_batch_must_hold_whole_groups_for_the_target_world_size():
    # 3 per device x 1 GPU x 4 steps = 12, not divisible by 8
    result = check({"per_device_train_batch_size": 3})
    assert codes(result)["generation_batch_not_divisible"].field == "num_generations"
    # the same config on 2 GPUs (colocated vLLM): 3 x 2 x 4 = 24, divisible by 8
    assert check({"per_device_train_batch_size": 3, "vllm_mode": "colocate"}, num_gpus=2).valid


def test_generation_batch_size_and_steps_per_generation_conflict():
    result = check({"generation_batch_size": 64, "steps_per_generation": 2})
    assert codes(result)["generation_batch_conflict"].severity == "error"


def test_generation_batch_size_divisible_by_global_batch():
    result = check({"generation_batch_size": 60, "vllm_mode": "colocate"}, num_gpus=8)
    assert "generation_batch_not_divisible" in codes(result)


def test_num_generations_floor_is_a_warning_and_below_two_an_error():
    warn = check({"num_generations": 4})
    assert warn.valid and codes(warn)["num_generations_below_floor"].severity == "warning"
    err = check({"num_generations": 1, "per_device_train_batch_size": 1})
    assert not err.valid and "num_generations_too_small" in codes(err)


def test_eval_batch_rule():
    result = check({"eval_strategy": "steps", "eval_steps": 10, "per_device_eval_batch_size": 3})
    assert "eval_batch_not_divisible" in codes(result)


def test_bf16_on_t4_is_an_error_whose_fix_names_fp16_divergence():
    result = check(gpu="t4")
    f = codes(result)["bf16_unsupported"]
    assert not result.valid and "fp16" in f.fix and "diverge" in f.fix


def test_fp16_where_bf16_possible_warns():
    f = codes(check({"bf16": False, "fp16": True}))["fp16_where_bf16_possible"]
    assert f.severity == "warning"


def test_vllm_server_mode_needs_a_gpu_for_the_server():
    result = check({"vllm_mode": "server"}, num_gpus=1)
    assert not result.valid and "vllm_server_needs_gpu" in codes(result)
    assert check({"vllm_mode": "server"}, num_gpus=2).valid


def test_vllm_on_a_cpu_target_is_an_error():
    assert "vllm_needs_gpu" in codes(check(gpu="cpu"))


@pytest.mark.parametrize("lr,flagged", [(5e-7, False), (1e-5, False), (1e-3, True), (1e-10, True)])
def test_learning_rate_far_outside_grpo_range_warns(lr, flagged):
    assert ("lr_out_of_range" in codes(check({"learning_rate": lr}))) is flagged


def test_no_reward_source_is_an_error():
    result = check(drop=("reward_funcs",))
    assert not result.valid and "no_reward" in codes(result)


def test_unresolvable_rewards_are_errors():
    result = check({"reward_funcs": ["no_such_module.reward"]})
    assert codes(result)["reward_unresolvable"].field == "reward_funcs[0]"
    result = check(drop=("reward_funcs",), reward_specs=[{"name": "formatt_reward", "params": {}, "weight": 1.0}])
    assert codes(result)["reward_unresolvable"].field == "rewards[0].name"


def test_trl_post_init_rejections_are_reported():
    result = check({"vllm_importance_sampling_clip_min": 3.0, "vllm_importance_sampling_clip_max": 2.0})
    f = codes(result)["trl_rejected"]
    assert "vllm_importance_sampling_clip_min" in f.message


def test_unknown_gpu_names_closest():
    result = check(gpu="H1000")
    f = codes(result)["unknown_gpu"]
    assert not result.valid and "H100" in f.message


def test_implicit_loss_type_is_pointed_out():
    f = codes(check(drop=("loss_type",)))["loss_type_implicit"]
    assert "dapo" in f.message


def test_moe_model_without_gspo(tmp_path):
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 128}))
    result = check({"model_name_or_path": str(model)})
    assert not result.valid and "moe_without_gspo" in codes(result)
    assert check({"model_name_or_path": str(model), "importance_sampling_level": "sequence"}).valid
    assert check({"model_name_or_path": str(model)}, override_reason="measured stable").valid


def test_missing_local_model_is_a_finding():
    assert "model_not_found" in codes(check({"model_name_or_path": "./nowhere"}))


def test_validate_config_reads_yaml_and_its_recorded_target(tmp_path):
    import yaml

    train = tmp_path / "train"
    train.mkdir()
    (train / "config.yaml").write_text(yaml.safe_dump(dict(GOOD, bf16=True)))
    (train / "request.json").write_text(json.dumps({"gpu": "T4", "num_gpus": 1}))
    recorded = validate_config(ValidateRequest(config_path=str(train / "config.yaml")))
    assert not recorded.valid and "bf16_unsupported" in codes(recorded)
    explicit = validate_config(ValidateRequest(config_path=str(train / "config.yaml"), gpu="A100"))
    assert explicit.valid


def test_malformed_yaml_is_a_clear_error(tmp_path):
    from mcp_server.errors import UserInputError

    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: [1e-6\n")
    with pytest.raises(UserInputError, match="config_path"):
        validate_config(ValidateRequest(config_path=str(bad)))
