"""Validation rules as data: each rule takes the context and returns findings {code, field, severity, message, fix}.

Rules are about the target (GPU type and count), never about the machine the check runs on.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mcp_server.errors import closest_names
from mcp_server.model_ref import ROUTER_NAMES
from mcp_server.recipe.learning_rate import LR_FAR_FACTOR, LR_RANGE, recipe_text
from mcp_server.recipe.models import Finding
from mcp_server.recipe.precision import BF16_SWALLOW_LR, TYPICAL_WEIGHT, bf16_weights_allowed
from mcp_server.rewards import build_reward_funcs  # resolves names and dotted paths, clear errors
from mcp_server.worker import in_training
from mcp_server.worker_targets import REWARD_PROBLEMS

# Keys TRL removed or renamed, with what to use instead (checked only when the installed TRL lacks the key).
REMOVED_OR_RENAMED: dict[str, tuple[str | None, str]] = {
    "max_prompt_length": (
        None,
        "removed from GRPOConfig in TRL 0.28: prompts are no longer truncated; filter or "
        "truncate long prompts in the data set instead",
    ),
    "vllm_guided_decoding_regex": ("vllm_structured_outputs_regex", "renamed in TRL 0.25"),
    "wandb_log_unique_prompts": ("log_unique_prompts", "renamed when logging became backend-neutral"),
    "vllm_device": (
        None,
        "removed: use vllm_mode='colocate' (same GPUs) or 'server' (`trl vllm-serve` on its own GPUs)",
    ),
    "torch_dtype": ("dtype", "renamed in transformers 4.56 / TRL ModelConfig"),
    "evaluation_strategy": ("eval_strategy", "renamed in transformers 4.46"),
    "use_vllm_server": ("vllm_mode", "replaced by vllm_mode='server'"),
    "vllm_server_url": ("vllm_server_base_url", "renamed"),
}

# GRPO's settled learning-rate ranges by fine-tuning mode, written once in recipe.learning_rate: outside -> warning;
# LR_FAR_FACTOR or more outside (supervised rates such as 5e-5 for a full fine-tune) -> error.


@dataclass
class Context:
    values: dict
    trl: dict
    gpu: object | None  # a gpus.GPU, or None for a CPU target
    gpu_name: str
    num_gpus: int
    reward_specs: list | None = None
    override_reason: str | None = None
    is_moe: bool | None = None
    parse_errors: dict = field(default_factory=dict)  # {key: TRL's parser error} for values it cannot convert
    base_dir: Path | None = None  # where relative data_files resolve (the run directory of an emitted config)
    findings: list[Finding] = field(default_factory=list)

    def get(self, key):
        """The effective value: the config's, else the installed TRL default."""
        if key in self.values:
            return self.values[key]
        meta = self.trl["fields"].get(key)
        return meta["default"] if meta else None

    @property
    def vllm_server_local(self) -> bool:
        return (
            bool(self.get("use_vllm"))
            and self.get("vllm_mode") == "server"
            and not self.get("vllm_server_base_url")
            and self.get("vllm_server_host") in ("0.0.0.0", "127.0.0.1", "localhost", None)
        )

    @property
    def training_processes(self) -> int:
        """World size of training on the target: a local vLLM server takes one GPU for itself."""
        if self.gpu is None:
            return 1
        return max(self.num_gpus - (1 if self.vllm_server_local else 0), 1)


def finding(code, field, severity, message, fix=None) -> Finding:
    return Finding(code=code, field=field, severity=severity, message=message, fix=fix)


