"""One function per memory component of a GRPO run, in bytes per training GPU, each with a note on how it was
computed. breakdown.py adds them up into the training and generation peaks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from mcp_server.memory.constants import (
    ALLOCATOR_SLACK,
    CUDA_CONTEXT_GIB,
    DTYPE_BYTES,
    EIGHT_BIT_OPTIMS,
    GIB,
    LOGITS_BYTES,
    LOGITS_BYTES_FP32,
    NF4_BYTES,
    VLLM_RUNTIME_GIB,
)
from mcp_server.memory.models import ServerGPUPlan
from mcp_server.memory.params import Architecture, ParamCount, linear_modules, lora_trainable_params
from mcp_server.memory.settings import RunSettings, Target


class Part(NamedTuple):
    """A component's bytes and how they were computed."""

    bytes: float
    note: str = ""


@dataclass(frozen=True)
class Layout:
    """How the run spreads over the GPUs, and the byte widths every component uses."""

    training_gpus: int
    server_gpus: int  # GPUs running `trl vllm-serve` (server mode), not training
    zero_stage: int  # the DeepSpeed ZeRO stage in effect (0 under FSDP, which shards without DeepSpeed)
    fully_sharded: bool  # ZeRO-3 or FSDP: weights sharded over the training GPUs, layers gathered on use
    weight_bytes: int  # per weight in the load dtype
    activation_bytes: int  # per activation element (16-bit under mixed precision)
    problems: tuple[str, ...] = ()

    @property
    def weight_shards(self) -> int:
        return self.training_gpus if self.fully_sharded else 1


def gpu_layout(settings: RunSettings, target: Target) -> Layout:
    problems = []
    server_gpus = settings.server_gpus
    training_gpus = target.num_gpus - server_gpus  # below 1 is a problem to name, not a world to round up
    if training_gpus < 1:
        problems.append(f"vLLM server mode needs at least {server_gpus + 1} GPUs ({server_gpus} for the server, "
                        f"1 to train); there are {target.num_gpus}")
        training_gpus = 1
    weight_bytes = DTYPE_BYTES[settings.dtype]
    return Layout(
        training_gpus=training_gpus, server_gpus=server_gpus,
        zero_stage=settings.zero_stage if not settings.fsdp else 0,
        fully_sharded=settings.zero_stage == 3 or settings.fsdp, weight_bytes=weight_bytes,
        activation_bytes=2 if (settings.mixed_precision or weight_bytes == 2) else 4, problems=tuple(problems),
    )


# --------------------------------------------------------------------------- training state
def trainable_params(arch: Architecture, params: ParamCount, settings: RunSettings) -> int:
    """Parameters the optimizer updates: the LoRA adapters, or every parameter for a full fine-tune."""
    if settings.peft:
        return lora_trainable_params(arch, settings.lora_r, settings.lora_target_modules)
    return params.total


def _adapter_bytes(layout: Layout) -> int:
    # PEFT upcasts adapters to fp32 (TRL keeps them in the load dtype under ZeRO-3)
    return 4 if layout.zero_stage != 3 else layout.weight_bytes


def weights(params: ParamCount, settings: RunSettings, layout: Layout, trainable: int) -> Part:
    """The policy's weights (+ LoRA adapters), this GPU's shard under ZeRO-3/FSDP."""
    total = params.total
    if settings.finetune == "qlora":
        base = params.linear * NF4_BYTES + (total - params.linear) * layout.weight_bytes
        note = f"{params.linear/1e9:.2f}B linear weights in NF4 + the rest in {settings.dtype}"
    elif layout.zero_stage >= 1 and not settings.peft:
        base = total * 2  # DeepSpeed holds bf16 weights; the fp32 master copy sits in the optimizer state
        note = "bf16 weights (DeepSpeed)"
    else:
        base = total * layout.weight_bytes
        note = f"{total/1e9:.2f}B params in {settings.dtype}"
    if settings.peft:
        note += f" + {trainable/1e6:.1f}M LoRA params (r={settings.lora_r})"
        return Part(base / layout.weight_shards + trainable * _adapter_bytes(layout), note)
    return Part(base / layout.weight_shards, note)


