"""The generation-and-scoring phase of a GRPO run that generates with HF transformers (no vLLM), component by
component from TRL 1.16's, transformers' and peft's code, its reward models, and what PyTorch's caching allocator
reserves for it. breakdown.py adds it to what the run allocates once."""

from __future__ import annotations

from typing import NamedTuple

from mcp_server.memory.components import (
    FUSED_TOKEN_TILE,
    FUSED_VOCAB_TILE,
    Layout,
    Part,
    Peak,
    _adapter_bytes,
    reference_logits,
)
from mcp_server.memory.constants import (
    ALLOCATOR_SLACK,
    CUDA_CONTEXT_GIB,
    DECODE_CHURN_SEGMENTS,
    GIB,
    PREFILL_RESERVE_SLACK,
)
from mcp_server.memory.params import Architecture, ParamCount
from mcp_server.memory.settings import RunSettings


# --------------------------------------------------------------------------- generation (HF generate)
# GRPOTrainer._generate_and_score_completions (trl/trainer/grpo_trainer.py) without vLLM: _generate_single_turn calls
# `unwrapped_model.generate(...)` on the whole generation batch (per_device_train_batch_size x steps_per_generation
# sequences) under torch.no_grad(), then scores them with _get_per_token_logps_and_entropies (reference, and old
# log-probs when generation and optimizer steps are misaligned) in chunks of per_device_train_batch_size. What it holds
# beyond the weights and optimizer state, component by component:


class GenerationPhase(NamedTuple):
    """The generation-and-scoring phase's allocations above what is allocated once, in bytes per GPU."""

    prefill: float  # the prompt forward: its KV cache + one layer's transients (+ the autocast weight copies)
    decode_end: float  # the last decode step: the whole KV cache + the attention's repeated K/V of one layer
    scoring: float  # one no-grad log-prob chunk (reference / old policy) after generate returned
    kv_cache: float  # the KV cache at the end of generation
    weight_copies: float  # autocast's cached 16-bit copies of fp32 weights during one forward
    churn: float  # the per-layer blocks each decode step allocates larger than the last (fragmentation)
    autocast: bool  # whether generate runs under accelerate's autocast
    sequences: int
    rewarding: float = 0.0  # the reward models' forward over the whole generation batch

    @property
    def allocated(self) -> float:
        return max(self.prefill, self.decode_end, self.scoring, self.rewarding)

    @property
    def peak_moment(self) -> str:
        return max((self.prefill, "prefill"), (self.decode_end, "decode"), (self.scoring, "scoring"),
                   (self.rewarding, "rewarding"))[1]


def generation_sequences(settings: RunSettings) -> int:
    """Sequences one generate call holds: the local generation batch, per_device_train_batch_size x
    steps_per_generation (GRPOTrainer._prepare_inputs generates once per steps_per_generation micro-steps; TRL < 0.18
    generated per micro-step)."""
    return settings.per_device_train_batch_size * (1 if settings.generate_per_micro_step else settings.spg)


def dynamic_sampling_held(settings: RunSettings) -> float:
    """Bytes per GPU DAPO's dynamic sampling (recipe/dynamic_sampling_trainer.py) holds beside a generation round:
    while an extra round generates, the earlier rounds' outputs of TRL's _generate_and_score_completions stay
    referenced (at most dynamic_sampling_rounds of them, each one generation batch of rows): prompt and completion
    ids and masks (int64) and the per-token float32 rows (old, reference and sampling log-probs, the importance
    ratio). The next round itself is TRL's own generation batch, planned as without the option."""
    if not settings.dynamic_sampling_rounds:
        return 0.0
    per_row = settings.prompt_length * 16 + settings.max_completion_length * (16 + 16)
    return float(settings.dynamic_sampling_rounds * generation_sequences(settings) * per_row)


def dynamic_sampling_note(settings: RunSettings) -> str:
    rounds, rows = settings.dynamic_sampling_rounds, generation_sequences(settings)
    return (f"dynamic sampling: up to {rounds} earlier rounds' {rows} rows (ids, masks, per-token log-probs) held "
            "while the next round generates")