# ---------------------------------------------------------------- 1. keys
def rule_known_keys(ctx: Context) -> list[Finding]:
    out = []
    known = ctx.trl["fields"]
    if not known:
        return out  # no training interpreter: validation says TRL's checks did not run
    for key in ctx.values:
        if key in known:
            if known[key].get("deprecated"):
                out.append(finding("deprecated_field", key, "warning", f"'{key}' is deprecated in TRL "
                                                                       f"{ctx.trl['trl_version']}.",
                                   known[key]["help"][:200]))
            continue
        if key in REMOVED_OR_RENAMED:
            new, why = REMOVED_OR_RENAMED[key]
            fix = f"use '{new}' instead" if new and new in known else why
            out.append(finding("renamed_field" if new else "removed_field", key, "error",
                               f"'{key}' is not a field of TRL {ctx.trl['trl_version']}: {why}.", fix))
            continue
        if key in ctx.trl.get("async_fields", ()):
            out.append(finding(
                "async_grpo_field", key, "error",
                f"'{key}' is a field of TRL's experimental AsyncGRPOConfig, not of GRPOConfig: `trl grpo` and this "
                "run's "
                "train.py run the synchronous GRPOTrainer and would ignore it. Async GRPO is another trainer "
                "(trl.experimental.async_grpo.AsyncGRPOTrainer) with its own prerequisites: a vLLM server started "
                "apart (`trl vllm-serve`, reached through vllm_server_base_url), rewards that pickle (module-level "
                "functions), and no context or sequence parallelism.",
                "remove it, or write an AsyncGRPOTrainer script of your own (this plugin does not emit one)"))
            continue
        close = closest_names(key, list(known))
        out.append(finding("unknown_field", key, "error",
                           f"'{key}' is not a field of GRPOConfig, ModelConfig or the grpo script arguments in TRL "
                           f"{ctx.trl['trl_version']} (TRL's CLI would silently ignore it).",
                           f"did you mean {', '.join(repr(c) for c in close)}?" if close else "remove it"))
    return out


def rule_value_types(ctx: Context) -> list[Finding]:
    out = []
    for key, value in ctx.values.items():
        meta = ctx.trl["fields"].get(key)
        if meta is None or value is None:
            continue
        default, type_text = meta["default"], meta["type"]
        if isinstance(default, bool) or type_text == "bool":
            ok = isinstance(value, bool)
        elif isinstance(default, float) or type_text in ("float", "float | None"):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif isinstance(default, int) or type_text in ("int", "int | None"):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            continue
        if not ok:
            expected = "true/false" if isinstance(default, bool) or type_text == "bool" else "a number"
            why = f" (TRL's parser: {ctx.parse_errors[key]})" if key in ctx.parse_errors else ""
            out.append(finding("wrong_type", key, "error", f"'{key}' must be {expected}, got {value!r}{why}.",
                               f"set {key} to {expected} (TRL default: {default!r})"))
    return out


# ---------------------------------------------------------------- 2. enumerated values
def rule_choices(ctx: Context) -> list[Finding]:
    out = []
    for key, choices in ctx.trl["choices"].items():
        if key not in ctx.values:
            continue
        value = ctx.values[key]
        if key == "scale_rewards" and isinstance(value, bool):
            continue  # TRL maps True/False to "group"/"none"
        if value not in choices:
            close = closest_names(str(value), choices, n=1)
            out.append(finding("invalid_choice", key, "error",
                               f"{key}={value!r} is not one of TRL {ctx.trl['trl_version']}'s choices: "
                               f"{', '.join(choices)} "
                               "(TRL accepts it at config time and fails later, or silently does something else).",
                               f"use {close[0]!r}" if close else f"use one of {', '.join(choices)}"))
    return out


