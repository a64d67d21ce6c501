"""What an expert's second reading of the recipe found (issue 34), each through validate_grpo_config's core API or
emit_grpo_config: memory planned for every model with a config (a known family too) and a loud warning for one
without; the settings that lose a run's work or its record; the emitter's logging and checkpoints for the run's
length; and two judgments of TRL's loss semantics (CISPO's weight cap, GSPO's clip scale)."""

from __future__ import annotations

import json

import pytest

from mcp_server.errors import UserInputError
from mcp_server.memory.verdict import validate_config
from mcp_server.recipe.models import GRPORecipeRequest, ValidateRequest
from mcp_server.recipe.variants import BASE_RECIPE

GOOD = dict(BASE_RECIPE, model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct",
            reward_funcs=["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"])
REWARDS = [{"name": "format_reward"}, {"name": "correctness_reward"}]


def validate(overrides=None, gpu="H100", num_gpus=1):
    return validate_config(ValidateRequest(config={**GOOD, **(overrides or {})}, gpu=gpu, num_gpus=num_gpus))


def codes(result) -> dict:
    return {f.code: f for f in result.findings}


# ---------------------------------------------------------------- memory for every model with a config
def test_a_known_family_is_planned_from_its_architecture_not_passed_silently():
    """Qwen2.5-Coder-1.5B-Instruct (not in the catalog, no config here) as the emitter used to write it for 2x A10G:
    a float32 full fine-tune with a float32 reference and no offload. It was VALID with memory not planned."""
    coder = {"model_name_or_path": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "vllm_mode": "server"}
    found = codes(validate(coder, gpu="A10G", num_gpus=2))
    assert "memory_does_not_fit" in found, sorted(found)
    assert "architecture assumed from Qwen/Qwen2.5-1.5B-Instruct" in found["memory_does_not_fit"].message


def test_a_model_without_any_config_is_a_loud_warning_and_is_not_emitted(workspace):
    from mcp_server.emission.emit import emit_grpo_config

    found = codes(validate({"model_name_or_path": "someone/secret-model"}))
    assert found["memory_not_planned"].severity == "warning"
    assert "assumes the run fits 1x H100 unchecked" in found["memory_not_planned"].message
    with pytest.raises(UserInputError) as refused:
        emit_grpo_config(GRPORecipeRequest(model="someone/secret-model", dataset="tiny", rewards=REWARDS))
    assert refused.value.field == "model" and "cannot plan memory for 'someone/secret-model' on 1x H100" in str(
        refused.value)
    assert not (workspace / "runs").exists() or not any((workspace / "runs").iterdir())


def test_the_emitter_lays_a_family_model_out_as_the_catalog_architecture(workspace):
    from mcp_server.emission.emit import emit_grpo_config

    result = emit_grpo_config(GRPORecipeRequest(model="Qwen/Qwen2.5-Coder-1.5B-Instruct", dataset="tiny",
                                                gpu="A10G", num_gpus=2, rewards=REWARDS))
    zero = (result.config.get("deepspeed") or {}).get("zero_optimization", {})
    assert zero.get("stage") == 2 and zero.get("offload_optimizer", {}).get("device") == "cpu", result.config
    assert result.validation.valid and "memory_fits" in codes(result.validation)


