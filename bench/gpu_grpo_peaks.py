"""Measured GRPO memory peaks and bf16 numerics on one GPU: ground truth for the memory planner and the recipe.

Each case runs TRL's GRPOTrainer (transformers generation, no vLLM) for a few steps in its own process, on a
randomly initialised model of a real architecture (Qwen2.5-0.5B / 1.5B / 3B shapes from their published config
values, built offline; memory depends on shapes, not on weight values). The tokenizer is a word-level one with
the architecture's full vocabulary, so logits have their real size; a random model practically never samples
EOS, so every completion runs to max_completion_length (the planner's worst case). The reward is a hash of
the text modulo 7 (not its length, which is the same for all), so groups have a reward spread and the policy
loss has a gradient.

Printed per case, as JSON lines: the settings, torch.cuda.max_memory_allocated / max_memory_reserved, and the
device's peak used memory from NVML (the nvidia-smi figure, CUDA context included); for the numerics cases, the
fraction of weights that changed after the steps.

    python bench/gpu_grpo_peaks.py [--cases a,b,...] [--out results.jsonl]   # on a GPU
    python bench/gpu_grpo_peaks.py --smoke                                    # the plumbing, tiny shapes, CPU

--emitted (issue 43): the memory plan against the device on what emit-config writes. For each of EMITTED (or
--models), emit-config for this GPU (vLLM only where it is installed), then two optimizer steps of TRL's
GRPOTrainer with exactly the emitted settings (random weights of the published architecture, a word-level tokenizer
of its full vocabulary, 512-token prompts, completions at their cap, a hash reward with spread); peak statistics are
reset around _generate_and_score_completions, so each phase has its own. Prints, per run, plan vs measured:
allocated / reserved / device used per phase, the peak phase and the second step's seconds.

    python bench/gpu_grpo_peaks.py --emitted [--models M:finetune,...] [--out results.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's mcp_server

# Published Qwen2.5 config values (hidden, layers, heads, kv heads, intermediate; vocab 151936, tied embeddings).
ARCHS = {
    "qwen2.5-0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         intermediate_size=8960, vocab_size=151936, tie_word_embeddings=True),
    "qwen2.5-3b": dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                       intermediate_size=11008, vocab_size=151936, tie_word_embeddings=True),
    "smoke": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=64, vocab_size=512, tie_word_embeddings=True),
}

BASE = dict(batch=8, num_generations=8, prompt=128, completion=512, beta=0.0, grad_ckpt=True, lora=False,
            dtype="float32", steps=2, lr=1e-6, numerics=False)
# Peaks first (the planner's ground truth), then the numerics (fp32 master weights vs pure bf16 at an RL rate).
CASES = {
    "0.5b-full": dict(arch="qwen2.5-0.5b"),
    "0.5b-full-beta": dict(arch="qwen2.5-0.5b", beta=0.04),
    "0.5b-full-nockpt-c256": dict(arch="qwen2.5-0.5b", grad_ckpt=False, completion=256),
    "1.5b-full": dict(arch="qwen2.5-1.5b"),
    "1.5b-full-c1024": dict(arch="qwen2.5-1.5b", completion=1024),
    "1.5b-lora-bf16": dict(arch="qwen2.5-1.5b", lora=True, dtype="bfloat16", completion=1024),
    "3b-lora-bf16": dict(arch="qwen2.5-3b", lora=True, dtype="bfloat16"),
    "num-fp32-master": dict(arch="qwen2.5-0.5b", numerics=True, steps=5, lr=5e-7, completion=64),
    "num-pure-bf16": dict(arch="qwen2.5-0.5b", numerics=True, steps=5, lr=5e-7, completion=64, dtype="bfloat16"),
}
SMOKE = {"smoke-full": dict(arch="smoke", completion=16, prompt=8),
         "smoke-lora": dict(arch="smoke", completion=16, prompt=8, lora=True, beta=0.04),
         "smoke-num": dict(arch="smoke", completion=8, prompt=8, numerics=True, steps=2, lr=5e-7)}


def build(arch: str, root: Path) -> Path:
    """The model (random weights, saved in bf16) and a word-level tokenizer of its vocabulary, under root/arch."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    path = root / arch
    if (path / "config.json").exists():
        return path
    dims = ARCHS[arch]
    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, dims["vocab_size"])}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    config = Qwen2Config(**dims, max_position_embeddings=4096, eos_token_id=1, pad_token_id=0, bos_token_id=1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    del model
    return path


class PeakUsed:
    """The device's used memory (what nvidia-smi shows), polled every 20 ms; the maximum seen."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle, self._nvml = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml
        except Exception:
            self._handle = None
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self):
        while self._handle is not None and not self._stop.is_set():
            self.peak = max(self.peak, self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
            time.sleep(0.02)

    def stop(self) -> int | None:
        self._stop.set()
        self._thread.join()
        return self.peak if self._handle is not None else None


def run_case(name: str, spec: dict, root: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast
    from trl import GRPOConfig, GRPOTrainer

    s = {**BASE, **spec}
    path = build(s["arch"], root)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)  # AutoTokenizer would pick Qwen2's BPE class
    vocab = ARCHS[s["arch"]]["vocab_size"]
    prompts = [" ".join(f"w{2 + (7 * i + 13 * j) % (vocab - 2)}" for j in range(s["prompt"])) for i in range(64)]
    cuda = torch.cuda.is_available()
    idle_used = None
    if cuda:
        import pynvml

        pynvml.nvmlInit()
        idle_used = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
    args = GRPOConfig(
        output_dir=str(root / f"out-{name}"), per_device_train_batch_size=s["batch"], gradient_accumulation_steps=1,
        num_generations=s["num_generations"], max_completion_length=s["completion"], max_steps=s["steps"],
        learning_rate=s["lr"], beta=s["beta"], gradient_checkpointing=s["grad_ckpt"], bf16=cuda,
        model_init_kwargs={"dtype": s["dtype"]}, report_to="none", logging_steps=1, save_strategy="no",
        use_cpu=not cuda, seed=0, temperature=1.0,
    )
    peft_config = None
    if s["lora"]:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")

    def hash_reward(completions, **kwargs):
        return [float(sum(map(ord, c)) % 7) for c in completions]

    trainer = GRPOTrainer(model=str(path), reward_funcs=hash_reward, args=args,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                          peft_config=peft_config)
    before = None
    if s["numerics"]:
        before = {n: p.detach().to("cpu", copy=True) for n, p in trainer.model.named_parameters()}
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    watcher = PeakUsed() if cuda else None
    start = time.time()
    trainer.train()
    out = {"case": name, **s, "seconds": round(time.time() - start, 1),
           "model_dtype": str(trainer.model.dtype), "trl_bf16_autocast": bool(args.bf16)}
    if cuda:
        torch.cuda.synchronize()
        gib = 2**30
        peak_used = watcher.stop()
        out.update(max_allocated_gib=round(torch.cuda.max_memory_allocated() / gib, 3),
                   max_reserved_gib=round(torch.cuda.max_memory_reserved() / gib, 3),
                   nvml_peak_used_gib=round(peak_used / gib, 3) if peak_used else None,
                   nvml_idle_used_gib=round(idle_used / gib, 3), gpu=torch.cuda.get_device_name(0))
    if before is not None:
        changed = total = 0
        for n, p in trainer.model.named_parameters():
            after = p.detach().cpu()
            changed += int((after != before[n]).sum())
            total += after.numel()
        out.update(fraction_weights_changed=changed / total, weights=total)
    return out


EMITTED = ["Qwen/Qwen2.5-1.5B-Instruct:full", "Qwen/Qwen2.5-7B-Instruct:lora", "Qwen/Qwen2.5-3B-Instruct:full",
           "meta-llama/Llama-3.2-1B-Instruct:full"]
EMITTED_SMOKE = ["tiny:full", "tiny:lora"]


def build_published(model: str, root: Path) -> Path:
    """Random weights of `model`'s published architecture (the planner's catalog), in bf16, and a word-level tokenizer
    of its full vocabulary."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from mcp_server.memory.planner import architecture_of

    path = root / model.replace("/", "--")
    if (path / "config.json").exists():
        return path
    _, arch = architecture_of(model)
    vocab = {"<pad>": 0, "<eos>": 1, **{f"w{i}": i for i in range(2, arch.vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")
    config = AutoConfig.for_model(
        arch.family, hidden_size=arch.hidden_size, intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.num_hidden_layers, num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_key_value_heads, head_dim=arch.hd, vocab_size=arch.vocab_size,
        tie_word_embeddings=arch.tie_word_embeddings, max_position_embeddings=arch.max_position_embeddings or 4096,
        eos_token_id=1, pad_token_id=0, bos_token_id=1)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model_obj = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model_obj.save_pretrained(path)
    fast.save_pretrained(path)
    return path


def emit_for(model: str, finetune: str, gpu: str, root: Path) -> dict:
    """The config emit-config emits for this GPU (use_vllm=false unless vLLM is installed), as GRPOConfig fields."""
    import importlib.util

    from mcp_server.emission.emit import emit_grpo_config
    from mcp_server.recipe.models import GRPORecipeRequest

    data = root / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"q{i}"}], "answer": "1"}) + "\n"
                            for i in range(2000)))
    overrides = {} if importlib.util.find_spec("vllm") else {"use_vllm": False}
    result = emit_grpo_config(GRPORecipeRequest(model=model, dataset=str(data), gpu=gpu, finetune=finetune,
                                                overrides=overrides, run_dir=None,
                                                run_name=f"bench-{model.split('/')[-1]}-{finetune}"))
    return dict(result.config)  # what config.yaml holds; a NOT VALID emission (one that will not fit) writes none


