"""How fast the run rolls out and trains: decode is bound by the GPU's memory bandwidth (or its FLOPs), training
by its FLOPs."""

from __future__ import annotations

import math
from typing import NamedTuple

from mcp_server.memory import cpu_speed, generation
from mcp_server.memory.breakdown import Breakdown
from mcp_server.memory.components import gpu_layout
from mcp_server.memory.generation import weight_copies_under_autocast
from mcp_server.memory.constants import GIB, NF4_BYTES
from mcp_server.memory.models import RolloutSpeed
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings, Target

# Fitted on the four emitted runs of issue 43 measured on one H200 (second optimizer step: 24.3, 65.6, 37.6, 21.5 s;
# tests/fixtures/measured_h200.json): HF generate's host time per decode step and the training steps' share of peak
# bf16 FLOPs. Both leave each of the four within 5% of its measured step.
HF_DECODE_STEP_OVERHEAD_S = 0.014
TRAIN_MFU = 0.36


def estimate_speed(arch: Architecture, params: ParamCount, settings: RunSettings, target: Target,
                   breakdown: Breakdown) -> RolloutSpeed:
    gpu = target.gpu
    bandwidth = (gpu.sustained_bandwidth_gbs if gpu else 1000.0) * 1e9
    flops = (gpu.bf16_tflops if gpu else 100.0) * 1e12
    engine = "vllm" if settings.use_vllm else "transformers"
    seq_len, completion = settings.seq_len, settings.max_completion_length
    tp = settings.vllm_tensor_parallel_size if settings.colocated_vllm else 1
    if settings.vllm_server and breakdown.server is not None:  # `trl vllm-serve` shards over its GPUs
        tp = max(breakdown.server.gpus // max(settings.vllm_server_data_parallel_size, 1), 1)
    if settings.vllm_server:  # one server generates for every training GPU
        sequences = settings.per_device_train_batch_size * breakdown.training_gpus * settings.spg
    else:  # each GPU (or each tensor-parallel group of colocated vLLM) generates its own share
        sequences = settings.per_device_train_batch_size * settings.spg * tp
    kv_per_token = 2 * arch.num_hidden_layers * arch.kv_dim * 2
    if settings.use_vllm:
        concurrent = max(1, min(sequences, int(breakdown.vllm_kv_gib * GIB * tp / (seq_len * kv_per_token)))) \
            if breakdown.vllm_kv_gib > 0 else 1
    else:
        concurrent = sequences
    waves = math.ceil(sequences / concurrent)
    # bytes read per decode step: the weights touched (MoE: the experts some token in the batch routes to) + the KV
    if arch.is_moe:
        routed_fraction = 1 - (1 - arch.num_experts_per_tok / arch.num_experts) ** concurrent
        touched = params.total - params.experts * (1 - routed_fraction)
    else:
        touched = params.active
    weight_bytes = touched * (NF4_BYTES if (settings.finetune == "qlora" and not settings.use_vllm) else 2) / tp
    if not settings.use_vllm and weight_copies_under_autocast(params, settings, gpu_layout(settings, target)):
        # autocast over fp32 weights: each decode step's forward reads every fp32 linear weight, writes its 16-bit
        # copy and reads that (the autocast cache is cleared when the forward's autocast context exits): 8 bytes
        weight_bytes += params.linear * (8 - 2)
    if not settings.use_vllm:  # HF generate's DynamicCache: fp32 keys under autocast over fp32 weights
        kv_per_token = generation.generation_kv_cache(arch, settings, gpu_layout(settings, target)) / max(
            sequences * seq_len, 1)
    kv_bytes = concurrent * (settings.prompt_length + completion / 2) * kv_per_token
    efficiency = 1.0 if settings.use_vllm else 0.5  # HF generate: no paged attention, no CUDA graphs
    bandwidth_time = (weight_bytes + kv_bytes / tp) / (bandwidth * efficiency)  # each GPU reads its shard at once
    compute_time = 2 * params.active * concurrent / (flops * tp * 0.5)
    # per decode step: vLLM's scheduler with CUDA graphs; HF generate's host time (eager kernel launches, the logits
    # processors and sampling, and the stopping check `unfinished_sequences.max() == 0`, a device-to-host sync every
    # step, so the Python dispatch is not hidden behind the GPU): HF_DECODE_STEP_OVERHEAD_S, fitted on issue 43's
    # four measured H200 steps
    launch_overhead = 0.0005 if settings.use_vllm else HF_DECODE_STEP_OVERHEAD_S
    decode_step = max(bandwidth_time, compute_time) + launch_overhead
    prefill = 2 * params.active * sequences * settings.prompt_length / (flops * tp * 0.4)
    rollout_s = waves * completion * decode_step + prefill
    tokens_per_s = sequences * completion / rollout_s if rollout_s > 0 else 0.0
    # training: forward + backward (4 x params per token under LoRA: no weight gradients of the base; 6 for a full
    # fine-tune) on every micro-step, + 2 for gradient checkpointing's recompute of each layer's forward in backward,
    # + 2 for the reference forward (beta != 0: _get_per_token_logps_and_entropies on ref_model or the adapter-free
    # base) and + 2 for the old log-probs when generation and optimizer steps are misaligned; at TRAIN_MFU of peak
    scoring_per_token = scoring_flops_per_token(params, settings)
    flops_per_token = training_flops_per_token(params, settings)
    train_tokens = settings.per_device_train_batch_size * seq_len * settings.gradient_accumulation_steps
    train_s = train_tokens * flops_per_token / (flops * TRAIN_MFU)
    step_s = rollout_s * (settings.gradient_accumulation_steps / settings.spg) + train_s
    total_hours = step_s * settings.max_steps / 3600 if settings.max_steps else None
    generation_share = rollout_s / step_s if step_s else 0
    scoring_s = train_tokens * scoring_per_token / (flops * TRAIN_MFU)
    capped = _at_cap(settings, step_s, rollout_s * (settings.gradient_accumulation_steps / settings.spg) + scoring_s)
    return RolloutSpeed(
        engine=engine, bandwidth_gbs=bandwidth / 1e9, sequences_per_round=sequences, concurrent_sequences=concurrent,
        decode_step_ms=round(decode_step * 1000, 3), rollout_tokens_per_s=round(tokens_per_s, 1),
        rollout_s_per_step=round(rollout_s, 2), train_s_per_step=round(train_s, 2), step_s=round(step_s, 2),
        total_hours=round(total_hours, 2) if total_hours is not None else None, **capped,
        verdict=_verdict(step_s, total_hours, generation_share, settings, engine, target) + _cap_text(capped),
    )


def _at_cap(settings: RunSettings, step_s: float, extra_round_s: float) -> dict:
    """DAPO's dynamic sampling: each extra round is one more generation batch, generated and scored (the reference
    and old log-prob forwards) by TRL as the first; at the cap every generation batch of the step takes them all."""
    rounds = settings.dynamic_sampling_rounds
    if not rounds:
        return {}
    cap_s = step_s + rounds * extra_round_s
    hours = round(cap_s * settings.max_steps / 3600, 2) if settings.max_steps else None
    return {"dynamic_sampling_rounds": rounds, "step_s_at_cap": round(cap_s, 2), "total_hours_at_cap": hours}


def _cap_text(capped: dict) -> str:
    if not capped:
        return ""
    rounds = capped["dynamic_sampling_rounds"]
    return (f"; dynamic sampling: up to {rounds} extra generation round{'s' if rounds > 1 else ''} per generation "
            f"batch, {capped['step_s_at_cap']:.0f} s per step when every batch takes them all (the zero-spread share "
            "decides)")


def training_flops_per_token(params: ParamCount, settings: RunSettings) -> float:
    """Forward + backward FLOPs per token of one micro-step (the comment in estimate_speed says which terms)."""
    flops_per_token = (4 if settings.peft else 6) * params.active + (
        2 * params.active if settings.gradient_checkpointing else 0)
    return flops_per_token + scoring_flops_per_token(params, settings)


def scoring_flops_per_token(params: ParamCount, settings: RunSettings) -> float:
    """The no-grad scoring forwards per token: the reference's (beta != 0) and the old log-probs' (misaligned)."""
    scoring = 2 * params.active if settings.beta != 0 else 0
    if settings.num_iterations > 1 or settings.spg > settings.gradient_accumulation_steps:
        scoring += 2 * params.active
    return scoring


class CpuStep(NamedTuple):
    rollout_s: float  # generation per optimizer step
    train_s: float
    step_s: float
    basis: str  # what the figure stands on, for people


def estimate_cpu_step(arch: Architecture, params: ParamCount, settings: RunSettings,
                      cpu: cpu_speed.CpuThroughput) -> CpuStep:
    """An optimizer step of a CPU-target run (one process, transformers generate in float32), every completion
    running to max_completion_length: the generation rounds it needs and its forward/backward passes, at the rates
    `cpu` measured (cpu_speed)."""
    sequences = settings.per_device_train_batch_size * settings.spg  # one generate call per generation round
    completion = settings.max_completion_length
    context = settings.prompt_length + completion / 2
    step = cpu_speed.decode_step_s(params.active, arch.num_hidden_layers, sequences, cpu, arch.hidden_size, context)
    prefill = 2 * params.active * sequences * settings.prompt_length / (cpu.flops * cpu_speed.TRAIN_EFFICIENCY)
    rollout = (completion * step + prefill) * settings.gradient_accumulation_steps / settings.spg
    micro = settings.gradient_accumulation_steps
    training = cpu_speed.train_s(training_flops_per_token(params, settings),
                                 settings.per_device_train_batch_size * settings.seq_len * micro,
                                 arch.num_hidden_layers, micro, cpu, arch.hidden_size)
    basis = (f"{sequences} completions of up to {completion} tokens per generation round and "
             f"{settings.per_device_train_batch_size * micro} sequences trained, at {cpu.describe()}")
    return CpuStep(round(rollout, 1), round(training, 1), round(rollout + training, 1), basis)


def _verdict(step_s: float, total_hours: float | None, generation_share: float, settings: RunSettings,
             engine: str, target: Target) -> str:
    if step_s > 600:
        verdict = f"slow: {step_s/60:.0f} min per step"
    elif step_s > 120:
        verdict = f"workable: {step_s/60:.1f} min per step"
    else:
        verdict = f"fast enough: {step_s:.0f} s per step"
    if total_hours is not None:
        verdict += f", {total_hours:.1f} h for {settings.max_steps} steps"
    verdict += f"; generation is {generation_share:.0%} of the step"
    if engine == "transformers" and generation_share > 0.5:
        verdict += " (use_vllm=true would cut it several-fold)"
    if target.gpu and target.gpu.name == "DGX Spark":
        verdict += "; planned at 186 GB/s sustained, not the 273 GB/s spec"
    return verdict
