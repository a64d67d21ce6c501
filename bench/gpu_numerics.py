"""GPU check: the recipe's numerics on CUDA (bf16 autocast), printed as one JSON object. Under 2 minutes on one
H200; torch + transformers + peft + trl only (no vLLM, no network), the tiny model from mcp_server/tiny.py.

1. weights: the fraction of weights AdamW changes in 10 steps at the recipe's lr 5e-7, for float32 master weights
   under bf16 autocast (the emitted full fine-tune) and for pure bf16 weights (`dtype: bfloat16`, no master copy).
   The CPU test (tests/test_recipe_mechanisms.py) shows the same with CPU autocast; this is the CUDA kernels.
2. grpo: real GRPOTrainer runs of the emitted configs on CUDA with bf16 autocast at the recipe's 5e-7: the fraction
   of weights changed (float32 vs bfloat16 weights) and `clip_ratio/region_mean` per step for the base (on-policy),
   DAPO and GSPO (off-policy structure). Step 1 of DAPO/GSPO trains on the mini-batch sampled by the same weights,
   so a clip there comes from kernel noise between the two forward passes alone (relevant to GSPO's 3e-4 range).

    python bench/gpu_numerics.py            # CUDA (fails without it)
    python bench/gpu_numerics.py --cpu      # smoke run of the same code on CPU (slow, not the figures)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LR = 5e-7
SPREAD = "def spread_reward(completions, **kwargs):\n    return [float(i % 8) for i in range(len(completions))]\n"


def weights_loop(device: str, steps: int = 10) -> dict:
    """Plain AdamW on a language-modelling loss: float32 master weights + bf16 autocast vs pure bf16 weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mcp_server.tiny import ensure_tiny_model, make_task

    model_dir = ensure_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = [row["solution"] for row in make_task(16)]
    batch = tokenizer(texts, return_tensors="pt", padding=True).to(device)
    out = {}
    for name, dtype in (("float32_master_bf16_autocast", torch.float32), ("pure_bfloat16", torch.bfloat16)):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
        for _ in range(steps):
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = model(**batch, labels=batch["input_ids"]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        changed = sum(int((p.detach() != before[n]).sum()) for n, p in model.named_parameters())
        out[name] = round(changed / sum(w.numel() for w in before.values()), 5)
    return {"steps": steps, "lr": LR, "fraction_changed": out}


def grpo_runs(device: str) -> dict:
    """The emitted configs, trained for real by the emitted train.py's build_trainer."""
    import importlib.util

    gpu = "H200" if device == "cuda" else "cpu"
    workspace = Path(tempfile.mkdtemp(prefix="gpu-numerics-"))
    os.environ["LLM_FINETUNING_WORKSPACE"] = str(workspace)
    (workspace / "spread_rewards.py").write_text(SPREAD)
    sys.path.insert(0, str(workspace))
    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    run = {"use_vllm": False, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
           "max_completion_length": 16, "logging_steps": 1, "report_to": "none", "save_strategy": "no",
           "gradient_checkpointing": False}
    if device == "cpu":
        run.update(use_cpu=True)

    def trainer(name, **kw):
        overrides = {**run, **kw.pop("overrides", {})}
        result = emit_grpo_config(GRPORecipeRequest(model="tiny", gpu=gpu, run_name=name, overrides=overrides,
                                                    rewards=[{"name": "spread_rewards.spread_reward"}], **kw))
        path = Path(result.train_script_path)
        spec = importlib.util.spec_from_file_location(f"train_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.build_trainer(["--config", result.config_path]), result.config

    out: dict = {"fraction_changed": {}, "clip_ratio_region_mean": {}, "configs": {}}
    for dtype in ("float32", "bfloat16"):
        tr, config = trainer(f"ft-{dtype}", overrides={"max_steps": 3, "dtype": dtype, "bf16": True})
        before = {n: p.detach().clone() for n, p in tr.model.named_parameters()}
        tr.train()
        changed = sum(int((p.detach() != before[n]).sum()) for n, p in tr.model.named_parameters())
        out["fraction_changed"][dtype] = round(changed / sum(w.numel() for w in before.values()), 5)
    for variant in ("grpo", "dapo", "gspo"):
        extra = {"mask_truncated_completions": False} if variant == "dapo" else {}  # short completions: all truncated
        tr, config = trainer(f"clip-{variant}", variant=variant, overrides={"max_steps": 4, **extra})
        tr.train()
        out["configs"][variant] = {k: config.get(k) for k in ("loss_type", "steps_per_generation", "epsilon",
                                                                "epsilon_high", "importance_sampling_level", "bf16",
                                                                "dtype")}
        out["clip_ratio_region_mean"][variant] = [round(h["clip_ratio/region_mean"], 5) for h in tr.state.log_history
                                                  if "clip_ratio/region_mean" in h]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu", action="store_true", help="smoke run on CPU (not the figures)")
    args = parser.parse_args()
    import torch

    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device; use --cpu for a smoke run"}))
        sys.exit(1)
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # the trainers' log lines: stdout carries only the JSON
        report = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                  "torch": torch.__version__, "weights_loop": weights_loop(device), "grpo": grpo_runs(device)}
    report["seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