def run_emitted(spec: str, root: Path, smoke: bool) -> dict:
    """One emitted run: two optimizer steps with its settings; the plan and the measured peaks per phase."""
    import torch
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config

    from mcp_server.memory.models import MemoryPlanRequest
    from mcp_server.memory.planner import plan_memory

    model, finetune = spec.split(":")
    cuda = torch.cuda.is_available()
    gpu = "H200" if not cuda else torch.cuda.get_device_name(0).replace("NVIDIA ", "").split()[0]
    emitted = emit_for(model, finetune, gpu, root)
    if smoke:  # the plumbing only: small batches and lengths on CPU
        emitted.update(per_device_train_batch_size=4, gradient_accumulation_steps=2, num_generations=4,
                       max_completion_length=8)
    prompt_tokens = 16 if smoke else 512
    plan = plan_memory(MemoryPlanRequest(model=model, gpu=gpu, config=emitted, prompt_length=prompt_tokens,
                                         validate_levers=False))
    path = build_published(model, root) if model != "tiny" else None
    if path is None:
        from mcp_server.tiny import ensure_tiny_model
        path = Path(ensure_tiny_model())
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path) if model != "tiny" else None
    vocab = plan.architecture.vocab_size
    prompts = [" ".join(f"w{2 + (7 * i + 13 * j) % (vocab - 2)}" for j in range(prompt_tokens)) for i in range(64)]
    fields = set(GRPOConfig.__dataclass_fields__)
    kept = {k: v for k, v in emitted.items() if k in fields and k not in ("output_dir", "max_steps", "logging_steps",
                                                                            "save_strategy", "save_steps", "report_to",
                                                                            "bf16", "model_init_kwargs")}
    args = GRPOConfig(**kept, output_dir=str(root / f"out-{spec.replace('/', '-')}"), max_steps=2, logging_steps=1,
                      save_strategy="no", report_to="none", use_cpu=not cuda, bf16=cuda and kept.get("bf16", True),
                      model_init_kwargs={"dtype": emitted.get("dtype", "float32")})
    peft_config = get_peft_config(ModelConfig(use_peft=True, lora_r=emitted.get("lora_r", 16),
                                              lora_alpha=emitted.get("lora_alpha", 32),
                                              lora_target_modules=emitted.get("lora_target_modules"))) \
        if emitted.get("use_peft") else None

    def hash_reward(completions, **kwargs):
        return [float(sum(map(ord, str(c))) % 7) for c in completions]

    trainer = GRPOTrainer(model=str(path), reward_funcs=hash_reward, args=args, peft_config=peft_config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}),
                          **({"processing_class": tokenizer} if tokenizer is not None else {}))
    gib, phases, steps = 2**30, [], []

    def mark(name):
        if cuda:
            torch.cuda.synchronize()
            phases.append((name, torch.cuda.max_memory_allocated() / gib, torch.cuda.max_memory_reserved() / gib))
            torch.cuda.reset_peak_memory_stats()

    generate = trainer._generate_and_score_completions

    def measured_generate(*a, **k):  # TRL's generation-and-scoring phase, its own peak
        mark("training")
        out = generate(*a, **k)
        mark("generation")
        return out

    trainer._generate_and_score_completions = measured_generate

    class Steps(TrainerCallback):
        def on_step_end(self, *a, **k):
            steps.append(time.time())

    trainer.add_callback(Steps())
    watcher = PeakUsed() if cuda else None
    start = time.time()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    mark("training")
    used = watcher.stop() if watcher else None
    by_phase = {}
    for name, allocated, reserved in phases[1:]:  # the first mark is before any generation
        old = by_phase.get(name, (0.0, 0.0))
        by_phase[name] = (max(old[0], allocated), max(old[1], reserved))
    measured_peak = max(by_phase.items(), key=lambda kv: kv[1][0])[0] if by_phase else None
    return {"run": spec, "gpu": gpu, "emitted": {k: emitted.get(k) for k in (
                "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations", "use_vllm",
                "max_completion_length", "beta", "dtype")},
            "plan": {"allocated": plan.peak_allocated_gib, "reserved": plan.peak_reserved_gib,
                     "nvidia_smi": plan.peak_nvidia_smi_gib, "peak_phase": plan.peak_phase,
                     "training": plan.training_peak_gib, "generation": plan.generation_peak_gib,
                     "step_s": plan.speed.step_s},
            "measured": {"phases": {k: [round(x, 2) for x in v] for k, v in by_phase.items()},
                         "allocated": round(max((v[0] for v in by_phase.values()), default=0), 2),
                         "reserved": round(max((v[1] for v in by_phase.values()), default=0), 2),
                         "device_used": round(used / gib, 2) if used else None, "peak_phase": measured_peak,
                         "second_step_s": round(steps[1] - steps[0], 1) if len(steps) > 1 else None,
                         "seconds": round(time.time() - start, 1)}}


