"""The size-class rules of thumb (~3B full on 24 GB with bf16 weights, ~32B on an H200, ~70B QLoRA on an H200),
recomputed by the planner for this model as a cross-check of its arithmetic."""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.gpus import lookup_gpu
from mcp_server.memory.breakdown import compute_breakdown
from mcp_server.memory.levers import just_enough_vllm
from mcp_server.memory.models import SizeClassAnchor
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings, Target

# the anchors' scenario: one GPU, colocated vLLM, bf16, the run's lengths, 8 completions per micro-step
_ANCHOR_RUN = {FIELD.use_vllm: True, FIELD.vllm_mode: "colocate", "zero_stage": 0, "fsdp": False,
               "offload_optimizer": False,
               "strategy": "single",
               FIELD.vllm_tensor_parallel_size: 1, FIELD.dtype: "bfloat16", "mixed_precision": True,
               FIELD.per_device_train_batch_size: 8, FIELD.num_generations: 8, FIELD.gradient_accumulation_steps: 1,
               FIELD.steps_per_generation: None, FIELD.beta: 0.0, FIELD.gradient_checkpointing: True,
               FIELD.optim: "adamw_torch_fused"}


def size_class_anchor(arch: Architecture, params: ParamCount, settings: RunSettings) -> SizeClassAnchor:
    billions = params.total / 1e9

    def peak_on(gpu_name: str, update: dict) -> tuple[float, float]:
        """(peak GiB, capacity GiB) of the anchor's scenario with `update` on one GPU of this type."""
        gpu = lookup_gpu(gpu_name)
        target = Target(gpu_name=gpu.name, capacity_gib=gpu.memory_gib, num_gpus=1, gpu=gpu)
        run = settings.updated({**_ANCHOR_RUN, **update})
        run = run.updated({FIELD.vllm_gpu_memory_utilization: just_enough_vllm(arch, params, run, gpu.memory_gib)})
        return compute_breakdown(arch, params, run, target).peak, gpu.memory_gib

    if billions <= 3.5:
        all3 = {"finetune": "full", FIELD.vllm_enable_sleep_mode: True, FIELD.optim: "adamw_8bit",
                FIELD.gradient_checkpointing: True}
        peak_all, capacity = peak_on("RTX 4090", all3)
        drops = {name: peak_on("RTX 4090", {**all3, **undo})[0] for name, undo in (
            ("sleep mode", {FIELD.vllm_enable_sleep_mode: False}), ("8-bit AdamW", {FIELD.optim: "adamw_torch_fused"}),
            ("gradient checkpointing", {FIELD.gradient_checkpointing: False}))}
        needed = [n for n, p in drops.items() if p > capacity]
        lora, _ = peak_on("RTX 4090", {"finetune": "lora", FIELD.vllm_enable_sleep_mode: False})
        fp32, _ = peak_on("RTX 4090", {**all3, FIELD.dtype: "float32"})  # the recipe's float32 master weights
        check = (f"this model, full GRPO with colocated vLLM on a 24 GB GPU ({capacity:.1f} GiB), bf16 weights: "
                 f"{peak_all:.1f} GiB with all three; without " + ", ".join(f"{n} {p:.1f}" for n, p in drops.items())
                 + f"; needed here: {', '.join(needed) or 'none of them'}; the recipe's float32 master weights with "
                 f"all three: {fp32:.1f} GiB; LoRA without sleep mode or 8-bit AdamW: {lora:.1f} GiB")
        return SizeClassAnchor(size_class="small", statement="A small model (<= ~3B) fits a 24 GB GPU as a full "
                               "fine-tune only with bf16 weights (dtype: bfloat16, which the recipe allows for a full "
                               "fine-tune only under DeepSpeed) plus vLLM sleep mode + 8-bit AdamW + gradient "
                               "checkpointing together; the recipe's float32 master weights need more (a ~3B then "
                               "does not fit: planner_check has this model's figure); as LoRA it fits without sleep "
                               "mode or 8-bit AdamW.",
                               planner_check=check, consistent=peak_all <= capacity and lora <= capacity)
    if 25 <= billions <= 45:
        lora = {"finetune": "lora", FIELD.vllm_enable_sleep_mode: True}
        (p_h100, c_h100), (p_h200, c_h200) = peak_on("H100", lora), peak_on("H200", lora)
        return SizeClassAnchor(size_class="large_32b", statement="~32B needs an H200-class GPU (141 GB) for "
                               "single-GPU GRPO.",
                               planner_check=f"LoRA + colocated vLLM with sleep mode: H100 {p_h100:.1f} of "
                               f"{c_h100:.1f} GiB, H200 {p_h200:.1f} of {c_h200:.1f} GiB",
                               consistent=p_h100 > c_h100 and p_h200 <= c_h200)
    if 60 <= billions <= 80:
        qlora = {"finetune": "qlora", FIELD.vllm_enable_sleep_mode: True, FIELD.gradient_checkpointing: True}
        lora = {**qlora, "finetune": "lora"}
        (p_h200, c_h200), (p_b200, c_b200) = peak_on("H200", qlora), peak_on("B200", lora)
        return SizeClassAnchor(size_class="xlarge_70b", statement="~70B fits one GPU only as QLoRA (an H200 holds "
                               "it: TRL starts the colocated vLLM 4-bit too); LoRA over a bf16 base needs several "
                               "GPUs, even B200s.",
                               planner_check=f"QLoRA + colocated 4-bit vLLM with sleep mode: H200 {p_h200:.1f} of "
                               f"{c_h200:.1f} GiB; LoRA + bf16 vLLM with sleep mode: B200 {p_b200:.1f} of "
                               f"{c_b200:.1f} GiB",
                               consistent=p_h200 <= c_h200 and p_b200 > c_b200)
    size = "medium" if billions < 25 else ("huge" if billions > 80 else "large_32b")
    return SizeClassAnchor(size_class=size, statement="No anchor for this size; between the ~3B, ~32B and ~70B "
                           "anchors the plan's own arithmetic decides.", planner_check="n/a", consistent=None)
