"""Benchmark: 23 GRPO config defects that only running TRL's own code shows (issue 44), each with its fixed twin.

Written blind (from TRL 1.16, transformers 5.25, accelerate, vLLM and torch source, without reading the validator's
rules), in the classes issue 44 names: what `generation_kwargs` really does (TRL applies it last), settings that
crash only after the model and vLLM have loaded, settings that waste the run silently, and others found in the
source. Each case is a config (with its data file and reward module where it needs one, written into a temp dir
beside the config) that is broken, its fixed twin (the minimal change that makes it right), the field a finding
must name, the expected severity, and the source line that proves the defect.

Each config goes through the public door (memory.verdict.validate_config, the core of validate_grpo_config and
`validate-config`) with the config's folder as the working directory (a dotted reward path is imported from there,
as the training interpreter imports it). A case is
  - caught by name: an error or warning whose field is (or is inside) one of the named fields;
  - flagged for the wrong reason: not caught, but an error or warning its twin does not get;
  - missed: neither.
A fixed twin is flagged when it gets an error or warning naming one of the case's fields.

Prints one line per case, the four counts and a ratio line; --json prints the rows as JSON.

    PYTHONPATH=. .venv/bin/python bench/bench_defects_rehearsal.py [--json]
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DROP = object()  # a field the case removes from the base config

DATA = [{"path": "json", "data_files": "data.jsonl", "split": "train"}]
BASE = {"model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct", "use_vllm": True, "vllm_mode": "colocate",
        "num_generations": 8, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 4,
        "learning_rate": 1e-6, "beta": 0.0, "bf16": True, "loss_type": "dapo", "output_dir": "out",
        "max_completion_length": 1024, "max_steps": 200, "save_steps": 50, "logging_steps": 10,
        "reward_funcs": ["mcp_server.rewards.format_reward", "mcp_server.rewards.correctness_reward"],
        "datasets": DATA}
LORA = {"use_peft": True, "learning_rate": 1e-5, "dtype": "bfloat16"}
SMALL = {"model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct"}


def _rows(n: int, *, chat: bool = False, column: str = "prompt", words: int = 0) -> str:
    out = []
    for i in range(n):
        text = f"What is {i} + {i}? Put the result in <answer></answer>." + (" alpha" * words)
        prompt = [{"role": "user", "content": text}] if chat else text
        out.append(json.dumps({column: prompt, "answer": str(2 * i)}))
    return "\n".join(out) + "\n"


# Data files and reward modules a case writes beside its config (name -> text).
FILES = {
    "data.jsonl": _rows(64),
    "big.jsonl": _rows(2000),
    "chat.jsonl": _rows(64, chat=True),
    "question.jsonl": _rows(64, column="question"),
    "long.jsonl": _rows(16, words=3200),  # ~3.2k prompt tokens each
    "rewards_gt.py": "def exact_match(completions, ground_truth, **kwargs):\n"
                     "    return [float(str(g) in str(c)) for c, g in zip(completions, ground_truth)]\n",
    "rewards_answer.py": "def exact_match(completions, answer, **kwargs):\n"
                         "    return [float(str(a) in str(c)) for c, a in zip(completions, answer)]\n",
}
ZERO2 = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}

# (name, class, bad fields, fix fields, fields a finding must name, expected severity, gpu, num_gpus,
#  vllm_server_gpus, proof: the source line)
CASES = [
    ("seed in generation_kwargs (colocate: every completion of a group identical)", "generation_kwargs",
     {"generation_kwargs": {"seed": 42}}, {"seed": 42}, {"generation_kwargs"}, "error", "H100", 1, None,
     "trl/generation/vllm_generation.py:VLLMGeneration.generate (colocate): `\"n\": 1,  # vLLM on each GPU "
     "generates only 1 in colocate mode` ... `generation_kwargs.update(self.generation_kwargs)` ... "
     "`sampling_params = SamplingParams(**generation_kwargs)`: each of a group's num_generations copies of a prompt "
     "is its own request with the same vllm SamplingParams.seed (\"Random seed to use for the generation\"), so "
     "all sample the same tokens: zero reward std, zero advantage"),
    ("max_tokens in generation_kwargs overrides max_completion_length", "generation_kwargs",
     {"generation_kwargs": {"max_tokens": 4096}}, {"max_completion_length": 4096},
     {"generation_kwargs", "max_completion_length"}, "warning", "H100", 1, None,
     "trl/generation/vllm_generation.py:VLLMGeneration.generate (colocate): `\"max_tokens\": max_completion_length,` "
     "then `generation_kwargs.update(self.generation_kwargs)`: the user's max_tokens wins, so completions run to "
     "4096 tokens while the memory plan, overlong masking and length rules assume 1024"),
    ("repetition_penalty in generation_kwargs under vLLM importance sampling", "generation_kwargs",
     {"generation_kwargs": {"repetition_penalty": 1.1}},
     {"generation_kwargs": {"repetition_penalty": 1.1}, "vllm_importance_sampling_correction": False},
     {"generation_kwargs", "vllm_importance_sampling_correction"}, "warning", "H100", 1, None,
     "trl/generation/vllm_generation.py:VLLMGeneration._init_vllm: `logprobs_mode=\"processed_logprobs\"` "
     "(\"Important so temperature scaling/logit tweaking affects the TIS log probs\") while "
     "trl/trainer/grpo_trainer.py:GRPOTrainer.__init__ scores the policy with `add_fused_lm_head(..., "
     "temperature=self.temperature, ...)` only: the sampler's log-probs carry the penalty, the trainer's do not, "
     "and the importance-sampling ratio corrects for a mismatch the config itself made"),
    ("n in generation_kwargs in colocate mode", "generation_kwargs",
     {"generation_kwargs": {"n": 8}}, {"vllm_mode": "server", "generation_kwargs": {"n": 8}},
     {"generation_kwargs"}, "error", "H100", 2, 1,
     "trl/generation/vllm_generation.py:VLLMGeneration.generate (colocate): `\"n\": 1,  # vLLM on each GPU "
     "generates only 1 in colocate mode` overwritten by `generation_kwargs.update(self.generation_kwargs)`: 8 "
     "completions per prompt copy, 8x the completions TRL slices per process (the server path sends "
     "`\"n\": num_generations` and vllm_client.generate's `payload.update(generation_kwargs or {})` keeps n=8)"),
    ("temperature in generation_kwargs differs from the trainer's temperature", "generation_kwargs",
     {"generation_kwargs": {"temperature": 0.7}}, {"temperature": 0.7}, {"generation_kwargs", "temperature"},
     "warning", "H100", 1, None,
     "trl/generation/vllm_generation.py:VLLMGeneration.generate: `\"temperature\": temperature,` then "
     "`generation_kwargs.update(self.generation_kwargs)` samples at 0.7, while "
     "trl/trainer/grpo_trainer.py:GRPOTrainer.__init__ `add_fused_lm_head(..., temperature=self.temperature)` "
     "scores at 1.0: old/new log-probs and the importance ratio are computed at another temperature than sampled"),
    ("max_new_tokens in generation_kwargs overrides max_completion_length (transformers generate)",
     "generation_kwargs",
     {"use_vllm": False, "vllm_mode": DROP, "generation_kwargs": {"max_new_tokens": 4096}},
     {"use_vllm": False, "vllm_mode": DROP, "max_completion_length": 4096},
     {"generation_kwargs", "max_completion_length"}, "warning", "H100", 1, None,
     "trl/trainer/grpo_trainer.py:GRPOTrainer.__init__: `\"max_new_tokens\": self.max_completion_length,` ... "
     "`if args.generation_kwargs is not None: generation_kwargs.update(args.generation_kwargs)` -> "
     "`GenerationConfig(**generation_kwargs, ...)`: generation runs to 4096 new tokens, not 1024"),
    ("remove_unused_columns with a reward that reads the answer column", "crash after load",
     {"remove_unused_columns": True}, {"remove_unused_columns": False}, {"remove_unused_columns"}, "error",
     "H100", 1, None,
     "trl/trainer/grpo_trainer.py:GRPOTrainer._set_signature_columns_if_needed: `self._signature_columns = "
     "[\"prompt\", \"image\", \"images\"]` (trl/trainer/grpo_config.py help: \"If you use a custom reward function "
     "that requires any column other than \"prompts\" and \"completions\", you should keep this to False\"): the "
     "`answer` column correctness_reward reads is dropped before the first reward call"),
    ("a reward whose signature names a column the data set lacks", "crash after load",
     {"reward_funcs": ["mcp_server.rewards.format_reward", "rewards_gt.exact_match"]},
     {"reward_funcs": ["mcp_server.rewards.format_reward", "rewards_answer.exact_match"]}, {"reward_funcs"},
     "error", "H100", 1, None,
     "trl/trainer/grpo_trainer.py:GRPOTrainer._calculate_rewards: `keys = [key for key in inputs[0] if key not in "
     "[\"prompt\", \"completion\", \"completion_ids\"]]` / `reward_kwargs = {key: [example[key] for example in "
     "inputs] for key in keys}`: the data has prompt/answer, so exact_match(completions, ground_truth, **kwargs) "
     "raises TypeError (missing 'ground_truth') at the first reward call"),
    ("cosine_with_min_lr without lr_scheduler_kwargs", "crash after load",
     {"lr_scheduler_type": "cosine_with_min_lr"},
     {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": 0.1}},
     {"lr_scheduler_kwargs", "lr_scheduler_type"}, "error", "H100", 1, None,
     "transformers/optimization.py:get_cosine_with_min_lr_schedule_with_warmup: `raise ValueError(\"One of min_lr "
     "or min_lr_rate should be set through the `lr_scheduler_kwargs`\")` (raised in create_scheduler, after the "
     "model and vLLM are loaded)"),
    ("streamed data without max_steps", "crash after load",
     {"streaming": True, "max_steps": DROP, "num_train_epochs": 1}, {"streaming": True, "max_steps": 200},
     {"max_steps", "streaming", "num_train_epochs"}, "error", "H100", 1, None,
     "transformers/trainer.py:Trainer.set_initial_training_values: `raise ValueError(\"args.max_steps must be set "
     "to a positive value if dataloader does not have a length, was\" ...)`; trl/trainer/grpo_trainer.py "
     "GRPOTrainer docstring: \"When `train_dataset` is an IterableDataset (e.g. a streaming dataset), `max_steps` "
     "must be set\""),
    ("a DeepSpeed JSON whose micro-batch disagrees with per_device_train_batch_size", "crash after load",
     {"deepspeed": {**ZERO2, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}},
     {"deepspeed": {**ZERO2, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}},
     {"deepspeed"}, "error", "H100", 2, None,
     "transformers/integrations/deepspeed.py:HfTrainerDeepSpeedConfig.trainer_config_process: "
     "`self.fill_match(\"train_micro_batch_size_per_gpu\", args.per_device_train_batch_size)` (4 vs 8), then "
     "trainer_config_finalize: `raise ValueError(... \"Please correct the following DeepSpeed config values that "
     "mismatch TrainingArguments values\" ...)`"),
    ("QLoRA under FSDP without bnb_4bit_quant_storage", "crash after load",
     {"load_in_4bit": True, **LORA, "fsdp": "full_shard auto_wrap"},
     {"load_in_4bit": True, **LORA, "fsdp": "full_shard auto_wrap", "bnb_4bit_quant_storage": "bfloat16"},
     {"bnb_4bit_quant_storage"}, "warning", "H100", 4, None,
     "accelerate/utils/fsdp_utils.py:fsdp2_prepare_model: \"Default uint8 quant_storage cannot survive "
     "fully_shard's DTensor conversion\" -> the 4-bit weights are excluded from sharding, warning \"To enable "
     "memory-efficient sharding of 4-bit weights, set bnb_4bit_quant_storage to a floating dtype (e.g. bf16)\" "
     "(under FSDP1 the mixed uint8/bf16 flat parameter does not build at all); TRL passes it through "
     "trl/trainer/utils.py:get_quantization_config `bnb_4bit_quant_storage=model_args.bnb_4bit_quant_storage`"),
    ("flash_attention_2 on a T4", "crash after load",
     {**SMALL, "attn_implementation": "flash_attention_2", "bf16": False, "fp16": True, **LORA, "dtype": "float16"},
     {**SMALL, "attn_implementation": "sdpa", "bf16": False, "fp16": True, **LORA, "dtype": "float16"},
     {"attn_implementation"}, "error", "T4", 1, None,
     "transformers/modeling_utils.py:PreTrainedModel._flash_attn_import_error: `raise ImportError(f\"{preface} "
     "FlashAttention{flash_attn_version} requires compute capability >= {cuda_min_major_version}, but found "
     "...\")` with transformers/modeling_flash_attention_utils.py `\"cuda_min_major_version\": 8,  # Ampere`; "
     "the T4 is compute capability 7.5"),
    ("prompts longer than the vLLM context", "crash after load",
     {"datasets": [{**DATA[0], "data_files": "long.jsonl"}], "vllm_max_model_length": 2048,
      "max_completion_length": 512},
     {"datasets": [{**DATA[0], "data_files": "long.jsonl"}], "vllm_max_model_length": 8192,
      "max_completion_length": 512},
     {"vllm_max_model_length", "datasets"}, "error", "H100", 1, None,
     "vllm/v1/engine/processor.py:Processor._validate_model_input: `raise ValueError(f'The {prompt_type} prompt "
     "(length {len(prompt_ids)}) is longer than the maximum model length of {max_prompt_len}. {suggestion}')`: "
     "every prompt of long.jsonl is ~3.2k tokens, vllm_max_model_length is 2048"),
    ("eval_strategy steps with no test split in the data", "crash after load",
     {"eval_strategy": "steps", "eval_steps": 50},
     {"eval_strategy": "steps", "eval_steps": 50, "test_split_size": 0.1},
     {"eval_strategy", "test_split_size", "datasets", "dataset_test_split"}, "error", "H100", 1, None,
     "trl/scripts/grpo.py:main: `eval_dataset=dataset[script_args.dataset_test_split] if "
     "training_args.eval_strategy != \"no\" else None` with trl/scripts/utils.py:get_dataset `return "
     "datasets.DatasetDict({\"train\": combined_dataset})` when test_split_size is None: KeyError 'test'"),
    ("a data set without a prompt column", "crash after load",
     {"datasets": [{**DATA[0], "data_files": "question.jsonl"}]}, {}, {"datasets", "dataset_name"}, "error",
     "H100", 1, None,
     "trl/trainer/grpo_trainer.py:GRPOTrainer._generate_and_score_completions: `prompts = [x[\"prompt\"] for x "
     "in inputs]`: question.jsonl has question/answer, so KeyError 'prompt' at the first step"),
    ("fp16 weights trained with fp16 autocast (full fine-tune)", "crash after load",
     {**SMALL, "bf16": False, "fp16": True, "dtype": "float16"},
     {**SMALL, "bf16": False, "fp16": True, "dtype": "float32"}, {"dtype", "fp16"}, "error", "V100", 1, None,
     "torch/amp/grad_scaler.py:GradScaler._unscale_grads_: `if (not allow_fp16) and param.grad.dtype == "
     "torch.float16: raise ValueError(\"Attempting to unscale FP16 gradients.\")` at the first optimizer step"),
    ("eval_strategy steps without eval_steps (an evaluation after every step)", "silent waste",
     {"eval_strategy": "steps", "test_split_size": 0.1, "logging_steps": 1},
     {"eval_strategy": "steps", "test_split_size": 0.1, "logging_steps": 1, "eval_steps": 50},
     {"eval_steps"}, "warning", "H100", 1, None,
     "transformers/training_args.py:TrainingArguments.__post_init__: `if self.eval_strategy == "
     "IntervalStrategy.STEPS and (self.eval_steps is None or self.eval_steps == 0): ... self.eval_steps = "
     "self.logging_steps` (= 1: a full evaluation with generation after each of 200 steps)"),
    ("logging_strategy epoch on a run shorter than an epoch", "silent waste",
     {"datasets": [{**DATA[0], "data_files": "big.jsonl"}], "logging_strategy": "epoch"},
     {"datasets": [{**DATA[0], "data_files": "big.jsonl"}], "logging_strategy": "steps"},
     {"logging_strategy"}, "warning", "H100", 1, None,
     "transformers/trainer_callback.py:DefaultFlowCallback.on_epoch_end: `if args.logging_strategy == "
     "IntervalStrategy.EPOCH: control.should_log = True` (on_step_end logs only for STEPS): 200 steps x 4 prompts "
     "= 800 of big.jsonl's 2000 rows, so no epoch ends and no metric row is written before the run stops"),
    ("a think-format reward with Qwen3 thinking off", "silent waste",
     {"model_name_or_path": "Qwen/Qwen3-4B", **LORA, "datasets": [{**DATA[0], "data_files": "chat.jsonl"}],
      "chat_template_kwargs": {"enable_thinking": False},
      "reward_funcs": ["think_format_reward", "mcp_server.rewards.correctness_reward"]},
     {"model_name_or_path": "Qwen/Qwen3-4B", **LORA, "datasets": [{**DATA[0], "data_files": "chat.jsonl"}],
      "chat_template_kwargs": {"enable_thinking": True}, "max_completion_length": 8192,
      "reward_funcs": ["think_format_reward", "mcp_server.rewards.correctness_reward"]},
     {"reward_funcs", "chat_template_kwargs"}, "warning", "H100", 1, None,
     "trl/rewards/format_rewards.py:think_format_reward: `pattern = r\"^<think>(?!.*<think>)(.*?)</think>.*$\"` "
     "on the completion, while Qwen3's chat template with enable_thinking false ends the prompt with "
     "`'<think>\\n\\n</think>\\n\\n'` (`{%- if enable_thinking is defined and enable_thinking is false %}`): the "
     "completion never starts with <think>, the reward is 0 for every sample"),
    ("LoRA fields with use_peft false (a silent full fine-tune)", "silent waste",
     {"lora_r": 64, "lora_alpha": 128, "lora_target_modules": ["q_proj", "v_proj"]},
     {**LORA, "lora_r": 64, "lora_alpha": 128, "lora_target_modules": ["q_proj", "v_proj"]},
     {"use_peft", "lora_r", "lora_alpha", "lora_target_modules"}, "warning", "H100", 1, None,
     "trl/trainer/utils.py:get_peft_config: `if model_args.use_peft is False: return None`: the lora_* fields are "
     "read by nothing and the whole model is trained"),
    ("warm-up steps under the constant scheduler", "silent waste",
     {"lr_scheduler_type": "constant", "warmup_steps": 20},
     {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 20}, {"lr_scheduler_type", "warmup_steps"},
     "warning", "H100", 1, None,
     "transformers/optimization.py:get_scheduler: `if name == SchedulerType.CONSTANT: return "
     "schedule_func(optimizer)` returns before num_warmup_steps is read: the 20 warm-up steps never happen"),
    ("datasets columns that drop the column a reward reads", "crash after load",
     {"datasets": [{**DATA[0], "columns": ["prompt"]}]}, {"datasets": [{**DATA[0], "columns": ["prompt", "answer"]}]},
     {"datasets"}, "error", "H100", 1, None,
     "trl/scripts/utils.py:get_dataset: `if dataset_config.columns is not None: dataset = "
     "dataset.select_columns(dataset_config.columns)`: `answer` is gone before correctness_reward reads it"),
]


def _config(bad: dict, base: dict = BASE) -> dict:
    out = dict(base)
    for key, value in bad.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _twin(bad: dict, fix: dict) -> dict:
    """The base without the broken fields, then the fix: the minimal change, as bench_bad_configs.py builds it."""
    return _config(fix, {k: v for k, v in BASE.items() if k not in bad})


@contextlib.contextmanager
def _in(folder: Path):
    before, path = os.getcwd(), list(sys.path)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        os.chdir(before)
        sys.path[:] = path
        for name in ("rewards_gt", "rewards_answer"):
            sys.modules.pop(name, None)


def findings(values: dict, gpu: str, num_gpus: int, server_gpus: int | None) -> list:
    """Errors and warnings for `values` written as config.yaml beside the case's data files and reward modules."""
    import yaml

    from mcp_server.memory.verdict import validate_config
    from mcp_server.recipe.models import ValidateRequest

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, text in FILES.items():
            (folder / name).write_text(text)
        (folder / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
        with _in(folder):
            result = validate_config(ValidateRequest(config_path=str(folder / "config.yaml"), gpu=gpu,
                                                     num_gpus=num_gpus, vllm_server_gpus=server_gpus))
    return [f for f in result.findings if f.severity in ("error", "warning")]


def _names(finding, fields: set[str]) -> bool:
    field = finding.field or ""
    return any(field == f or field.startswith((f + ".", f + "[")) for f in fields)


def main() -> None:
    rows = []
    for name, klass, bad, fix, fields, severity, gpu, num_gpus, server, proof in CASES:
        found = findings(_config(bad), gpu, num_gpus, server)
        twin = findings(_twin(bad, fix), gpu, num_gpus, server)
        by_name = [f for f in found if _names(f, fields)]
        twin_keys = {(f.code, f.field) for f in twin}
        new = [f for f in found if (f.code, f.field) not in twin_keys]
        verdict = "caught" if by_name else ("wrong_reason" if new else "missed")
        rows.append({"case": name, "class": klass, "fields": sorted(fields), "expected_severity": severity,
                     "verdict": verdict,
                     "by_name": [f"{f.severity} {f.code} [{f.field}]" for f in by_name],
                     "other_new": [f"{f.severity} {f.code} [{f.field}]" for f in new if f not in by_name],
                     "severity_as_expected": any(f.severity == severity for f in by_name) if by_name else None,
                     "twin_flagged": [f"{f.severity} {f.code} [{f.field}]" for f in twin if _names(f, fields)],
                     "twin_errors": [f"{f.code} [{f.field}]" for f in twin if f.severity == "error"],
                     "proof": proof})
    counts = {k: sum(r["verdict"] == k for r in rows) for k in ("caught", "wrong_reason", "missed")}
    twins = sum(bool(r["twin_flagged"]) for r in rows)
    if "--json" in sys.argv:
        print(json.dumps({**counts, "total": len(rows), "fixed_twins_flagged": twins, "cases": rows}, indent=1))
        return
    for r in rows:
        detail = r["by_name"] or r["other_new"]
        print(f"{r['verdict']:12} {r['case']}  [{', '.join(r['fields'])}]"
              + (f"  <- {'; '.join(detail)}" if detail else "")
              + (f"  TWIN FLAGGED: {'; '.join(r['twin_flagged'])}" if r["twin_flagged"] else ""))
    print(f"\ncaught by name {counts['caught']}, flagged for the wrong reason {counts['wrong_reason']}, "
          f"missed {counts['missed']}, fixed twins flagged {twins}")
    print(f"ratio: {counts['caught']}/{len(rows)} caught by name ({100 * counts['caught'] / len(rows):.0f}%), "
          f"{twins}/{len(rows)} fixed twins flagged")


if __name__ == "__main__":
    main()