def print_emitted(result: dict) -> None:
    if "error" in result:
        print(f"{result.get('run')}: error {result['error'][-800:]}")
        return
    plan, got = result["plan"], result["measured"]
    used = got["device_used"]
    print(f"{result['run']} on {result['gpu']} {result['emitted']}")
    print(f"  plan     {plan['allocated']:6.1f} / {plan['reserved']:6.1f} / {plan['nvidia_smi']:6.1f} GiB "
          f"({plan['peak_phase']}; training {plan['training']:.1f}, generation {plan['generation']:.1f}); "
          f"step {plan['step_s']:.1f} s")
    print(f"  measured {got['allocated']:6.1f} / {got['reserved']:6.1f} / {used if used else float('nan'):6.1f} GiB "
          f"({got['peak_phase']}; per phase {got['phases']}); second step {got['second_step_s']} s")
    if used:
        print(f"  plan vs device {(plan['nvidia_smi'] - used) / used:+.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="Comma-separated case names (default: all).")
    parser.add_argument("--smoke", action="store_true", help="Tiny shapes on CPU: checks the script only.")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="Also append the JSON lines to this file.")
    parser.add_argument("--emitted", action="store_true", help="Plan vs measured on emit-config's runs (issue 43).")
    parser.add_argument("--models", help="With --emitted: model:finetune,... (default: issue 43's four).")
    parser.add_argument("--case-timeout", type=float, default=150, help="Seconds one case may take.")
    args = parser.parse_args()
    table = SMOKE if args.smoke else CASES
    if args.one:
        result = run_emitted(args.one, Path(args.root), args.smoke) if args.emitted else run_case(
            args.one, table[args.one], Path(args.root))
        print("RESULT " + json.dumps(result), flush=True)
        return
    root = Path(tempfile.mkdtemp(prefix="grpo-peaks-"))
    if args.emitted:
        table = {m: None for m in (args.models.split(",") if args.models else EMITTED_SMOKE if args.smoke else EMITTED)}
        args.case_timeout = max(args.case_timeout, 900)
    for name in (args.cases.split(",") if args.cases and not args.emitted else table):
        cmd = [sys.executable, __file__, "--one", name, "--root", str(root)] + (["--smoke"] if args.smoke else []) + (
            ["--emitted"] if args.emitted else [])
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.case_timeout,
                                  env={**os.environ, "TOKENIZERS_PARALLELISM": "0"})
            lines = [line[7:] for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            result = lines[-1] if lines else json.dumps({"case": name, "error": proc.stderr[-1500:]})
        except subprocess.TimeoutExpired:
            result = json.dumps({"case": name, "error": f"over {args.case_timeout} s"})
        if args.emitted:
            print_emitted(json.loads(result) | ({"run": name} if "run" not in json.loads(result) else {}))
        else:
            print(result, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(result + "\n")


if __name__ == "__main__":
    main()


# Measured on one H200 (torch 2.11+cu130, TRL 1.16.0, transformers 5.24.0, peft 0.21.2), 2026-11-30, GiB:
# case                   max_allocated  max_reserved  NVML peak used (device, CUDA context included)
# 0.5b-full                   8.00          8.74        10.13
# 0.5b-full-beta              9.83         10.57        11.96
# 0.5b-full-nockpt-c256      11.62         12.27        13.64
# 1.5b-full                  24.05         28.53        29.93
# num-fp32-master (C64)       7.97          8.95        10.31   weights changed after 5 steps at 5e-7: 99.95%
# num-pure-bf16 (C64)         4.03          4.55         5.90   weights changed after 5 steps at 5e-7:  0.81%
# (an idle device showed 0.60 GiB used; the first three peak cases ran with the length reward, whose groups had
# no spread: the backward pass and the optimizer state are the same, only the update is zero.)
