"""The constants the memory arithmetic rests on; references/grpo-memory.md gives the source of each."""

from __future__ import annotations

GIB = 1024**3
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
NF4_BYTES = 4.127 / 8  # NF4 with double quantization: 4 bits + ~0.127 bits of quantization constants per weight
# Full-logits GRPO loss (logits, logits/T, log-softmax kept for backward, its gradient) per element of
# batch x completion x vocab: 46 GB for 16 x 2048 x 151936 measured in open-r1#615 -> ~9.2 bytes.
LOGITS_BYTES = 9.2
# fp32 logits (TRL < 0.19 defaults to no autocast): selective_log_softmax's fp32 path keeps logits/T for logsumexp's
# backward (4 bytes), and backward holds its gradient and the gradient through the division (4 + 4).
LOGITS_BYTES_FP32 = 12.0
# CUDA context, cuBLAS/NCCL workspaces and the driver's own use: outside torch's allocator but on the GPU. Measured as
# device used - max_memory_reserved on one H200 (torch 2.11+cu130): 1.4 GiB in each of the four runs of issue 43.
CUDA_CONTEXT_GIB = 1.4
# caching-allocator slack on the per-step tensors (max_memory_reserved - max_memory_allocated): fitted on the 15
# published runs that print both (jsboige/CoursIA QLoRA probes, this project's H200 runs; references/grpo-memory.md)
ALLOCATOR_SLACK = 0.35
# The generation phase under HF generate (components.generation_peak): reserved beyond allocated, fitted on the two
# runs of issue 43 measured per phase (H200, peak statistics reset around _generate_and_score_completions):
# Qwen2.5-7B LoRA, whose peak is the prefill (54.5 GiB allocated, 57.2 reserved, 14.4 before generation: 7% of the
# transients), and Llama-3.2-1B full, whose pool grows in the decode steps (29.1 allocated, 52.2 reserved).
PREFILL_RESERVE_SLACK = 0.07
DECODE_CHURN_SEGMENTS = 6.0
VLLM_RUNTIME_GIB = 1.0  # vLLM activations, sampler and CUDA graphs inside its memory share
VLLM_SLEEP_RESIDUAL_GIB = 0.5  # what a sleeping colocated vLLM still holds
TIGHT_FRACTION = 0.10  # under 10% headroom counts as tight

EIGHT_BIT_OPTIMS = {"adamw_8bit", "paged_adamw_8bit", "adamw_bnb_8bit", "paged_lion_8bit", "lion_8bit", "ademamix_8bit"}
