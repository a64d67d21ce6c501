"""The start-up rehearsal, part one: what GRPOTrainer.__init__, transformers' Trainer and TRL's vLLM engine refuse
before the first step that the config alone shows (no model, no GPU). Each rule quotes the installed TRL 1.16 code
it mirrors; what needs the model's architecture (attention heads, context, MoE) is recipe.architecture_rules'.

tests/test_startup_rehearsal.py lists every `raise` of trl/trainer/grpo_config.py and GRPOTrainer.__init__ (read
with ast from the installed TRL) and fails on one that no finding catches and no reason rules out.
"""

from __future__ import annotations

from mcp_server.config import FIELD
from mcp_server.recipe.context import Context, Rule, finding
from mcp_server.recipe.models import Finding

# grpo_trainer.py: `if self.vllm_importance_sampling_mode not in ["token_truncate", "token_mask"]: raise`
VESPO_IS_MODES = ("token_truncate", "token_mask")


def rule_vespo_sampling_mode(ctx: Context) -> list[Finding]:
    """GRPOTrainer.__init__: VESPO with vLLM and its importance-sampling correction needs a token-level mode, and
    TRL's default mode is sequence_mask."""
    cfg = ctx.config
    if cfg.loss_type != "vespo" or not cfg.use_vllm or not cfg.vllm_importance_sampling_correction:
        return []
    mode = cfg.vllm_importance_sampling_mode
    if mode in VESPO_IS_MODES:
        return []
    said = "" if FIELD.vllm_importance_sampling_mode in ctx.values else " (TRL's default)"
    return [finding(
        "vespo_sampling_mode", FIELD.vllm_importance_sampling_mode, "error",
        f"loss_type=vespo with vLLM and vllm_importance_sampling_correction: GRPOTrainer raises ValueError when it "
        f"starts unless vllm_importance_sampling_mode is {' or '.join(VESPO_IS_MODES)}; it is {mode!r}{said}.",
        "set vllm_importance_sampling_mode: token_truncate (or token_mask), or "
        "vllm_importance_sampling_correction: false")]


def rule_quantized_base(ctx: Context) -> list[Finding]:
    """A 4/8-bit base: transformers' Trainer refuses one without adapters (trainer_utils.
    validate_quantization_for_training); TRL's colocated vLLM refuses 8-bit (vllm_generation.py); the run's
    train.py passes the quantisation as GRPOTrainer's quantization_config, which may not also be in
    model_init_kwargs (grpo_trainer.py)."""
    cfg, out = ctx.config, []
    bits = "4" if cfg.load_in_4bit else "8" if cfg.load_in_8bit else None
    if bits is None:
        return out
    field = f"load_in_{bits}bit"
    if not cfg.use_peft:
        out.append(finding(
            "quantized_without_peft", field, "error",
            f"{field}=true without use_peft: a purely quantized model cannot be fine-tuned. transformers' Trainer "
            "raises ValueError when it starts ('You cannot perform fine-tuning on purely quantized models'): the "
            "quantized weights are frozen and nothing else is trainable.",
            "set use_peft: true (QLoRA: a LoRA adapter over the quantized base), or drop the quantisation for a "
            "full fine-tune"))
    if bits == "8" and cfg.use_vllm and cfg.vllm_mode == "colocate":
        out.append(finding(
            "vllm_8bit_colocate", field, "error",
            "load_in_8bit with a colocated vLLM: TRL raises 'vLLM does not support in-flight 8-bit quantization' "
            "when the engine starts (trl/generation/vllm_generation.py).",
            "use load_in_4bit (vLLM loads bitsandbytes 4-bit), or vllm_mode: server"))
    init = cfg.model_init_kwargs if isinstance(cfg.model_init_kwargs, dict) else {}
    if "quantization_config" in init:
        out.append(finding(
            "quantization_config_twice", FIELD.model_init_kwargs, "error",
            f"model_init_kwargs.quantization_config with {field}: train.py passes {field} to GRPOTrainer as its "
            "quantization_config, and GRPOTrainer raises ValueError when both are set.",
            f"remove quantization_config from model_init_kwargs (the {field} fields describe it)"))
    return out


def rule_vllm_tensor_parallel(ctx: Context) -> list[Finding]:
    """Colocated vLLM: `if not accelerator.num_processes % self.tensor_parallel_size == 0: raise`
    (trl/generation/vllm_generation.py), and TRL's help: the field applies to colocate mode only."""
    cfg = ctx.config
    tp = cfg.vllm_tensor_parallel_size
    if not cfg.use_vllm or not isinstance(tp, int) or isinstance(tp, bool) or tp <= 1:
        return []
    if cfg.vllm_mode == "server":
        return [finding(
            "vllm_tensor_parallel_ignored", FIELD.vllm_tensor_parallel_size, "warning",
            f"vllm_tensor_parallel_size={tp} with vllm_mode=server: TRL reads it in colocate mode only; the server's "
            "is `trl vllm-serve --tensor_parallel_size` (launch_training sets it from the memory plan).",
            "remove it (the server's tensor parallelism is set where it starts)")]
    world = ctx.training_processes
    if world % tp == 0:
        return []
    return [finding(
        "vllm_tensor_parallel_world", FIELD.vllm_tensor_parallel_size, "error",
        f"vllm_tensor_parallel_size={tp} does not divide the {world} training process(es): TRL raises ValueError "
        "when the colocated engine starts ('tensor_parallel_size must divide world size').",
        f"use a tensor-parallel size dividing {world} (1 on one GPU)")]


def rule_streaming_dispatch(ctx: Context) -> list[Finding]:
    """GRPOTrainer.__init__: an iterable (streamed) data set needs accelerator_config.dispatch_batches false."""
    accel = ctx.config.accelerator_config if isinstance(ctx.config.accelerator_config, dict) else {}
    if not ctx.config.dataset_streaming or accel.get("dispatch_batches") is not True:
        return []
    return [finding(
        "streaming_dispatch_batches", FIELD.accelerator_config, "error",
        "dataset_streaming with accelerator_config.dispatch_batches=true: GRPOTrainer raises ValueError when it "
        "starts (iterable data sets need dispatch_batches=False).", "remove dispatch_batches from accelerator_config")]


# Topic "start-up rehearsal" (what the config alone shows; what the architecture decides: recipe.architecture_rules).
RULES = (Rule(rule_vespo_sampling_mode), Rule(rule_quantized_base), Rule(rule_vllm_tensor_parallel),
         Rule(rule_streaming_dispatch))