def generate_under_autocast(settings: RunSettings) -> bool:
    """Whether HF generate runs under accelerate's autocast. Accelerator.prepare_model wraps the prepared model's
    `forward` in torch.autocast (accelerate/accelerator.py); trl/models/utils.py _unwrap_model_for_generation keeps that
    wrapper (unwrap_model's keep_fp32_wrapper=True), so a full fine-tune generates under it. Under LoRA the prepared
    model is the PeftModel, and PeftModelForCausalLM.generate (peft/peft_model.py) calls `self.base_model.generate`,
    whose forward calls go to the inner model's unwrapped forward: no autocast. DeepSpeed's engine runs without it."""
    return settings.mixed_precision and not settings.peft and settings.zero_stage == 0


def _generation_widths(settings: RunSettings, layout: Layout) -> tuple[int, int, int, int]:
    """(hidden-state bytes, matmul-output bytes, cached key bytes, cached value bytes) during generate.

    The residual stream keeps the embedding's dtype (the load dtype; autocast casts only matmul inputs). Under autocast
    the q/k/v projections return 16 bits, but transformers' rotary embedding hands cos/sin back in the hidden states'
    dtype (Qwen2RotaryEmbedding/LlamaRotaryEmbedding.forward: `cos.to(dtype=x.dtype)`), so apply_rotary_pos_emb
    promotes the keys to fp32 over fp32 weights; DynamicLayer.update (transformers/cache_utils.py) caches what it is
    given: fp32 keys beside 16-bit values."""
    weight = layout.weight_bytes  # QLoRA: bitsandbytes' Linear4bit returns its input's dtype
    if generate_under_autocast(settings):
        return weight, 2, weight, 2
    return weight, weight, weight, weight


def _targets(arch: Architecture, settings: RunSettings, names: tuple[str, ...]) -> bool:
    targets = settings.lora_target_modules
    if targets == "all-linear":
        return True
    listed = [targets] if isinstance(targets, str) else list(targets)
    return any(n in listed for n in names)


def _prefill_mlp(arch: Architecture, settings: RunSettings, layout: Layout, tokens: int, act: int) -> float:
    """The peak of one layer's MLP over the prompt tokens, `down_proj(act_fn(gate_proj(x)) * up_proj(x))` (e.g.
    transformers/models/qwen2/modeling_qwen2.py Qwen2MLP.forward): act_fn(gate) and up's output live while their
    product is made (3 tensors of tokens x intermediate). Under LoRA without autocast, peft/tuners/lora/layer.py
    Linear.forward casts the input to the fp32 adapters' dtype (`_cast_input_dtype`), runs LoRA dropout on it (the
    model stays in train mode during TRL's generate: lora_dropout is live) and adds `lora_B(lora_A(x)) * scaling` out
    of place to the base output, which promotes the sum to fp32: at up_proj, act_fn(gate) + the base output + the
    scaled fp32 product + the fp32 sum; at down_proj, its input + the fp32 cast + the dropout copy and its mask."""
    width = arch.expert_width * arch.num_experts_per_tok if arch.is_moe else arch.intermediate_size
    plain = 3 * tokens * width * act
    if not settings.peft or not _targets(arch, settings, ("gate_proj", "up_proj", "down_proj")) or arch.is_moe:
        return plain
    # QLoRA: GRPOTrainer.__init__ casts the adapters to bf16 ("When using QLoRA, the PEFT adapter weights are converted
    # to bf16")
    adapter = 2 if settings.finetune == "qlora" else _adapter_bytes(layout)
    promoted = max(adapter, act)
    up = tokens * width * (2 * act + 2 * promoted) + (tokens * arch.hidden_size * adapter if adapter != act else 0)
    dropout = settings.lora_dropout > 0
    down = tokens * width * (act + (adapter if adapter != act else 0) + ((adapter + 1) if dropout else 0))
    return max(plain, up, down + tokens * arch.hidden_size * act)


def weight_copies_under_autocast(params: ParamCount, settings: RunSettings, layout: Layout) -> float:
    """torch.autocast caches the 16-bit cast of every fp32 leaf weight that requires grad until the outermost autocast
    context exits (at::autocast::cached_cast; torch.autocast.__exit__ clears the cache): each of the policy's forward
    calls, generate's prefill and decode steps included, holds 16-bit copies of all its linear weights and the LM
    head. A frozen reference model's weights do not require grad: cast per matmul, not cached."""
    if not generate_under_autocast(settings) or layout.weight_bytes != 4 or settings.finetune == "qlora":
        return 0.0
    head = params.lm_head or params.embedding
    return (params.linear + head) * 2.0 / layout.weight_shards