# ---------------------------------------------------------------- 3. batch rules for the target world size
def rule_batches(ctx: Context) -> list[Finding]:
    out = []
    world = ctx.training_processes
    g = ctx.get("num_generations")
    per_device = ctx.get("per_device_train_batch_size")
    gbs, spg = ctx.values.get("generation_batch_size"), ctx.values.get("steps_per_generation")
    if not all(isinstance(v, int) for v in (g, per_device)):
        return out  # wrong_type already says so
    if g < 2:
        out.append(
            finding(
                "num_generations_too_small",
                "num_generations",
                "error",
                f"num_generations={g}: GRPO needs at least 2 completions per prompt to compute an advantage.",
                "set num_generations to 8 (the recipe's floor)",
            )
        )
    elif g < 8:
        out.append(finding("num_generations_below_floor", "num_generations", "warning",
                           f"num_generations={g} is below the recipe's floor of 8: with few completions per group most "
                           "groups have identical rewards (zero std), so they carry no advantage and the signal is "
                           "noisy.",
                           "set num_generations to 8 or more"))
    if gbs is not None and spg is not None:
        out.append(finding("generation_batch_conflict", "generation_batch_size", "error",
                           "generation_batch_size and steps_per_generation cannot both be set.",
                           "remove one of them (steps_per_generation defaults to gradient_accumulation_steps)"))
        return out
    global_batch = per_device * world
    if gbs is not None:
        if gbs % global_batch:
            out.append(finding("generation_batch_not_divisible", "generation_batch_size", "error",
                               f"generation_batch_size={gbs} is not divisible by the global batch "
                               f"per_device_train_batch_size x processes = {per_device} x {world} = {global_batch}.",
                               f"use a multiple of {global_batch}"))
            return out
    else:
        spg = spg if isinstance(spg, int) else ctx.get("gradient_accumulation_steps")
        # Without a training interpreter TRL's default is unknown (validation says TRL's checks did not run).
        gbs = global_batch * spg if isinstance(spg, int) else None
    if gbs is not None and g >= 2 and gbs % g:
        out.append(finding("generation_batch_not_divisible", "num_generations", "error",
                           f"the generation batch ({gbs} = {per_device} per device x {world} processes x "
                           f"{spg if spg else gbs // global_batch} steps) is not divisible by num_generations={g}: "
                           "every prompt group must be complete.",
                           f"choose num_generations dividing {gbs}, or per_device_train_batch_size / "
                           "gradient_accumulation_steps so the product is a multiple of num_generations"))
    if ctx.get("eval_strategy") not in (None, "no"):  # transformers turns do_eval on with an eval strategy
        eval_g = ctx.get("num_generations_eval") or g
        eval_bs = ctx.get("per_device_eval_batch_size")
        if isinstance(eval_bs, int) and (eval_bs * world) % eval_g:
            out.append(
                finding(
                    "eval_batch_not_divisible",
                    "per_device_eval_batch_size",
                    "error",
                    f"the global eval batch {eval_bs} x {world} is not divisible by {eval_g} generations.",
                    f"use a per_device_eval_batch_size whose product with {world} is a multiple of {eval_g}",
                )
            )
    return out


# ---------------------------------------------------------------- 4. target hardware
def rule_hardware(ctx: Context) -> list[Finding]:
    out = []
    bf16, fp16 = bool(ctx.get("bf16")), bool(ctx.get("fp16"))
    if ctx.gpu is None:  # CPU target
        if ctx.get("use_vllm"):
            out.append(
                finding(
                    "vllm_needs_gpu",
                    "use_vllm",
                    "error",
                    "use_vllm=true on a CPU target: vLLM needs a GPU.",
                    "set use_vllm: false (generation falls back to transformers generate)",
                )
            )
        if bf16 or fp16:
            out.append(finding("mixed_precision_on_cpu", "bf16" if bf16 else "fp16", "warning",
                               "mixed precision on a CPU target is slow or unsupported.", "set bf16: false and fp16: "
                                                                                          "false"))
        return out
    if bf16 and not ctx.gpu.bf16:
        out.append(finding("bf16_unsupported", "bf16", "error",
                           f"bf16=true but the {ctx.gpu.name} has no bfloat16 support (compute capability "
                           f"{ctx.gpu.compute_capability}).",
                           "set bf16: false and fp16: true (fp16 autocast with loss scaling over float32 master "
                           "weights; arXiv 2510.26788 finds fp16 more stable than bf16 for RL fine-tuning), or use "
                           "an Ampere-or-newer GPU"))
    if fp16 and ctx.gpu.bf16:
        out.append(finding("fp16_where_bf16_possible", "fp16", "info",
                           f"fp16 on a {ctx.gpu.name}, which supports bf16: workable with loss scaling (arXiv "
                           "2510.26788 finds fp16 more stable for RL fine-tuning), but the colocated vLLM samples in "
                           "the checkpoint's dtype (bf16 for most models), so the sampler/trainer mismatch it removes "
                           "remains.", "bf16: true is the usual choice here; keep fp16 only on purpose"))
    if ctx.get("use_vllm") and ctx.get("vllm_mode") == "server" and ctx.vllm_server_local and ctx.num_gpus < 2:
        out.append(finding("vllm_server_needs_gpu", "vllm_mode", "error",
                           f"vllm_mode='server' with {ctx.num_gpus} GPU leaves no GPU for the vLLM server "
                           "(`trl vllm-serve` runs on its own GPUs).",
                           "use vllm_mode: colocate on one GPU, or target 2+ GPUs"))
    return out


