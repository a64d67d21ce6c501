"""Benchmark: 24 more bad GRPO configs, written after a second expert's reading (issue 34), each with a fixed twin.

None copies a case of bench_bad_configs.py: these are the mistakes that reading found passing as VALID, of the
kinds it named (TRL's own checks for the target, crashes when the trainer or vLLM's engine starts, memory of a
model outside the catalog, saving and logging that lose the run, TRL's loss semantics, the sampler correction's
bounds, Dr.GRPO's knobs, reward weights). Counted as bench_bad_configs.py counts: a config is caught when
validation (memory.verdict.validate_config, the door of validate_grpo_config) reports an error or warning with an
expected code; a twin is falsely flagged when it reports one.

Prints JSON: caught of total, the fixed twins flagged, and each case's verdict.

    .venv/bin/python bench/bench_bad_configs_expert.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_bad_configs import BASE, LORA, verdict  # noqa: E402  (the same base config and the same door)

LONG = {"max_steps": 400, "save_steps": 40, "logging_steps": 10}  # a long run that keeps checkpoints
ZERO2_OFFLOAD = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"}}

# (name, bad fields, the fix, target gpu, num_gpus, expected codes (any of them))
CASES = [
    ("tf32 on a T4 (Turing has no TF32)", {"tf32": True, "bf16": False, "fp16": True, **LORA, "dtype": "float16"},
     {"bf16": False, "fp16": True, **LORA, "dtype": "float16"}, "T4", 1, {"trl_rejected"}),
    ("auto_find_batch_size to survive an OOM", {"auto_find_batch_size": True}, {}, "H100", 1, {"trl_rejected"}),
    ("completions pushed to the Hub without logging them", {"log_completions_hub_repo": "me/rollouts",
                                                            "hub_private_repo": True},
     {"log_completions_hub_repo": "me/rollouts", "hub_private_repo": True, "log_completions": True}, "H100", 1,
     {"trl_rejected"}),
    ("VESPO with vLLM's default correction mode", {"loss_type": "vespo"},
     {"loss_type": "vespo", "vllm_importance_sampling_mode": "token_mask"}, "H100", 1, {"vespo_sampling_mode"}),
    ("vLLM tensor parallel 8 for 12 attention heads", {"vllm_tensor_parallel_size": 8},
     {"vllm_tensor_parallel_size": 4}, "H100", 8, {"vllm_tensor_parallel_heads"}),
    ("vLLM tensor parallel 2 over 3 GPUs", {"vllm_tensor_parallel_size": 2}, {"vllm_tensor_parallel_size": 1},
     "H100", 3, {"vllm_tensor_parallel_world"}),
    ("tensor parallelism set for a vLLM server", {"vllm_mode": "server", "vllm_tensor_parallel_size": 2},
     {"vllm_mode": "server"}, "H100", 4, {"vllm_tensor_parallel_ignored"}),
    ("a 64k vLLM context on a 32k model", {"vllm_max_model_length": 65536}, {"vllm_max_model_length": 16384},
     "H100", 1, {"vllm_context_beyond_model"}),
    ("a MoE load-balancing weight on a dense Llama", {"model_name_or_path": "meta-llama/Llama-3.2-1B-Instruct",
                                                      "router_aux_loss_coef": 0.001},
     {"model_name_or_path": "meta-llama/Llama-3.2-1B-Instruct"}, "H100", 1, {"router_aux_loss_on_dense"}),
    ("4-bit base without an adapter", {"load_in_4bit": True, "learning_rate": 1e-5},
     {"load_in_4bit": True, **LORA}, "H100", 1, {"quantized_without_peft"}),
    ("8-bit base under a colocated vLLM", {"load_in_8bit": True, **LORA}, {"load_in_4bit": True, **LORA}, "H100", 1,
     {"vllm_8bit_colocate"}),
    ("quantisation given twice", {"load_in_4bit": True, **LORA,
                                  "model_init_kwargs": {"quantization_config": {"load_in_4bit": True}}},
     {"load_in_4bit": True, **LORA}, "H100", 1, {"quantization_config_twice"}),
    ("a streamed data set with batches dispatched", {"dataset_streaming": True,
                                                     "accelerator_config": {"dispatch_batches": True}},
     {"dataset_streaming": True}, "H100", 1, {"streaming_dispatch_batches"}),
    ("a coder model outside the catalog, fp32 full on 2x A10G",
     {"model_name_or_path": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "vllm_mode": "server"},
     {"model_name_or_path": "Qwen/Qwen2.5-Coder-1.5B-Instruct", "vllm_mode": "server",
      "deepspeed": ZERO2_OFFLOAD}, "A10G", 2, {"memory_does_not_fit", "memory_not_planned"}),
    ("CISPO with DAPO's clip-higher", {"loss_type": "cispo", "epsilon_high": 0.28},
     {"loss_type": "cispo", "epsilon_high": 5.0}, "H100", 1, {"cispo_cap_below_one"}),
    ("GSPO reusing rollouts with PPO's clip range", {"importance_sampling_level": "sequence", "loss_type": "grpo",
                                                     "steps_per_generation": 16},
     {"importance_sampling_level": "sequence", "loss_type": "grpo", "steps_per_generation": 16, "epsilon": 3e-4,
      "epsilon_high": 4e-4}, "H100", 1, {"sequence_clip_token_scale"}),
    ("a sampler-correction mask that excludes ratio 1", {"vllm_importance_sampling_clip_min": 0.5,
                                                         "vllm_importance_sampling_clip_max": 0.9},
     {"vllm_importance_sampling_clip_min": 0.5, "vllm_importance_sampling_clip_max": 2.0}, "H100", 1,
     {"sampler_correction_excludes_one"}),
    ("Dr.GRPO's loss with std-scaled advantages", {"loss_type": "dr_grpo"},
     {"loss_type": "dr_grpo", "scale_rewards": "none"}, "H100", 1, {"dr_grpo_with_std_scaling"}),
    ("both rewards weighted 0", {"reward_weights": [0.0, 0.0]}, {"reward_weights": [0.2, 1.0]}, "H100", 1,
     {"reward_weights_all_zero"}),
    ("the first checkpoint after the last step", {**LONG, "save_steps": 1000}, LONG, "H100", 1,
     {"checkpoint_after_run"}),
    ("no checkpoints on a 400-step run", {**LONG, "save_strategy": "no"}, LONG, "H100", 1, {"no_checkpoints"}),
    ("weights-only checkpoints for a resumed run", {**LONG, "save_only_model": True,
                                                    "resume_from_checkpoint": "checkpoints/checkpoint-200"},
     {**LONG, "resume_from_checkpoint": "checkpoints/checkpoint-200"}, "H100", 1, {"checkpoints_cannot_resume"}),
    ("one logged row every 100 steps of a 60-step run", {"max_steps": 60, "logging_steps": 100},
     {"max_steps": 60, "logging_steps": 1}, "H100", 1, {"too_few_logged_rows"}),
    ("a warm-up longer than the run", {"max_steps": 150, "warmup_steps": 200, "logging_steps": 1},
     {"max_steps": 150, "warmup_steps": 8, "logging_steps": 1}, "H100", 1, {"warmup_longer_than_run"}),
]


def main() -> None:
    rows, caught, false_alarms = [], 0, 0
    for name, bad, fix, gpu, num_gpus, expected in CASES:
        found = verdict({**BASE, **bad}, gpu, num_gpus, None)
        fixed = verdict({**{k: v for k, v in BASE.items() if k not in bad}, **fix}, gpu, num_gpus, None)
        hit, alarm = bool(found & expected), bool(fixed & expected)
        caught += hit
        false_alarms += alarm
        rows.append({"config": name, "caught": hit, "codes": sorted(found), "fixed_twin_flagged": alarm,
                     "twin_codes": sorted(fixed & expected)})
    print(json.dumps({"caught": caught, "total": len(CASES), "fixed_twins_flagged": false_alarms, "cases": rows},
                     indent=1))


if __name__ == "__main__":
    main()