def generation_phase(arch: Architecture, params: ParamCount, settings: RunSettings, layout: Layout) -> GenerationPhase:
    """HF generate and the no-grad scoring after it, from transformers' GenerationMixin.generate (_prefill then the
    _sample loop over DynamicCache) and TRL's _get_per_token_logps_and_entropies."""
    sequences = generation_sequences(settings)
    prompt, completion = settings.prompt_length, settings.max_completion_length
    hidden, act, key, value = _generation_widths(settings, layout)
    layers, h = arch.num_hidden_layers, arch.hidden_size
    kv_token = layers * arch.kv_dim * (key + value)
    copies = weight_copies_under_autocast(params, settings, layout)
    # prefill (GenerationMixin._prefill: one forward over every prompt token, prefill_chunk_size unset): the prompt's
    # KV cache; the residual streams alive across a decoder layer (the model's inputs_embeds, the layer's input, the
    # residual after attention, the normed MLP input; Qwen2DecoderLayer/LlamaDecoderLayer.forward); the MLP's
    # transients. generate sets logits_to_keep=1 (GenerationMixin.generate, "_supports_logits_to_keep"), and TRL's
    # fused head keeps the model's signature (add_fused_lm_head: functools.wraps), so only the last position's logits.
    tokens = sequences * prompt
    prefill = tokens * kv_token + 4 * tokens * h * hidden + _prefill_mlp(arch, settings, layout, tokens, act) + copies
    # decode: DynamicLayer.update grows each layer's keys and values by torch.cat (a new, larger tensor every step);
    # at the last step the whole cache. With a padding mask (prompts of different lengths, left-padded by TRL),
    # transformers' sdpa_attention_forward cannot use SDPA's GQA (use_gqa_in_sdpa needs no mask) and repeat_kv expands
    # one layer's keys and values to every query head; under autocast SDPA casts the fp32 keys to 16 bits. Each step's
    # logits (the last position, fp32: `outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32)`) and probs.
    length = prompt + completion
    kv_cache = sequences * length * kv_token
    repeated = sequences * length * arch.q_dim * (key + value + (2 if key == 4 else 0))
    grown = sequences * length * arch.kv_dim * (key + value)  # torch.cat's new copy beside the old one
    step_logits = sequences * arch.vocab_size * 4 * 2
    decode_end = kv_cache + copies + repeated + grown / layers + step_logits
    churn = repeated + grown / layers
    # scoring (after generate returned and freed its cache): _get_per_token_logps_and_entropies runs the reference
    # (the ref model, or the policy with adapters disabled under LoRA: use_adapter(model, adapter_name=None)) and the
    # old policy when needed, in chunks of per_device_train_batch_size full sequences, under torch.no_grad() and
    # accelerator.autocast(). Per chunk: the residual streams and MLP transients of one layer, and TRL's fused head
    # (trl/trainer/utils.py add_fused_lm_head): `hidden_states[mask]` copies the completion positions, the kernel works
    # in one [4096 x 32768] tile (trl/kernels/chunked_logprob.py mm_buf) and returns log-probs and entropy per token
    # (fp32, batch x completion: negligible). Without the fused head (TRL < 1.15) the chunk's full logits.
    batch = settings.per_device_train_batch_size
    chunk = batch * length
    score_act = 2 if settings.mixed_precision else hidden
    head = (min(batch * completion, FUSED_TOKEN_TILE) * min(arch.vocab_size, FUSED_VOCAB_TILE) * score_act
            + batch * completion * h * score_act) if settings.fused_logits else reference_logits(arch, settings)
    # old log-probs only when `gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0`
    scored = settings.beta != 0 or settings.gradient_accumulation_steps % (settings.spg * settings.num_iterations) != 0
    scoring = (4 * chunk * h * hidden + 3 * chunk * arch.intermediate_size * score_act + head + copies) if scored else 0
    # log_completions: GRPOTrainer keeps the logged prompts, completions and rewards in `self._logs` deques of Python
    # objects (CPU), nothing on the GPU.
    return GenerationPhase(prefill, decode_end, scoring, kv_cache, copies, churn,
                           generate_under_autocast(settings), sequences, reward_forward(settings, layout))