def gradients(settings: RunSettings, layout: Layout, trainable: int) -> float:
    if settings.peft:
        return trainable * _adapter_bytes(layout)
    gradient_bytes = 2 if layout.zero_stage >= 1 else layout.weight_bytes
    sharded_over = layout.training_gpus if (layout.zero_stage >= 2 or layout.weight_shards > 1) else 1
    return trainable * gradient_bytes / sharded_over


def optimizer_state(settings: RunSettings, layout: Layout, trainable: int) -> Part:
    state_bytes = _adapter_bytes(layout) if settings.peft else layout.weight_bytes
    optim = settings.optim.lower()
    if optim in EIGHT_BIT_OPTIMS:
        per_param, note = 2.0, "8-bit Adam: two 1-byte states"
    elif optim.startswith("adafactor"):
        per_param, note = 0.1 * state_bytes, "Adafactor: factored second moment"
    elif optim.startswith("sgd"):
        per_param, note = 0.0, "SGD without momentum"
    elif "lion" in optim:
        per_param, note = float(state_bytes), "Lion: one state"
    else:
        width = "fp32" if state_bytes == 4 else "16-bit"
        per_param, note = 2.0 * state_bytes, f"AdamW: two states in the {width} param dtype"
    if settings.offload_optimizer and layout.zero_stage >= 1:
        return Part(0.0, f"DeepSpeed ZeRO-{layout.zero_stage} offloads the optimizer state (and fp32 master weights) "
                    "to CPU memory")
    if layout.zero_stage >= 1 and not settings.peft:
        per_param = (per_param if optim in EIGHT_BIT_OPTIMS else 8.0) + 4.0  # fp32 master + states
        note = (f"DeepSpeed ZeRO-{layout.zero_stage}: fp32 master weights + Adam states, sharded over "
                f"{layout.training_gpus} GPUs")
        state = trainable * per_param / layout.training_gpus
    else:
        state = trainable * per_param / layout.weight_shards
    if "paged" in optim:
        note += " (paged: can spill to CPU under pressure)"
    return Part(state, note)


def reference_model(params: ParamCount, settings: RunSettings, layout: Layout) -> Part:
    """A frozen copy of the policy for the KL term, held only when beta != 0 and not under LoRA."""
    if settings.beta != 0 and not settings.peft:
        reference_bytes = 2 if layout.zero_stage >= 1 else layout.weight_bytes
        sharded_over = layout.training_gpus if layout.fully_sharded else 1
        return Part(params.total * reference_bytes / sharded_over, f"beta={settings.beta}: a frozen copy of the policy")
    if settings.beta != 0:
        return Part(0.0, "LoRA: the reference is the base with adapters disabled, no copy")
    return Part(0.0)


def gathered_layers(arch: Architecture, params: ParamCount, layout: Layout) -> float:
    """ZeRO-3/FSDP: the layer gathered for compute and the one prefetched, in 16 bits."""
    if layout.fully_sharded:
        return 2 * (params.attention + params.mlp) / arch.num_hidden_layers * 2
    return 0.0


# --------------------------------------------------------------------------- one micro-batch
def _activation_bytes_per_token_layer(arch: Architecture, settings: RunSettings, act: int) -> float:
    """Bytes one token keeps for backward in one decoder layer (flash/sdpa attention)."""
    h, q, kv = arch.hidden_size, arch.q_dim, arch.kv_dim
    norms = (4 if arch.family in ("gemma2", "gemma3_text") else 2) * (4 * h + act * h)  # fp32 upcast + normed output
    attention = act * (3 * q + 3 * kv) + 4 * arch.num_attention_heads  # q/k/v, rotated q/k, output, logsumexp
    if arch.is_moe:
        k, w = arch.num_experts_per_tok, arch.expert_width
        mlp = act * k * (4 * w + h) + 4 * arch.num_experts  # per routed expert: gate, up, act, product, input copy
    else:
        mlp = act * 4 * arch.intermediate_size  # gate, up, activation, product
    lora = 0.0
    if settings.peft and settings.lora_dropout > 0:  # dropout makes a copy (and a mask) of each targeted module's input
        modules = linear_modules(arch)
        targets = settings.lora_target_modules
        names = list(modules) if targets == "all-linear" else [
            n for n in ([targets] if isinstance(targets, str) else targets) if n in modules]
        lora = sum((act + 1) * modules[n][0] for n in names)
    return norms + attention + mlp + lora


