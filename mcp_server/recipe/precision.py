"""The one rule for weight precision: a full fine-tune keeps float32 master weights; bf16 weights only under LoRA.

bfloat16 has 8 significant bits. An update smaller than half a unit in the last place of a weight is rounded
away: for a weight of magnitude 0.02 (a typical initialiser scale) that is 2**-14 = 6.1e-5. AdamW moves each
weight by about the learning rate per step, so at GRPO's full fine-tune rates (1e-7 to 1e-6) a model whose
weights and optimizer state are bf16 (`dtype: bfloat16`, no fp32 master copy) barely changes while its loss curve
looks normal. TRL loads in float32 unless told otherwise and `bf16: true` runs the matmuls under bf16 autocast:
that is the emitted full fine-tune. DeepSpeed ZeRO keeps its own fp32 master copy, and accelerate upcasts the
trainable weights to fp32 under FSDP with mixed precision, so a bf16 load is safe there: judged from the config's
`deepspeed`/`fsdp` or the launch's strategy (`fp32_master_weights`). LoRA/QLoRA train float32 adapters (PEFT
upcasts them) over a frozen base, so the base may be bf16.
A CPU target is float32 throughout, LoRA included: with `bf16: false` nothing autocasts, so an fp16 base would run
every matmul in fp16 on the CPU (slow, and fp16's range without loss scaling) beside float32 adapters.

The emitter (`weights_dtype`), the validator (`rules.rule_full_finetune_precision`) and the memory planner's
bf16-weights lever all follow this module.
"""

from __future__ import annotations

import math

from mcp_server.config.grpo_fields import GRPOView

TYPICAL_WEIGHT = 0.02  # Qwen2/Llama initializer_range: the magnitude of most weights of a trained LLM too
BF16_MANTISSA_BITS = 8  # significant bits, the implicit one included


def bf16_half_ulp(magnitude: float) -> float:
    """Half a bf16 unit in the last place at `magnitude`: the smallest update that is not rounded away."""
    return 2.0 ** (math.floor(math.log2(abs(magnitude))) - BF16_MANTISSA_BITS)


# Learning rates below this leave a weight of TYPICAL_WEIGHT unchanged in pure bf16 (AdamW steps ~ lr).
BF16_SWALLOW_LR = bf16_half_ulp(TYPICAL_WEIGHT)


def is_full_finetune(values: dict) -> bool:
    """No adapter: every weight is trained (and has AdamW state)."""
    given = GRPOView.given(values)
    return not (given.use_peft or given.load_in_4bit or given.load_in_8bit)


# Launch strategies (launchers.machine) whose optimizer steps float32 master weights however the model was loaded.
ZERO_STRATEGIES = ("zero1", "zero2", "zero3")


def fp32_master_weights(values: dict, strategy: str | None = None) -> str | None:
    """What keeps float32 master weights under a half-precision load, or None: the distributed layer, read from the
    config (`deepspeed`, `fsdp`) or the launch's `strategy` (config.target.Target.strategy).

    - DeepSpeed (a `deepspeed` config, or a zero1/zero2/zero3 launch): ZeRO's optimizer steps float32 partitions
      it creates from the 16-bit weights (accelerate/accelerator.py, the FSDP branch of prepare: "we follow
      DeepSpeed's strategy to hold the parameters in full precision ... _create_fp32_partitions").
    - FSDP with mixed precision (bf16 or fp16 on: TrainingArguments sets mixed_precision from them,
      training_args.py:1614-1618): accelerate upcasts every trainable parameter to float32 before sharding
      (accelerate/utils/fsdp_utils.py, "Upcast to fp32 master weights"; FSDP1: accelerator.py "upcasting").
    """
    given = GRPOView.given(values)
    if given.deepspeed or strategy in ZERO_STRATEGIES:
        return "DeepSpeed ZeRO (float32 master partitions)"
    mixed = bool(given.fp16) or given.bf16 is not False  # TRL: bf16 defaults to True unless fp16 (base_config.py)
    if (given.fsdp or strategy == "fsdp") and mixed:
        return "FSDP under mixed precision (accelerate upcasts trainable weights to float32)"
    return None


def bf16_weights_allowed(values: dict, strategy: str | None = None) -> bool:
    """Whether the weights may be loaded in bf16: under LoRA/QLoRA, or when the distributed layer keeps fp32 master
    weights (fp32_master_weights)."""
    return not is_full_finetune(values) or fp32_master_weights(values, strategy) is not None


def weights_dtype(finetune: str, bf16: bool, cpu: bool = False) -> str:
    """The `dtype` to load the model in: float32 on a CPU target and for a full fine-tune (fp32 master weights, bf16
    or fp16 autocast); for the frozen base of LoRA/QLoRA on a GPU bfloat16, or float16 on a GPU without bf16."""
    if finetune in ("lora", "qlora") and not cpu:
        return "bfloat16" if bf16 else "float16"
    return "float32"


CPU_DTYPE_REASON = ("CPU target: float32 throughout (the base too: with bf16 false nothing autocasts, and "
                    "half-precision weights would run every matmul in fp16 or bf16 on the CPU)")


def dtype_reason(finetune: str, bf16: bool, cpu: bool = False) -> str:
    """Why `weights_dtype` chose what it did, for the emitted config's comment."""
    if cpu:
        return CPU_DTYPE_REASON
    if finetune == "full":
        return (f"full fine-tune: float32 master weights ({'bf16' if bf16 else 'fp16'} autocast computes); pure bf16 "
                f"weights round away AdamW steps below {BF16_SWALLOW_LR:.1e} at |w|={TYPICAL_WEIGHT}, i.e. every GRPO "
                "learning rate")
    if bf16:
        return "LoRA: the frozen base in bf16 halves its memory; the adapters train in float32"
    return "LoRA on a GPU without bf16: the frozen base in fp16 halves its memory; the adapters train in float32"


# The fp16 case for GPUs without bf16 (T4, V100): fp32 matmuls run on the CUDA cores, fp16 on the tensor cores (T4:
# 8.1 vs 65 TFLOPS, NVIDIA's datasheet), and arXiv 2510.26788 ("Defeating the Training-Inference Mismatch via FP16")
# finds fp16 more stable than bf16 for RL fine-tuning: its 10 mantissa bits (bf16: 7) shrink the mismatch between
# the sampler's and the trainer's log-probs. Autocast with loss scaling keeps the small values in range.
FP16_REASON = ("fp16 mixed precision (autocast with loss scaling) over float32 master weights: this GPU has no bf16, "
               "fp32 matmuls run ~8x slower than fp16 on its tensor cores, and arXiv 2510.26788 finds fp16 more "
               "stable than bf16 for RL fine-tuning (more mantissa bits, a smaller sampler/trainer mismatch)")