def reward_model_weights(settings: RunSettings, layout: Layout) -> Part:
    """Model-based rewards beside the policy: GRPOTrainer.__init__ loads a reward_funcs entry that is a model id (the
    trl grpo script appends reward_model_name_or_path to reward_funcs) with
    AutoModelForSequenceClassification.from_pretrained(..., **args.model_init_kwargs), the policy's dtype, and
    accelerator.prepare_model(reward_func, evaluation_mode=True, device_placement=True) puts it whole on each GPU."""
    if not settings.reward_models:
        return Part(0.0)
    total = sum(shape[0] for shape in settings.reward_models)
    return Part(total * layout.weight_bytes, f"{len(settings.reward_models)} reward model(s), {total/1e9:.2f}B params "
                f"in {settings.dtype} (model_init_kwargs), whole on each GPU")


def reward_forward(settings: RunSettings, layout: Layout) -> float:
    """GRPOTrainer._calculate_rewards: each reward model scores the whole generation batch in one call
    (`reward_func(**reward_inputs)` under torch.inference_mode(), not chunked), prompt + completion tokens: one
    layer's residual streams and MLP transients over every token (the largest model's), under the prepared model's
    autocast when mixed precision is on, with its 16-bit weight copies over fp32 weights."""
    if not settings.reward_models:
        return 0.0
    tokens = generation_sequences(settings) * settings.seq_len
    hidden_bytes = layout.weight_bytes
    act = 2 if settings.mixed_precision else hidden_bytes
    copies = 2 if (settings.mixed_precision and hidden_bytes == 4) else 0
    return max(4 * tokens * h * hidden_bytes + 3 * tokens * inter * act + params * copies
               for params, h, inter, _ in settings.reward_models)


def generation_kv_cache(arch: Architecture, settings: RunSettings, layout: Layout) -> float:
    """HF generate: the KV cache of one generation round's sequences at its full length (the speed model's KV)."""
    key, value = _generation_widths(settings, layout)[2:]
    return generation_sequences(settings) * settings.seq_len * arch.num_hidden_layers * arch.kv_dim * (key + value)


def generation_peak(allocated_once: float, optimizer: float, gen: GenerationPhase) -> Peak:
    """The generation-and-scoring phase's peak under PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp,
    no expandable segments): a freed block goes back to the cache of its own cudaMalloc'd segment and serves only a
    request that fits in it. The prefill's transients are freed in large blocks the decode steps reuse (a few percent
    of slack, PREFILL_RESERVE_SLACK). The decode steps are the problem: every step each layer's torch.cat asks for a
    key/value tensor (and, with a padding mask, a repeated K/V) a little larger than the one it frees, so the freed
    blocks rarely fit the next request and new segments are mapped; DECODE_CHURN_SEGMENTS is how many times that
    per-layer churn the reserved pool grows past the cache. The pool is never given back (no empty_cache), so the
    first generation, before the optimizer state exists (AdamW allocates it lazily at the first step), already
    reserves it; later steps place the optimizer state in the cached holes."""
    allocated = allocated_once + gen.allocated
    transient = max(gen.prefill * (1 + PREFILL_RESERVE_SLACK), gen.decode_end + DECODE_CHURN_SEGMENTS * gen.churn,
                    gen.scoring * (1 + ALLOCATOR_SLACK))
    reserved = max(allocated_once - optimizer + transient, allocated_once + gen.allocated * (1 + PREFILL_RESERVE_SLACK))
    return Peak(allocated / GIB, reserved / GIB, reserved / GIB + CUDA_CONTEXT_GIB)


def generation_peak_expandable(allocated_once: float, gen: GenerationPhase) -> float:
    """nvidia-smi GiB of the generation phase with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the allocator maps
    one segment per stream and grows it page by page (2 MiB), so a freed key/value block merges with the free pages
    around it and the larger next one fits there: the decode churn no longer maps new memory (torch's CUDA notes,
    "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"). Left: the prefill's slack."""
    return (allocated_once + gen.allocated * (1 + PREFILL_RESERVE_SLACK)) / GIB + CUDA_CONTEXT_GIB
