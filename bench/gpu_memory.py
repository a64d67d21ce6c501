"""GPU check: the memory planner's three peaks against torch and the driver, on real GRPOTrainer steps.

The tiny model (mcp_server/tiny.py: its tokenizer, chat template and Qwen2 family) widened to ~0.15B parameters and
a 32k vocabulary, so weights, optimizer state, activations and logits are large next to the CUDA context; random
weights generate until max_completion_length (ids past the tokenizer are suppressed), so the planned lengths are
the real ones. Each case runs two optimizer steps (the second sees the optimizer state) in its own process and
prints measured vs planned peaks as JSON: torch.cuda.max_memory_allocated, max_memory_reserved, and the process as
nvidia-smi shows it (reserved peak + what the driver holds beyond torch's pool, from torch.cuda.mem_get_info).
No vLLM, no network. Under two minutes on one H200 (four cases of ~20 s and a TRL import each).

    python bench/gpu_memory.py            # on a GPU: one JSON object, per case measured / planned / error
    python bench/gpu_memory.py --smoke    # on CPU: the same code path with a small model, planned peaks only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDE = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16,
            num_key_value_heads=4, vocab_size=32768, max_position_embeddings=4096)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=1024)
# name -> GRPOConfig / ModelConfig fields (the planner is given the same as a config dict)
CASES = {
    "full_bf16_ckpt": dict(model_init_kwargs={"dtype": "bfloat16"}, gradient_checkpointing=True),
    "full_fp32_no_ckpt": dict(gradient_checkpointing=False),  # TRL's default dtype: float32
    "full_bf16_beta": dict(model_init_kwargs={"dtype": "bfloat16"}, beta=0.04),
    "lora_bf16_beta": dict(model_init_kwargs={"dtype": "bfloat16"}, use_peft=True, lora_r=16, lora_dropout=0.0,
                           lora_target_modules="all-linear", beta=0.04),
}
COMMON = dict(per_device_train_batch_size=32, num_generations=8, max_completion_length=512, learning_rate=1e-6)
SMOKE_COMMON = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=8, learning_rate=1e-6)


def build_model(target: Path, arch: dict) -> Path:
    """The tiny model's tokenizer and family, widened; deterministic random weights."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from mcp_server.tiny import ensure_tiny_model

    tiny = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    config = Qwen2Config(**arch, tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def prompt_tokens(model_dir: Path, rows: list[dict]) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    return max(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)


def run_case(model_dir: Path, name: str, common: dict, smoke: bool) -> dict:
    """One case in this process: two GRPO steps, the peaks torch and the driver saw."""
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from transformers import AutoTokenizer

    from mcp_server.tiny import make_task

    fields = {**CASES[name], **common}
    peft_fields = {k: fields.pop(k) for k in ("use_peft", "lora_r", "lora_dropout", "lora_target_modules")
                   if k in fields}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), max_steps=2, save_strategy="no", report_to=[], seed=0,
                      logging_steps=1, disable_tqdm=True, use_cpu=smoke, bf16=not smoke,
                      generation_kwargs={"suppress_tokens": list(range(len(tokenizer), vocab)),
                                         "min_new_tokens": fields["max_completion_length"]},
                      **fields)
    peft_config = None
    if peft_fields:
        from peft import LoraConfig

        peft_config = LoraConfig(r=peft_fields["lora_r"], lora_alpha=2 * peft_fields["lora_r"],
                                 lora_dropout=peft_fields["lora_dropout"],
                                 target_modules=peft_fields["lora_target_modules"], task_type="CAUSAL_LM")
    rows = make_task(64)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                          peft_config=peft_config)
    if not smoke:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    if smoke:
        return {}
    free, total = torch.cuda.mem_get_info()
    outside_torch = (total - free) - torch.cuda.memory_reserved()  # CUDA context, cuBLAS/NCCL workspaces
    gib = 1024**3
    return {"allocated": torch.cuda.max_memory_allocated() / gib, "reserved": torch.cuda.max_memory_reserved() / gib,
            "nvidia_smi": (torch.cuda.max_memory_reserved() + outside_torch) / gib}


def planned(model_dir: Path, name: str, common: dict, prompt_length: int, gpu_gib: float) -> dict:
    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    config = {**CASES[name], **common}
    config.pop("learning_rate")
    plan = plan_memory(MemoryPlanRequest(model=str(model_dir), gpu_memory_gib=gpu_gib, config=config,
                                         prompt_length=prompt_length, validate_levers=False))
    return {"allocated": plan.peak_allocated_gib, "reserved": plan.peak_reserved_gib,
            "nvidia_smi": plan.peak_nvidia_smi_gib, "phase": plan.peak_phase,
            "breakdown": {c.name: c.gib for c in plan.breakdown}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, small model: the code path, planned peaks only")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    common = SMOKE_COMMON if opts.smoke else COMMON
    if opts.case:  # child process
        print("RESULT " + json.dumps(run_case(Path(opts.model_dir), opts.case, common, opts.smoke)))
        return

    import transformers

    transformers.logging.set_verbosity_error()
    gpu_gib = 0.0
    if not opts.smoke:
        import torch

        gpu_gib = torch.cuda.get_device_properties(0).total_memory / 1024**3
    from mcp_server.tiny import make_task

    out: dict = {"gpu_gib": round(gpu_gib, 2), "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "wide", SMOKE if opts.smoke else WIDE)
        prompt_length = prompt_tokens(model_dir, make_task(64))
        out["prompt_length"] = prompt_length
        for name in CASES:
            plan = planned(model_dir, name, common, prompt_length, gpu_gib or 80.0)
            child = subprocess.run([sys.executable, __file__, "--case", name, "--model-dir", str(model_dir)]
                                   + (["--smoke"] if opts.smoke else []), capture_output=True, text=True)
            line = next((ln for ln in child.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if child.returncode != 0 or line is None:
                out["cases"][name] = {"planned": plan, "error": (child.stderr or child.stdout)[-2000:]}
                continue
            measured = json.loads(line.removeprefix("RESULT "))
            case = {"planned": plan, "measured": {k: round(v, 3) for k, v in measured.items()}}
            if measured:
                case["error"] = {k: round((plan[k] - measured[k]) / measured[k], 3) for k in measured}
            out["cases"][name] = case
    errors = [abs(e) for c in out["cases"].values() if isinstance(c.get("error"), dict) for e in c["error"].values()]
    if errors:
        out["worst_abs_error"] = max(errors)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