# ---------------------------------------------------------------- settings that lose the run
KEEPING = [
    ("save_steps past max_steps", {"max_steps": 300, "save_steps": 500}, {"max_steps": 300, "save_steps": 30},
     "checkpoint_after_run", "warning"),
    ("save_strategy no on a long run", {"max_steps": 300, "save_strategy": "no"},
     {"max_steps": 300, "save_steps": 30}, "no_checkpoints", "warning"),
    ("save_only_model on a run meant to resume", {"max_steps": 300, "save_steps": 30, "save_only_model": True,
                                                  "resume_from_checkpoint": "checkpoints/checkpoint-90"},
     {"max_steps": 300, "save_steps": 30, "resume_from_checkpoint": "checkpoints/checkpoint-90"},
     "checkpoints_cannot_resume", "error"),
    ("logging_steps past max_steps", {"max_steps": 30, "logging_steps": 50}, {"max_steps": 30, "logging_steps": 1},
     "too_few_logged_rows", "error"),
    ("2 logged rows on a 25-step run", {"max_steps": 25, "logging_steps": 10}, {"max_steps": 25, "logging_steps": 1},
     "too_few_logged_rows", "warning"),
    ("warm-up longer than the run", {"max_steps": 30, "warmup_steps": 40}, {"max_steps": 30, "warmup_steps": 2},
     "warmup_longer_than_run", "warning"),
    ("cispo with DAPO's epsilon_high", {"loss_type": "cispo", "epsilon_high": 0.28},
     {"loss_type": "cispo", "epsilon_high": 5.0}, "cispo_cap_below_one", "warning"),
    ("GSPO with token-scale clip bounds", {"importance_sampling_level": "sequence", "loss_type": "grpo",
                                           "steps_per_generation": 16, "epsilon": 0.2, "epsilon_high": 0.28},
     {"importance_sampling_level": "sequence", "loss_type": "grpo", "steps_per_generation": 16, "epsilon": 3e-4,
      "epsilon_high": 4e-4}, "sequence_clip_token_scale", "warning"),
    ("a sampler-correction mask without ratio 1", {"vllm_importance_sampling_clip_min": 0.5,
                                                   "vllm_importance_sampling_clip_max": 0.9},
     {"vllm_importance_sampling_clip_min": 0.5}, "sampler_correction_excludes_one", "error"),
    ("a sampler-correction truncation below 1", {"vllm_importance_sampling_mode": "token_truncate",
                                                 "vllm_importance_sampling_clip_max": 0.8},
     {"vllm_importance_sampling_mode": "token_truncate"}, "sampler_correction_excludes_one", "warning"),
    ("Dr.GRPO keeping std scaling", {"loss_type": "dr_grpo"}, {"loss_type": "dr_grpo", "scale_rewards": "none"},
     "dr_grpo_with_std_scaling", "warning"),
    ("every reward weight 0", {"reward_weights": [0, 0]}, {"reward_weights": [0, 1]}, "reward_weights_all_zero",
     "error"),
]


@pytest.mark.parametrize("name,bad,fixed,code,severity", KEEPING, ids=[k[0] for k in KEEPING])
def test_settings_that_lose_the_run_or_misread_the_loss_are_flagged(name, bad, fixed, code, severity):
    found = codes(validate(bad))
    assert code in found and found[code].severity == severity, (name, sorted(found))
    assert code not in codes(validate(fixed)), name


def test_cispo_epsilon_high_is_not_called_inert_on_policy():
    """TRL 1.16: clamp(coef_1, max=epsilon_high) caps the weight itself, so on-policy it scales every token."""
    found = codes(validate({"loss_type": "cispo", "epsilon_high": 0.28}))
    assert "clip_on_policy" not in found and "scaled by 0.28" in found["cispo_cap_below_one"].message