# Numeric fields TRL accepts at config time that cannot train: field -> (accepted interval, why, severity).
# Where TRL's help text states the interval ("Must be in (0, 1]", "between 0.0 and 1.0", "Range: [0.0-1.0]"),
# TRL's wins. num_generations and learning_rate have their own rules.
RANGES: dict[str, tuple[str, str, str]] = {
    "max_completion_length": ("[1, inf)", "no completion token to score or train on", "error"),
    "per_device_train_batch_size": ("[1, inf)", "no sample per step", "error"),
    "gradient_accumulation_steps": ("[1, inf)", "no micro-batch per optimizer step", "error"),
    "steps_per_generation": ("[1, inf)", "no optimizer step per generation", "error"),
    "generation_batch_size": ("[1, inf)", "no completion per generation", "error"),
    "num_iterations": ("[1, inf)", "no update per generation batch", "error"),
    "temperature": ("(0, inf)", "the logits are divided by the temperature", "error"),
    "top_p": ("(0, 1]", "a probability mass", "error"),
    "top_k": (
        "[0, inf)",
        "a token count (TRL: 0 turns top-k off; transformers' generate refuses a negative one)",
        "error",
    ),
    "min_p": ("[0, 1]", "a probability", "error"),
    "repetition_penalty": ("(0, inf)", "logits are divided or multiplied by it", "error"),
    "beta": ("[0, inf)", "a negative KL coefficient pays the policy for drifting from the reference", "error"),
    "epsilon": ("(0, 1)", "the clip range is [1 - epsilon, 1 + epsilon_high] around a positive ratio", "error"),
    "epsilon_high": ("(0, inf)", "the upper clip bound is 1 + epsilon_high", "error"),
    "delta": ("(1, inf)", "the two-sided clip's upper bound on the ratio (TRL recommends > 1 + epsilon)", "warning"),
    "top_entropy_quantile": ("[0, 1]", "a quantile", "error"),
    "off_policy_mask_threshold": ("(0, inf)", "a KL threshold (TRL expects a positive value)", "error"),
    "vllm_gpu_memory_utilization": ("(0, 1]", "a fraction of the GPU's memory", "error"),
    "vllm_importance_sampling_clip_max": ("(0, inf)", "an upper bound on positive ratios", "error"),
    "vllm_importance_sampling_clip_min": ("[0, inf)", "a lower bound on positive ratios", "error"),
    "ref_model_mixup_alpha": ("[0, 1]", "a mixing weight", "error"),
    "ref_model_sync_steps": ("[1, inf)", "a step interval", "error"),
    "lora_r": ("[1, inf)", "the adapter's rank", "error"),
    "lora_alpha": ("(0, inf)", "the adapter's scale is lora_alpha / lora_r", "error"),
    "lora_dropout": ("[0, 1)", "a dropout probability (1 drops every input)", "error"),
    "weight_decay": ("[0, inf)", "a negative decay grows the weights", "error"),
    "max_grad_norm": ("[0, inf)", "a norm (0 turns clipping off)", "error"),
}
_INTERVAL = re.compile(r"([\[(])\s*(-?[\d.]+)\s*(?:,|-)\s*(-?[\d.]+|inf)\s*([\])])")
_BETWEEN = re.compile(r"between (-?[\d.]*\d) and (-?[\d.]*\d)")


def parse_interval(text: str) -> tuple[float, float, bool, bool] | None:
    """(low, high, low_closed, high_closed) of the first interval written in `text`, e.g. '(0, 1]'."""
    match = _INTERVAL.search(text)
    if match:
        return float(match[2]), float(match[3]), match[1] == "[", match[4] == "]"
    match = _BETWEEN.search(text)
    return (float(match[1]), float(match[2]), True, True) if match else None


def _interval_text(low, high, low_closed, high_closed) -> str:
    return f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"