def activations(arch: Architecture, settings: RunSettings, layout: Layout) -> Part:
    """What one micro-batch keeps for backward."""
    batch, seq_len, layers, hidden = (settings.per_device_train_batch_size, settings.seq_len,
                                      arch.num_hidden_layers, arch.hidden_size)
    act = layout.activation_bytes
    tokens = batch * seq_len
    per_layer = _activation_bytes_per_token_layer(arch, settings, act)
    if settings.attn_implementation == "eager":
        per_layer += arch.num_attention_heads * seq_len * (2 * act + 1)
    if settings.gradient_checkpointing:
        return Part(tokens * (layers * hidden * act + per_layer) + tokens * hidden * 4,
                    f"checkpointed: {layers} layer inputs + one layer recomputed, {batch} x {seq_len} tokens")
    return Part(tokens * (layers * per_layer) + tokens * hidden * 4, f"all layers kept, {batch} x {seq_len} tokens")


FUSED_TOKEN_TILE, FUSED_VOCAB_TILE = 4096, 32768  # trl/kernels/chunked_logprob.py: TOKEN_CHUNK_SIZE x chunk_size


def logits(arch: Architecture, settings: RunSettings, layout: Layout) -> Part:
    """The completion tokens' logits and what the loss keeps of them for backward."""
    completion, batch = settings.max_completion_length, settings.per_device_train_batch_size
    tokens = batch * completion
    if settings.fused_logits:
        # TRL's fused LM head: one [4096 x 32768] tile in the compute dtype (forward and backward), the hidden
        # states' gradient in fp32 and, when the LM head trains (full fine-tune), its gradient accumulated in fp32
        tile = min(tokens, FUSED_TOKEN_TILE) * min(arch.vocab_size, FUSED_VOCAB_TILE) * layout.activation_bytes * 2
        head_grad = 0 if settings.peft else arch.vocab_size * arch.hidden_size * 4 / layout.weight_shards
        return Part(tile + tokens * arch.hidden_size * 4 + head_grad,
                    "TRL's fused LM head: log-probs in [4096 x 32768] tiles, fp32 hidden-state gradient"
                    + ("" if settings.peft else " and fp32 LM-head gradient"))
    if settings.use_liger_kernel:
        return Part(completion * arch.vocab_size * 6.0,  # one tile of a sequence at a time
                    "chunked log-probs (Liger): one tile at a time")
    # 9.2 bytes per element with 16-bit logits (open-r1#615); fp32 logits (no autocast) from TRL's fp32 path
    per_element = LOGITS_BYTES if settings.logits_dtype_bytes == 2 else LOGITS_BYTES_FP32
    return Part(tokens * arch.vocab_size * per_element,
                f"full logits {batch} x {completion} x {arch.vocab_size} in {8 * settings.logits_dtype_bytes}-bit "
                f"(~{per_element:.1f} bytes each with the log-softmax and backward)")


def reference_logits(arch: Architecture, settings: RunSettings) -> float:
    """Full logits of the no-grad forwards (reference / old log-probs) after generation, when not fused."""
    if settings.fused_logits or settings.use_liger_kernel or (settings.beta == 0 and settings.num_iterations == 1):
        return 0.0
    return settings.per_device_train_batch_size * settings.max_completion_length * arch.vocab_size * \
        settings.logits_dtype_bytes * 2  # the logits and their log-softmax, no backward


def gradient_temporary(arch: Architecture, params: ParamCount, settings: RunSettings, layout: Layout) -> Part:
    """A full fine-tune's largest fresh gradient, alive beside the one it is added to: autograd adds a parameter's
    new gradient into an existing `.grad` out of place. That happens at the embedding of a tied model (the LM head's
    gradient is there first) and, with accumulation, at every parameter from the second micro-step; the embedding
    is the largest."""
    if settings.peft or not (arch.tie_word_embeddings or settings.gradient_accumulation_steps > 1):
        return Part(0.0)
    gradient_bytes = 2 if layout.zero_stage >= 1 else layout.weight_bytes
    return Part(params.embedding * gradient_bytes, "the embedding's fresh gradient beside the accumulated one")


