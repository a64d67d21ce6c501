"""Validation for the target and the start-up rehearsal (issue 34): TRL's and transformers' own checks answer for the
target GPU, never this CPU host; what GRPOTrainer.__init__ and vLLM's engine refuse before the first step is an error
before any GPU is rented; and every `raise` of the installed TRL's grpo_config.py and GRPOTrainer.__init__ is mapped
to the finding that catches it or a reason it cannot happen in a run this plugin writes (the map fails when TRL adds
a raise). Through the core API of validate_grpo_config (memory.verdict.validate_config)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest

from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import ValidateRequest
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])
LORA = {"use_peft": True, "learning_rate": 1e-5, "dtype": "bfloat16"}


def validate(overrides=None, gpu="H100", num_gpus=1, base=GOOD):
    return validate_config(ValidateRequest(config={**base, **(overrides or {})}, gpu=gpu, num_gpus=num_gpus))


def codes(result) -> dict:
    return {f.code: f for f in result.findings}


# ---------------------------------------------------------------- TRL's own checks, for the target
def test_tf32_is_judged_for_the_target_gpu_not_this_host():
    """This box has no GPU: tf32 for an H100 run used to be rejected here ('--tf32 requires Ampere'), and a T4's
    refusal was whatever this host answered."""
    h100 = validate({"tf32": True})
    assert h100.valid and "trl_rejected" not in codes(h100), h100.findings
    t4 = validate({"tf32": True, "bf16": False, "fp16": True, "use_peft": True, "learning_rate": 1e-5,
                   "dtype": "float16", "use_vllm": False}, gpu="T4")
    assert "trl_rejected" in codes(t4) and "--tf32 requires Ampere" in codes(t4)["trl_rejected"].message, t4.findings
    t4_fixed = validate({"bf16": False, "fp16": True, "use_peft": True, "learning_rate": 1e-5, "dtype": "float16",
                         "use_vllm": False}, gpu="T4")
    assert "trl_rejected" not in codes(t4_fixed), t4_fixed.findings


def test_the_stand_in_answers_every_device_query_transformers_asks():
    """Every is_torch_*_available that the installed TrainingArguments calls is answered for the target (a query
    added to transformers and left to the host would judge the host again)."""
    import transformers.training_args as targs

    from mcp_server.recipe.trl_fields import target_answers

    called = {node.func.id for node in ast.walk(ast.parse(inspect.getsource(targs.TrainingArguments)))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id.startswith("is_torch_") and node.func.id.endswith("_available")}
    assert called and called <= set(target_answers("9.0")), sorted(called - set(target_answers("9.0")))
    assert target_answers("7.5")["is_torch_tf32_available"] is False
    assert target_answers("8.0")["is_torch_tf32_available"]
    assert target_answers(None)["is_torch_bf16_gpu_available"] is False


# ---------------------------------------------------------------- crashes before the first step
CRASHES = [
    ("vespo with vLLM and TRL's default importance-sampling mode", {"loss_type": "vespo"},
     {"loss_type": "vespo", "vllm_importance_sampling_mode": "token_truncate"}, "H100", 1, "vespo_sampling_mode"),
    ("vLLM tensor parallel 2 over 3 training processes", {"vllm_tensor_parallel_size": 2},
     {"vllm_tensor_parallel_size": 1}, "H100", 3, "vllm_tensor_parallel_world"),
    ("vLLM tensor parallel 4 for 14 attention heads", {"vllm_tensor_parallel_size": 4},
     {"vllm_tensor_parallel_size": 2}, "H100", 4, "vllm_tensor_parallel_heads"),
    ("vLLM context past the model's", {"vllm_max_model_length": 65536}, {"vllm_max_model_length": 8192}, "H100", 1,
     "vllm_context_beyond_model"),
    ("router_aux_loss_coef on a dense model", {"router_aux_loss_coef": 0.001}, {}, "H100", 1,
     "router_aux_loss_on_dense"),
    ("load_in_4bit without PEFT", {"load_in_4bit": True, "learning_rate": 1e-5},
     {"load_in_4bit": True, **LORA}, "H100", 1, "quantized_without_peft"),
    ("8-bit base under a colocated vLLM", {"load_in_8bit": True, **LORA}, {"load_in_4bit": True, **LORA}, "H100", 1,
     "vllm_8bit_colocate"),
]


@pytest.mark.parametrize("name,bad,fixed,gpu,num_gpus,code", CRASHES, ids=[c[0] for c in CRASHES])
def test_what_the_trainer_or_engine_refuses_at_start_is_an_error(name, bad, fixed, gpu, num_gpus, code):
    found = codes(validate(bad, gpu=gpu, num_gpus=num_gpus))
    assert code in found and found[code].severity == "error", (name, sorted(found))
    assert code not in codes(validate(fixed, gpu=gpu, num_gpus=num_gpus)), name


def test_router_aux_loss_on_a_mixture_of_experts_is_not_flagged():
    moe = validate({"model_name_or_path": "Qwen/Qwen3-30B-A3B", "router_aux_loss_coef": 0.001,
                    "importance_sampling_level": "sequence", "loss_type": "grpo", **LORA}, gpu="H200")
    assert "router_aux_loss_on_dense" not in codes(moe)


# ---------------------------------------------------------------- every raise of the installed TRL, mapped
# {start of the raise's message: a finding code (with a config that triggers it) or why it cannot happen here}.
# A run this plugin writes starts train/train.py: GRPOTrainer(model=<name>, reward_funcs=<rewards.json>,
# args=<config.yaml>, train_dataset=<datasets.Dataset>, peft_config=get_peft_config(...),
# quantization_config=get_quantization_config(...), callbacks=[progress]) (training/trainer/script_support.py),
# plus tools and environment_factory for an agentic run.
TRAIN_PY = "train.py never passes it (training/trainer/script_support.py trainer_kwargs)"
RAISES: dict[str, tuple[str, object]] = {
    # grpo_config.py (GRPOConfig.__post_init__, run for the target by validation: trl_rejected)
    "GRPOTrainer does not support sequence-dim": ("reason", "parallelism_config is an accelerate ParallelismConfig "
                                                 "object: no YAML value of `trl grpo --config` builds one (a "
                                                 "mapping is trl_rejected, named: test_an_object_field_...)"),
    "log_completions_hub_repo is set, but": ("trl_rejected", {"log_completions_hub_repo": "me/logs",
                                                              "hub_private_repo": True, "log_completions": False}),
    "auto_find_batch_size is not supported": ("trl_rejected", {"auto_find_batch_size": True}),
    "generation_batch_size () must be divisible by num": ("generation_batch_not_divisible",
                                                          {"num_generations": 6, "gradient_accumulation_steps": 1}),
    "GRPO requires at least 2 generations": ("num_generations_too_small", {"num_generations": 1}),
    "vllm_importance_sampling_clip_min () must be less": ("trl_rejected", {"vllm_importance_sampling_clip_min": 3.0,
                                                                          "vllm_importance_sampling_clip_max": 2.0}),
    "At least one of `vllm_importance_sampling_clip_min`": ("trl_rejected", {
        "vllm_importance_sampling_mode": "token_truncate", "vllm_importance_sampling_clip_max": None}),
    "The global eval batch size": ("eval_batch_not_divisible", {"eval_strategy": "steps", "eval_steps": 10,
                                                                "per_device_eval_batch_size": 3}),
    "generation_batch_size () must be divisible by the global": ("generation_batch_not_divisible",
                                                                 {"generation_batch_size": 12}),
    "'generation_batch_size' and 'steps_per_generation'": ("generation_batch_conflict",
                                                           {"generation_batch_size": 64, "steps_per_generation": 8}),
    # GRPOTrainer.__init__
    "`use_transformers_continuous_batching` does not": ("reason", "only for a vision-language processor; the recipe "
                                                        "trains text models (inspection loads a tokenizer)"),
    "The number of reward processing classes": ("reason", TRAIN_PY + ": reward_processing_classes"),
    "No reward source provided": ("no_reward", {"reward_funcs": []}),
    "`router_aux_loss_coef` is set to": ("router_aux_loss_on_dense", {"router_aux_loss_coef": 0.001}),
    "Applying a PEFT adapter to `lm_head`": ("peft_on_lm_head", {**LORA, "lora_target_modules": ["q_proj",
                                                                                                  "lm_head"]}),
    " does not support `nn.DataParallel`": ("reason", "one process per GPU: launch_training starts several GPUs "
                                            "through accelerate, and check_environment blocks a target whose GPU "
                                            "count differs from the visible GPUs (training/environment.py)"),
    "The `processing_class` must be either": ("reason", TRAIN_PY + ": processing_class (TRL loads the model's own)"),
    "You passed `peft_config` but the `peft` library": ("reason", "peft is a dependency of the training environment "
                                                        "(pyproject's train extra, installed by prepare_environment)"),
    "`peft_config` must be a `peft.PeftConfig`": ("reason", "train.py passes TRL's get_peft_config: a LoraConfig"),
    "You passed a `PeftModel` instance together": ("reason", "train.py passes the model by name, never a PeftModel"),
    "Prefix tuning requires `peft>=0.18.0`": ("reason", "get_peft_config builds LoRA only, never prefix tuning"),
    "Number of reward weights () must match": ("reward_weights_mismatch", {"reward_weights": [1.0, 1.0, 0.5]}),
    "Using tools with GRPOTrainer requires transformers": ("agentic_transformers_too_old", "checked by the agentic "
                                                           "checks (agentic/checks.py) against the installed "
                                                           "transformers"),
    "Using `environment_factory` with GRPOTrainer requires": ("agentic_transformers_too_old", "as above"),
    "Using tools with GRPOTrainer on transformers below": ("agentic_jmespath_missing", "agentic/checks.py"),
    "The provided chat template does not support tool": ("agentic_template_no_tools", "agentic/checks.py, with the "
                                                         "model's tokenizer"),
    "Using `use_transformers_continuous_batching` requires": ("reason", "installed transformers is >= 5.8 (checked "
                                                              "below)"),
    "`train_dataset` is required unless": ("reason", "train.py always passes the config's data set"),
    "A `dict` `environment_factory` (multiple": ("reason", "train.py always passes a train_dataset"),
    "When training without a `train_dataset`": ("reason", "train.py always passes a train_dataset"),
    "`train_dataset` must be a `Dataset` or": ("reason", "train.py loads it with datasets (Dataset or, streamed, "
                                               "IterableDataset)"),
    "Iterable datasets require `dispatch_batches=False`": ("streaming_dispatch_batches", {
        "dataset_streaming": True, "accelerator_config": {"dispatch_batches": True}}),
    "VESPO loss requires `vllm_importance_sampling_mode`": ("vespo_sampling_mode", {"loss_type": "vespo"}),
    "`liger_kernel_config={\"fused_linear_cross_entropy\"": ("liger_fused_ce_rejected", {
        "use_liger_kernel": True, "liger_kernel_config": {"fused_linear_cross_entropy": True}}),
    "You passed `sync_ref_model=True` while `beta=0.0`": ("sync_ref_model_without_beta", {"sync_ref_model": True,
                                                                                         "beta": 0.0}),
    "You passed `sync_ref_model=True` while using a PEFT": ("sync_ref_model_with_peft", {"sync_ref_model": True,
                                                                                        **LORA}),
    "You set `quantization_config` both as a trainer": ("quantization_config_twice", {
        "load_in_4bit": True, **LORA, "model_init_kwargs": {"quantization_config": {"load_in_4bit": True}}}),
    "Each environment instance returned by": ("agentic_no_reset", "agentic/checks.py builds one environment"),
    "`cast_lm_head_to_fp32=True` is not supported when": ("peft_on_lm_head", {
        **LORA, "cast_lm_head_to_fp32": True, "lora_target_modules": ["lm_head"]}),
}


def _message(node: ast.Raise) -> str:
    exc = node.exc
    first = exc.args[0] if isinstance(exc, ast.Call) and exc.args else exc
    return "".join(n.value for n in ast.walk(first) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def installed_raises() -> list[str]:
    """The messages of every raise in trl/trainer/grpo_config.py and GRPOTrainer.__init__ (installed TRL)."""
    trainer_dir = Path(importlib.util.find_spec("trl").submodule_search_locations[0]) / "trainer"
    config = ast.parse((trainer_dir / "grpo_config.py").read_text(encoding="utf-8"))
    trainer = ast.parse((trainer_dir / "grpo_trainer.py").read_text(encoding="utf-8"))
    cls = next(n for n in trainer.body if isinstance(n, ast.ClassDef) and n.name == "GRPOTrainer")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return [_message(n) for tree in (config, init) for n in ast.walk(tree) if isinstance(n, ast.Raise)]


def test_every_trl_raise_is_caught_by_a_finding_or_ruled_out():
    messages = installed_raises()
    assert len(messages) >= 39  # TRL 1.16: 10 in grpo_config.py, 29 in GRPOTrainer.__init__
    unmapped = [m[:80] for m in messages if not any(m.startswith(prefix) for prefix in RAISES)]
    assert not unmapped, f"raises nobody mapped (add a finding, or say why it cannot happen): {unmapped}"
    stale = [p for p in RAISES if not any(m.startswith(p) for m in messages)]
    assert not stale, f"mapped raises the installed TRL no longer has: {stale}"


CAUGHT = [(prefix, code, config) for prefix, (code, config) in RAISES.items() if isinstance(config, dict)]


@pytest.mark.parametrize("prefix,code,overrides", CAUGHT, ids=[c[0][:40] for c in CAUGHT])
def test_each_mapped_raise_is_caught_by_its_finding(prefix, code, overrides):
    found = codes(validate(overrides))
    assert code in found and found[code].severity == "error", (prefix, sorted(found))


def test_the_version_raises_ruled_out_hold_for_the_installed_transformers():
    import transformers
    from packaging.version import Version

    assert Version(transformers.__version__) >= Version("5.8.0")  # tools (5.0), environments (5.2), CB (5.8)


def _object_fields() -> list[str]:
    """GRPOConfig's fields typed as an object no YAML value is (accelerate's ParallelismConfig today): generated
    from the installed TRL, so a new one gets its row."""
    import dataclasses
    import typing

    from trl import GRPOConfig

    hints = typing.get_type_hints(GRPOConfig)
    plain = (str, int, float, bool, dict, list, type(None))
    return [f.name for f in dataclasses.fields(GRPOConfig)
            if any(isinstance(a, type) and not issubclass(a, plain) for a in typing.get_args(hints[f.name])
                   or (hints[f.name],))]


def test_an_object_field_given_a_mapping_is_not_valid_naming_it():
    """A mapping where TRL's config holds an object (`parallelism_config: {dp_shard_size: 1}` in a YAML): TRL's own
    __post_init__ fails on it (AttributeError, not a ValueError), as `trl grpo --config` would. Validation says NOT
    VALID naming the field and TRL's line; it used to end in 'unexpected TrainingInterpreterError'."""
    fields = _object_fields()
    assert "parallelism_config" in fields, fields
    for name in fields:
        result = validate({name: {"dp_shard_size": 1}})
        assert not result.valid, (name, result.findings)
        message = codes(result)["trl_rejected"].message
        assert message.startswith(f"TRL's GRPOConfig rejects this config: {name}: "), message