def test_the_emitter_logs_and_saves_for_the_run_length(workspace, tmp_path):
    """1500 steps: a row every 10 steps and 10 checkpoints; the tiny task's 6 steps: every step, no extra saves."""
    from mcp_server.emission.emit import emit_grpo_config

    data = tmp_path / "big.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} + 1 =", "answer": str(i + 1)}) + "\n" for i in range(2000)))
    long = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset=str(data), gpu="cpu", rewards=REWARDS)).config
    steps = long["max_steps"]
    assert steps >= 100 and steps // long["logging_steps"] >= 20 and long["logging_steps"] <= 10, long
    assert long["save_strategy"] == "steps" and long["save_steps"] <= -(-steps // 10) and long["save_total_limit"]
    short = emit_grpo_config(GRPORecipeRequest(model="tiny", dataset="tiny", gpu="cpu", rewards=REWARDS)).config
    assert short["max_steps"] < 100 and short["logging_steps"] == 1
    for config in (long, short):  # the logging and saving rules' verdict (the rehearsal's step: test_rehearsal.py)
        assert not [f for f in validate_config(ValidateRequest(config=config, gpu="cpu", rehearse=False)).findings
                    if f.code in ("too_few_logged_rows", "checkpoint_after_run", "no_checkpoints")]


# ---------------------------------------------------------------- texts that quote the planner
def test_the_small_model_anchor_in_the_memory_reference_is_the_planners():
    """references/grpo-memory.md quotes the <= 3B anchor's figures; they are what plan_memory computes, and the
    memory skill no longer says a full fine-tune of ~3B fits 24 GB with the recipe's float32 weights."""
    import re
    from pathlib import Path

    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    root = Path(__file__).resolve().parents[1]
    text = " ".join((root / "references" / "grpo-memory.md").read_text().split())
    quoted = re.search(r"For Qwen2\.5-3B with bf16 weights the planner finds all three levers needed \(([\d.]+) GiB "
                       r"with them; ([\d.]+) / ([\d.]+) / ([\d.]+) without .*?\), ([\d.]+) GiB with all three over "
                       r"the recipe's float32 master weights .*?, and ([\d.]+) GiB as LoRA", text)
    assert quoted, "the anchor sentence moved: keep it quoting the planner"
    check = plan_memory(MemoryPlanRequest(model="Qwen/Qwen2.5-3B-Instruct", gpu="RTX 4090",
                                          validate_levers=False)).anchor.planner_check
    planned = re.findall(r"(\d+\.\d) GiB|(?:mode|AdamW|checkpointing) (\d+\.\d)", check)
    numbers = [a or b for a, b in planned][1:]  # (the capacity), with all three, without each, float32, LoRA
    assert list(quoted.groups()) == numbers, (quoted.groups(), check)
    skill = (root / "skills" / "grpo-memory-planning" / "SKILL.md").read_text()
    assert f"{numbers[-2]} GiB with all three" in " ".join(skill.split())


def test_the_kl_bounds_the_triage_quotes_are_the_diagnosis_bounds():
    """references/failure-triage.md: 1.0 / 5.0 at beta 0.04, 0.25 / 1.25 at the recipe's 0.01 (it said 'the
    recipe's 0.04'; the recipe's beta is 0.01)."""
    from pathlib import Path

    from mcp_server.diagnosis.context import kl_bounds

    text = " ".join((Path(__file__).resolve().parents[1] / "references" / "failure-triage.md").read_text().split())
    assert BASE_RECIPE["beta"] == 0.01 and "for the recipe's 0.04" not in text
    assert kl_bounds(0.04) == (1.0, 5.0) and "a warning at 1.0 and an error at 5.0 nats/token at beta 0.04" in text
    assert kl_bounds(0.01) == (0.25, 1.25) and "(0.25 and 1.25 at the recipe's 0.01" in text


@pytest.mark.parametrize("model_type,experts", [("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
                                                ("glm4_moe", {"n_routed_experts": 32, "num_experts_per_tok": 2,
                                                              "moe_intermediate_size": 16, "num_hidden_layers": 8,
                                                              "first_k_dense_replace": 1, "n_shared_experts": 1})])
def test_a_config_of_another_family_is_planned_from_its_numbers(tmp_path, model_type, experts):
    """A complete config.json of a model_type the planner has no exact layout for is planned (was: refused as 'not
    a supported architecture family', so the emitter could not lay it out): its count is within 10% of the model
    transformers builds from it, and the plan says which layout it assumed."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    config = {"model_type": model_type, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
              "max_position_embeddings": 4096, **experts}
    (tmp_path / "config.json").write_text(json.dumps(config))
    plan = plan_memory(MemoryPlanRequest(model=str(tmp_path), gpu="H100", validate_levers=False))
    assert plan.architecture.num_experts in (4, 32) and any("not a family the planner counts exactly" in n
                                                        for n in plan.notes), plan.notes
    with torch.device("meta"):
        built = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(tmp_path))
    actual = sum(p.numel() for p in built.parameters())
    assert abs(plan.params.total - actual) / actual < 0.10, (plan.params.total, actual)