def rule_ranges(ctx: Context) -> list[Finding]:
    out = []
    for key, (interval, why, severity) in RANGES.items():
        value = ctx.values.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or key in ctx.parse_errors:
            continue  # unset, null, or a wrong type (rule_value_types says so)
        if not math.isfinite(value):
            if key != "learning_rate":  # rule_learning_rate says why a NaN rate is fatal
                out.append(finding("not_finite", key, "error", f"{key}={value!r} is not a finite number: TRL accepts "
                                   "it at config time and the run computes NaN.", f"set {key} within {interval}"))
            continue
        stated = parse_interval(ctx.trl["fields"].get(key, {}).get("help", ""))
        low, high, low_closed, high_closed = stated or parse_interval(interval)
        inside = (value > low or (low_closed and value == low)) and (value < high or (high_closed and value == high))
        if not inside:
            source = f"TRL {ctx.trl['trl_version']}'s help for {key}" if stated else "what can train"
            accepted = _interval_text(low, high, low_closed, high_closed)
            out.append(finding("out_of_range", key, severity,
                               f"{key}={value!r} is outside {accepted} ({source}): {why}. TRL accepts it at config "
                               "time" + ("; training fails or learns nothing." if severity == "error" else "."),
                               f"set {key} within {accepted}"))
    return out