def autocast_weight_copies(arch: Architecture, params: ParamCount, settings: RunSettings, layout: Layout) -> Part:
    """fp32 weights under accelerate's bf16 autocast: each matmul casts its weight to 16 bits and autograd keeps the
    copy for backward: the LM head's always, every layer's without gradient checkpointing (with it, one layer's at a
    time). DeepSpeed and FSDP hold or gather 16-bit weights themselves; QLoRA's base is 4-bit."""
    sharded = layout.zero_stage >= 1 or settings.fsdp
    if not (settings.mixed_precision and layout.weight_bytes == 4) or settings.finetune == "qlora" or sharded:
        return Part(0.0)
    head = params.embedding if arch.tie_word_embeddings else params.lm_head
    layers = params.linear if not settings.gradient_checkpointing else params.linear / arch.num_hidden_layers
    return Part((head + layers) * 2, "16-bit copies of the fp32 weights autocast casts and autograd keeps for "
                "backward")


def peft_sync_gather(params: ParamCount, settings: RunSettings, layout: Layout, weights: Part) -> Part:
    """LoRA under DeepSpeed ZeRO-3 with vLLM: to merge the adapters before sending the weights to vLLM, TRL gathers
    every parameter at once on every training GPU (trl/generation/vllm_generation.py, _iter_named_params); full
    fine-tunes and FSDP gather one parameter or module at a time."""
    if not (settings.peft and layout.zero_stage == 3 and (settings.colocated_vllm or settings.vllm_server)):
        return Part(0.0)
    return Part(weights.bytes * (layout.weight_shards - 1), "LoRA under ZeRO-3: the whole model gathered to merge the "
                "adapters for the vLLM weight sync")


class ColocatedVLLM(NamedTuple):
    total: float  # its whole share of the GPU (what it would need, when the share is too small)
    weights: float
    kv_cache: float
    problem: str | None


def colocated_vllm_weight_bytes(params: ParamCount, settings: RunSettings) -> float:
    """The colocated vLLM's weights on one GPU. TRL 1.16 starts it with quantization="bitsandbytes" when the policy
    has 4-bit layers (trl/generation/vllm_generation.py): vLLM quantizes the same linear layers in flight (NF4), the
    embeddings and LM head stay bf16. Otherwise bf16 weights. Both over vllm_tensor_parallel_size."""
    if settings.finetune == "qlora":
        weights = params.linear * NF4_BYTES + (params.total - params.linear) * 2
    else:
        weights = params.total * 2
    return weights / settings.vllm_tensor_parallel_size


def vllm_max_model_len(arch: Architecture, settings: RunSettings) -> int:
    """The context vLLM is started with: vllm_max_model_length, else (TRL passes None) the model's own context."""
    return settings.vllm_max_model_length or arch.max_position_embeddings or settings.seq_len


def one_sequence_kv_bytes(arch: Architecture, settings: RunSettings) -> float:
    """KV cache of one sequence of vLLM's max_model_len on one GPU (bf16 keys and values)."""
    per_token = 2 * arch.num_hidden_layers * arch.kv_dim * 2 / settings.vllm_tensor_parallel_size
    return per_token * vllm_max_model_len(arch, settings)


