"""Benchmark: how many of 21 deliberately bad GRPO configs validate_grpo_config catches.

Each is a mistake an expert makes by accident (written for this bench, not copied from an issue): it crashes when
the trainer starts, runs out of memory at the first step, or trains without effect. A config counts as caught
when validation (the recipe's rules, TRL's own checks, the model's context and the memory plan for the target:
memory.verdict.validate_config, the door of the MCP tool and of `validate-config`) reports an error or warning
with the expected code. Also validated: the same configs with the mistake fixed, which must raise none of those
codes (a rule that fires on everything catches nothing).

Prints JSON: caught of total, the fixed twins' false alarms, and each case's verdict.

    .venv/bin/python bench/bench_bad_configs.py
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BASE = {"model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "use_vllm": True, "vllm_mode": "colocate",
        "num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
        "learning_rate": 1e-6, "beta": 0.0, "bf16": True, "loss_type": "dapo", "output_dir": "out",
        "reward_funcs": ["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"]}
LORA = {"use_peft": True, "learning_rate": 1e-5, "dtype": "bfloat16"}

# (name, bad fields, the fix, target gpu, num_gpus, expected codes (any of them), rewards.json or None)
CASES = [
    ("14B full fine-tune in fp32 on one 40 GB A100", {"model_name_or_path": "Qwen/Qwen2.5-14B-Instruct"},
     {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}, "A100-40GB", 1, {"memory_does_not_fit"}, None),
    ("group of 6 in micro-batches of 8", {"num_generations": 6, "gradient_accumulation_steps": 1},
     {"num_generations": 8, "gradient_accumulation_steps": 1}, "H100", 1, {"generation_batch_not_divisible"}, None),
    ("SFT learning rate on a full fine-tune", {"learning_rate": 2e-5}, {}, "H100", 1, {"lr_out_of_range"}, None),
    ("synced reference with no KL term", {"sync_ref_model": True, "beta": 0.0},
     {"sync_ref_model": True, "beta": 0.02}, "H100", 1, {"sync_ref_model_without_beta"}, None),
    ("LoRA adapting lm_head", {**LORA, "lora_target_modules": ["q_proj", "v_proj", "lm_head"]},
     {**LORA, "lora_target_modules": ["q_proj", "v_proj"]}, "H100", 1, {"peft_on_lm_head"}, None),
    ("bf16 on a V100", {"bf16": True}, {"bf16": False, "fp16": True}, "V100", 1, {"bf16_unsupported"}, None),
    ("two-sided clip (delta) with one update per rollout", {"delta": 4.0},
     {"delta": 4.0, "steps_per_generation": 8}, "H100", 1, {"clip_on_policy"}, None),
    ("GSPO ratios with a bnpo loss", {"importance_sampling_level": "sequence", "loss_type": "bnpo",
                                      "steps_per_generation": 16},
     {"importance_sampling_level": "sequence", "loss_type": "grpo", "steps_per_generation": 16}, "H100", 1,
     {"sequence_ratio_with_token_loss"}, None),
    ("near-greedy sampling for a reasoning task", {"temperature": 0.3}, {"temperature": 1.0}, "H100", 1,
     {"temperature_too_low"}, None),
    ("6000-token completions on a 4096-context math model",
     {"model_name_or_path": "Qwen/Qwen2.5-Math-1.5B", "max_completion_length": 6000},
     {"model_name_or_path": "Qwen/Qwen2.5-Math-1.5B", "max_completion_length": 3000}, "H100", 1,
     {"completion_beyond_context"}, None),
    ("vLLM context shorter than the completion budget", {"vllm_max_model_length": 2048, "max_completion_length": 3072},
     {"vllm_max_model_length": 4096, "max_completion_length": 3072}, "H100", 1, {"completion_beyond_vllm_context"},
     None),
    ("Qwen3 thinking at 1024 tokens", {"model_name_or_path": "Qwen/Qwen3-4B", "max_completion_length": 1024},
     {"model_name_or_path": "Qwen/Qwen3-4B", "max_completion_length": 1024,
      "chat_template_kwargs": {"enable_thinking": False}}, "H100", 1, {"thinking_budget_too_short"}, None),
    ("overlong punishment written for 4096 on a 2048 budget", {"max_completion_length": 2048},
     {"max_completion_length": 4096}, "H100", 1, {"overlong_punishment_mismatch"},
     [{"name": "format_reward"}, {"name": "soft_overlong_punishment",
                                  "params": {"max_completion_len": 4096, "soft_punish_cache": 800}}]),
    ("5 prompts for 16-completion groups", {"num_generations": 16, "per_device_train_batch_size": 16,
                                            "gradient_accumulation_steps": 8, "datasets": "FIVE"},
     {"num_generations": 16, "per_device_train_batch_size": 16, "gradient_accumulation_steps": 2,
      "datasets": "FIVE"}, "H100", 1, {"dataset_smaller_than_generation_batch"}, None),
    ("vLLM server mode on a single GPU", {"vllm_mode": "server"}, {"vllm_mode": "colocate"}, "H100", 1,
     {"vllm_server_needs_gpu"}, None),
    ("a loss name from a blog post", {"loss_type": "dapo_v2"}, {"loss_type": "dapo"}, "H100", 1,
     {"invalid_choice"}, None),
    ("prompt truncation from an old TRL", {"max_prompt_length": 1024}, {}, "H100", 1, {"removed_field"}, None),
    ("three weights for two rewards", {"reward_weights": [1.0, 1.0, 0.5]}, {"reward_weights": [1.0, 0.5]}, "H100", 1,
     {"reward_weights_mismatch"}, None),
    ("full fine-tune loaded in pure bf16", {"dtype": "bfloat16"}, {"dtype": "float32"}, "H100", 1,
     {"full_finetune_low_precision_weights"}, None),
    ("a KL so strong the policy cannot move", {"beta": 1.0}, {"beta": 0.01}, "H100", 1, {"beta_too_strong"}, None),
    ("colocated vLLM share in a 4-GPU server layout", {"vllm_mode": "server", "vllm_gpu_memory_utilization": 0.8},
     {"vllm_mode": "server"}, "H100", 4, {"vllm_memory_ignored_in_server_mode"}, None),
]


def _write(folder: Path, values: dict, rewards: list | None) -> Path:
    """The config as a YAML file (rewards.json beside it), a five-prompt data file where a case asks for one."""
    import yaml

    if values.get("datasets") == "FIVE":
        rows = [{"prompt": f"{i} + {i} =", "answer": str(2 * i)} for i in range(5)]
        (folder / "five.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        values = {**values, "datasets": [{"path": "json", "data_files": "five.jsonl", "split": "train"}]}
    (folder / "config.yaml").write_text(yaml.safe_dump(values))
    if rewards:
        (folder / "rewards.json").write_text(json.dumps(rewards))
    return folder / "config.yaml"


def verdict(values: dict, gpu: str, num_gpus: int, rewards: list | None) -> set[str]:
    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), dict(values), rewards)
        result = validate_config(ValidateRequest(config_path=str(path), gpu=gpu, num_gpus=num_gpus))
    return {f.code for f in result.findings if f.severity in ("error", "warning")}


def main() -> None:
    rows, caught, false_alarms = [], 0, 0
    for name, bad, fix, gpu, num_gpus, expected, rewards in CASES:
        found = verdict({**BASE, **bad}, gpu, num_gpus, rewards)
        fixed = verdict({**{k: v for k, v in BASE.items() if k not in bad}, **fix}, gpu, num_gpus, rewards)
        hit, alarm = bool(found & expected), bool(fixed & expected)
        caught += hit
        false_alarms += alarm
        rows.append({"config": name, "caught": hit, "codes": sorted(found), "fixed_twin_flagged": alarm})
    print(json.dumps({"caught": caught, "total": len(CASES), "fixed_twins_flagged": false_alarms, "cases": rows},
                     indent=1))


if __name__ == "__main__":
    main()