def rule_learning_rate(ctx: Context) -> list[Finding]:
    lr = ctx.get("learning_rate")
    if not isinstance(lr, (int, float)) or isinstance(lr, bool):
        return []
    mode = "lora" if ctx.get("use_peft") or ctx.get("load_in_4bit") else "full"
    low, high = LR_RANGE[mode]
    if not math.isfinite(lr) or lr <= 0:  # NaN/inf poison every weight at the first step; <= 0 never learns
        return [
            finding(
                "lr_invalid",
                "learning_rate",
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
    effect = ("RL updates at supervised learning rates move the policy too far per step and collapse it"
              if lr > high else "the policy barely moves and the reward stays flat")
    overridden = f" Overridden: {ctx.override_reason}." if far and ctx.override_reason else ""
    return [finding("lr_out_of_range", "learning_rate", "error" if far and not overridden else "warning",
                    f"learning_rate={lr:g} is {'far ' if far else ''}{side} GRPO's settled range for {mode} "
                    f"fine-tuning ({low:g}-{high:g}): {effect}.{overridden}",
                    f"use a learning rate within {low:g}-{high:g} (recipe: {recipe_text(mode)})")]


def rule_full_finetune_precision(ctx: Context) -> list[Finding]:
    """Pure bf16 (or fp16) weights on a full fine-tune: no fp32 master copy, so RL-sized updates round away."""
    init = ctx.get("model_init_kwargs") if isinstance(ctx.get("model_init_kwargs"), dict) else {}
    dtype = str(init.get("dtype") or ctx.get("dtype") or "float32").replace("torch.", "")
    if dtype not in ("bfloat16", "float16", "auto") or bf16_weights_allowed(
        {**ctx.values, "deepspeed": ctx.get("deepspeed")}
    ):
        return []
    try:
        lr = float(ctx.get("learning_rate"))
    except (TypeError, ValueError):
        return []
    if lr >= BF16_SWALLOW_LR:
        return []
    stored = "the checkpoint's dtype (bf16 for most LLMs)" if dtype == "auto" else dtype
    return [finding("full_finetune_low_precision_weights", "dtype", "error",
                    f"dtype={dtype} on a full fine-tune keeps the weights and AdamW state in {stored} with no float32 "
                    f"master copy: bf16 has 8 significant bits, so an update below half a unit in the last place "
                    f"({BF16_SWALLOW_LR:.1e} for a weight of {TYPICAL_WEIGHT}) is rounded away. AdamW moves a weight "
                    f"by about the learning rate ({lr:g}) per step, so most weights never change while the loss "
                    "curve looks normal.",
                    "set dtype: float32 with bf16: true (float32 master weights, bf16 autocast), or train LoRA "
                    "(use_peft: true) over a bf16 base, or use DeepSpeed ZeRO (it keeps float32 master weights)")]


def rule_loss_type_explicit(ctx: Context) -> list[Finding]:
    if "loss_type" in ctx.values or not ctx.trl["fields"]:
        return []
    default = ctx.trl["fields"].get("loss_type", {}).get("default")
    return [finding("loss_type_implicit", "loss_type", "info",
                    f"loss_type is not set, so TRL {ctx.trl['trl_version']} uses its default '{default}'.",
                    "set loss_type explicitly ('dapo' for the base recipe)")]


def rule_moe(ctx: Context) -> list[Finding]:
    if not ctx.is_moe or ctx.get("importance_sampling_level") == "sequence":
        return []
    if ctx.override_reason:
        return [finding("moe_without_gspo", "importance_sampling_level", "info",
                        f"mixture-of-experts model without GSPO, overridden: {ctx.override_reason}")]
    return [finding("moe_without_gspo", "importance_sampling_level", "warning",
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
    gen = ctx.get("generation_kwargs") if isinstance(ctx.get("generation_kwargs"), dict) else {}
    top_p, top_k, min_p = (gen.get(k, ctx.get(k)) for k in ("top_p", "top_k", "min_p"))
    truncated = [f"{k}={v}" for k, v, cut in (("top_p", top_p, isinstance(top_p, (int, float)) and top_p < 1),
                                               ("top_k", top_k, isinstance(top_k, int) and top_k > 0),
                                               ("min_p", min_p, isinstance(min_p, (int, float)) and min_p > 0)) if cut]
    consumers = [k for k in ("vllm_importance_sampling_correction", "off_policy_mask_threshold") if ctx.get(k)]
    if truncated and ctx.get("use_vllm") and consumers:
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
    if ctx.get("log_completions_hub_repo") and not ctx.get("hub_private_repo"):
        out.append(finding(
            "completions_repo_public", "hub_private_repo", "warning",
            f"log_completions_hub_repo={ctx.get('log_completions_hub_repo')!r} without hub_private_repo: TRL creates "
            "the "
            "data set repository public (unless your organisation defaults to private), with every prompt and "
            "completion.",
            "set hub_private_repo: true"))
    if ctx.get("use_peft") and (_targets_lm_head(ctx.get("lora_target_modules"))
                                or _targets_lm_head(ctx.get("lora_modules_to_save"))):
        out.append(finding(
            "peft_on_lm_head", "lora_target_modules", "error",
            "a PEFT adapter on lm_head: GRPOTrainer computes log-probabilities from lm_head.weight directly (its fused "
            "LM head), so it refuses the adapter when it starts (the adapter would never be trained).",
            "remove lm_head from lora_target_modules and lora_modules_to_save"))
    if ctx.get("use_liger_kernel"):
        liger = ctx.get("liger_kernel_config") if isinstance(ctx.get("liger_kernel_config"), dict) else {}
        if liger.get("fused_linear_cross_entropy"):
            out.append(finding(
                "liger_fused_ce_rejected", "liger_kernel_config", "error",
                "liger_kernel_config.fused_linear_cross_entropy=true: GRPOTrainer refuses it when it starts (it "
                "replaces "
                "the model's forward, which GRPO patches with its own fused LM head).",
                "drop fused_linear_cross_entropy from liger_kernel_config"))
        out.append(finding(
            "liger_deprecated", "use_liger_kernel", "warning",
            f"use_liger_kernel is deprecated for GRPO in TRL {ctx.trl['trl_version']} (removal in v2.0.0), and only "
            "Liger's layer kernels apply: GRPO computes log-probs with its own chunked LM head.",
            'use model_init_kwargs: {"use_kernels": true} (Hub kernels) instead'))
    return out


def rule_moe_lora_router(ctx: Context) -> list[Finding]:
    targets = ctx.get("lora_target_modules")
    if not ctx.is_moe or not ctx.get("use_peft") or not targets:
        return []
    names = [targets] if isinstance(targets, str) else list(targets)
    hits = [n for n in names if str(n).lower() == "all-linear" or str(n).rsplit(".", 1)[-1] in ROUTER_NAMES]
    if not hits:
        return []
    return [finding("moe_lora_router", "lora_target_modules", "warning",
                    f"lora_target_modules {hits[0]!r} on a mixture-of-experts model adapts the router (mlp.gate / "
                    "router): PEFT's 'all-linear' takes every Linear but the head, and with transformers 5 also the "
                    "router weight. A trained router shifts which experts each token reaches, which destabilises RL "
                    "and breaks the load balance.",
                    "list the projections instead, without gate/router (emit_grpo_config does this: e.g. q_proj, "
                    "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)")]


# ---------------------------------------------------------------- 5. rewards
def rule_rewards(ctx: Context) -> list[Finding]:
    names = [s["name"] if isinstance(s, dict) else s.name for s in (ctx.reward_specs or [])]
    config_funcs = ctx.values.get("reward_funcs") or []
    if isinstance(config_funcs, str):
        config_funcs = [config_funcs]
    if not names and not config_funcs and not ctx.values.get("reward_model_name_or_path"):
        return [finding("no_reward", "reward_funcs", "error", "no reward source: GRPO has nothing to optimise.",
                        "add reward_funcs (registry names or dotted paths) or a rewards.json beside the config")]
    specs = [s if isinstance(s, dict) else s.model_dump() for s in (ctx.reward_specs or [])]
    if ctx.trl["fields"]:
        # Rewards import what training has (math-verify, transformers, the person's modules): resolve them in
        # the training interpreter, which answered for TRL's fields above.
        problems = in_training(REWARD_PROBLEMS, specs, config_funcs)
    else:
        problems = reward_problems(specs, config_funcs)
    out = [finding("reward_unresolvable", field, "error", message, fix) for field, message, fix in problems]
    weights = ctx.values.get("reward_weights")
    count = len(ctx.reward_specs or config_funcs)
    if weights is not None and count and len(weights) != count:
        out.append(finding("reward_weights_mismatch", "reward_weights", "error",
                           f"{len(weights)} reward_weights for {count} rewards.", "give one weight per reward"))
    return out


def reward_problems(specs: list[dict], config_funcs: list[str]) -> list[tuple[str, str, str]]:
    """(field, message, fix) for each reward that cannot be built or imported here."""
    out = []
    if specs:
        for i, spec in enumerate(specs):
            try:
                build_reward_funcs([spec])
            except Exception as exc:  # any failure to build is a finding, never a crash
                out.append((f"rewards[{i}].name", str(exc), "use a registry name (list_rewards) or an importable "
                                                            "dotted path"))
    trl_builtin = {
        "accuracy_reward",
        "reasoning_accuracy_reward",
        "think_format_reward",
        "get_soft_overlong_punishment",
    }
    for i, name in enumerate(config_funcs):
        if name in trl_builtin:
            continue
        error = _resolve_dotted(name)
        if error:
            out.append((f"reward_funcs[{i}]", error,
                        f"use one of TRL's names ({', '.join(sorted(trl_builtin))}) or an importable dotted path"))
    return out


def _resolve_dotted(name: str) -> str | None:
    import importlib
    import sys

    if "." not in name:
        return f"'{name}' is neither a TRL reward name nor a dotted import path"
    module_name, attr = name.rsplit(".", 1)
    sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        return f"cannot import '{module_name}' for reward '{name}': {exc}"
    finally:
        sys.path.pop(0)
    if not callable(getattr(module, attr, None)):
        return f"'{module_name}' has no callable '{attr}'"
    return None


def rule_model(ctx: Context) -> list[Finding]:
    model = ctx.values.get("model_name_or_path")
    if not model:
        return [finding("no_model", "model_name_or_path", "error", "no model_name_or_path.",
                        "set model_name_or_path to a hub name or a local model directory")]
    path = Path(str(model)).expanduser()
    if str(model).startswith((".", "/", "~")) and not (path / "config.json").is_file():
        return [finding("model_not_found", "model_name_or_path", "error",
                        f"'{model}' is not a local model directory (no config.json).",
                        "give an existing directory saved with save_pretrained, or a hub name")]
    return []


RULES: list[Callable[[Context], list[Finding]]] = [
    rule_known_keys, rule_value_types, rule_choices, rule_ranges, rule_batches, rule_hardware, rule_learning_rate,
    rule_full_finetune_precision, rule_loss_type_explicit, rule_moe, rule_moe_lora_router, rule_combinations,
    rule_rewards, rule_model,
]