def colocated_vllm(params: ParamCount, settings: RunSettings, target: Target,
                   arch: Architecture | None = None) -> ColocatedVLLM:
    """vLLM inside the trainer: vllm_gpu_memory_utilization of the GPU, its weights (bf16, or NF4 under QLoRA) and KV
    cache inside. vLLM refuses to start unless its KV cache holds one sequence of max_model_len tokens (vLLM V1,
    vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory): with vllm_max_model_length unset that is the
    model's whole context."""
    total = settings.vllm_gpu_memory_utilization * target.capacity_gib * GIB
    weights = colocated_vllm_weight_bytes(params, settings)
    kv_cache = total - weights - VLLM_RUNTIME_GIB * GIB
    need = one_sequence_kv_bytes(arch, settings) if arch is not None else 0.0
    if kv_cache > 0 and kv_cache >= need:
        return ColocatedVLLM(total, weights, kv_cache, None)
    if kv_cache > 0:
        length = vllm_max_model_len(arch, settings)
        unset = "" if settings.vllm_max_model_length else " (vllm_max_model_length unset: the model's context)"
        problem = (f"vllm_gpu_memory_utilization={settings.vllm_gpu_memory_utilization} leaves vLLM {kv_cache/GIB:.1f} "
                   f"GiB of KV cache, less than the {need/GIB:.1f} GiB one sequence of max_model_len {length} tokens "
                   f"needs{unset}: vLLM refuses to start")
        return ColocatedVLLM(weights + VLLM_RUNTIME_GIB * GIB + need, weights, kv_cache, problem)
    problem = (f"vllm_gpu_memory_utilization={settings.vllm_gpu_memory_utilization} gives vLLM "
               f"{total/GIB:.1f} GiB, less than its {weights/GIB:.1f} GiB of weights + runtime")
    # what it would need: vLLM refuses to start below
    return ColocatedVLLM(weights + VLLM_RUNTIME_GIB * GIB + need, weights, 0.0, problem)


def vllm_server(params: ParamCount, settings: RunSettings, layout: Layout,
                target: Target) -> tuple[ServerGPUPlan, float, str | None]:
    """`trl vllm-serve` as the launcher starts it on its own GPUs: --gpu_memory_utilization (vllm-serve's default
    0.9, not the colocate-only config field), tensor parallel over its GPUs / data parallel size, each data-parallel
    replica holding the whole weights: (the plan of a server GPU, its KV cache in bytes, the problem when the
    weights do not fit)."""
    capacity = target.capacity_gib * GIB
    util = settings.vllm_server_gpu_memory_utilization
    share = util * capacity
    dp = max(1, min(settings.vllm_server_data_parallel_size, layout.server_gpus))
    tp = max(layout.server_gpus // dp, 1)
    weights = params.total * 2 / tp
    kv_cache = share - weights - VLLM_RUNTIME_GIB * GIB
    plan = ServerGPUPlan(gpus=layout.server_gpus, weights_gib=round(weights / GIB, 2),
                         kv_cache_gib=round(max(kv_cache, 0) / GIB, 2), fits=kv_cache > 0)
    problem = None
    if kv_cache <= 0:
        gpus_needed = math.ceil(params.total * 2 / (share - (VLLM_RUNTIME_GIB + 2) * GIB)) \
            if share > (VLLM_RUNTIME_GIB + 2) * GIB else None
        problem = (f"the vLLM server's {layout.server_gpus} GPU(s) (tensor parallel {tp}) cannot hold "
                   f"{params.total * 2 / GIB:.0f} GiB of bf16 weights at --gpu_memory_utilization {util:g}"
                   + (f": give `trl vllm-serve` at least {gpus_needed} GPUs (--tensor-parallel-size)"
                      if gpus_needed else ""))
    return plan, max(kv_cache, 0), problem


# --------------------------------------------------------------------------- overhead
class Peak(NamedTuple):
    """One phase's peak in GiB, as each tool reports it."""

    allocated: float  # torch.cuda.max_memory_allocated: live tensors
    reserved: float  # torch.cuda.max_memory_reserved: + the caching allocator's slack on per-step tensors
    nvidia_smi: float  # the process in nvidia-smi: + CUDA context, cuBLAS/NCCL workspaces


def phase_peak(allocated_once: float, allocated_per_step: float) -> Peak:
    """A phase's peak: allocator slack only on what is allocated and freed every step (weights and optimizer
    state are allocated once), the CUDA context outside torch's allocator."""
    allocated = (allocated_once + allocated_per_step) / GIB
    reserved = (allocated_once + allocated_per_step * (1 + ALLOCATOR_SLACK)) / GIB
    return Peak(allocated, reserved, reserved + CUDA_CONTEXT_GIB)


OVERHEAD_NOTE = (f"CUDA context {CUDA_CONTEXT_GIB} GiB + the caching allocator's reserved-but-free memory "
                 f"({int(ALLOCATOR_SLACK * 100)}% slack on training's per-step tensors; in generation, the segments "
                 "the growing KV cache leaves behind)")
